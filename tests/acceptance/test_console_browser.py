"""The console as an operator uses it: headless Chromium on a console served by the real
executable, on SQLite and PostgreSQL. Pages are read and forms clicked as a person would;
what the store holds afterwards is read with ``leaseward show --json``."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from tests.acceptance.acceptance_support import Daemon, DaemonPool, ok, read_lines, show
from tests.acceptance.browser_support import (
    TOKEN,
    WAIT_MILLISECONDS,
    Tab,
    chromium,
    console_address,
    dead_lettered_charge,
    log_in,
    open_tab,
    require_chromium,
    served_console,
    wait_for_state,
    watched,
)
from tests.acceptance.console_screenshots import PAGES, take_screenshots

pytestmark = pytest.mark.slow

SCRIPT = "<script>alert(1)</script>"
BROKEN_OUT = '"><img src=x onerror=alert(1)>'
SCRIPT_URL = "javascript:alert(1)"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium(require_chromium()) as launched:
        yield launched


@pytest.fixture
def store(store_url: str) -> str:
    ok("migrate", "--store", store_url)
    return store_url


def serving_daemon(daemons: DaemonPool, store: str, calls_file: Path) -> Daemon:
    """A worker of the demo app with the console beside it: what runs, runs for real."""
    return daemons.start(
        store,
        worker_id="w1",
        flags=("--console", "--console-port", "0"),
        LEASEWARD_CONSOLE_TOKEN=TOKEN,
        DEMO_CALLS_FILE=str(calls_file),
    )


def submit(store: str, agent: str, value: str) -> str:
    return ok("submit", agent, "--input", value, "--store", store).stdout.strip()


def calls_of(calls_file: Path, run_id: str, tool: str) -> list[dict[str, Any]]:
    return [c for c in read_lines(calls_file) if c["run_id"] == run_id and c["tool"] == tool]


def header(page: Page, name: str) -> str:
    """A field of the run page's header."""
    return page.locator(f"dl.header dt:text-is('{name}') + dd").inner_text()


def test_runs_are_filtered_and_a_runs_timeline_is_read(
    browser: Browser, daemons: DaemonPool, store: str, calls_file: Path
) -> None:
    address = console_address(serving_daemon(daemons, store, calls_file))
    greeting = submit(store, "greeter", '"hello"')
    confused = submit(store, "confused", '"clean up"')
    wait_for_state(store, greeting, "completed")
    wait_for_state(store, confused, "completed")

    tab = open_tab(browser, address)
    page = tab.page
    page.goto("/")
    expect(page).to_have_url(address + "runs")
    expect(page.locator("ul.counts li.state-completed")).to_have_text("completed: 2")
    expect(page.locator("table.runs tbody tr")).to_have_count(2)

    page.get_by_label("Agent").fill("confused")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"[?&]agent=confused(&|$)"))
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(confused)

    page.get_by_label("Run id or idempotency key").fill(greeting)
    page.get_by_label("Agent").fill("")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("greeter")

    page.get_by_role("link", name="Clear").click()
    page.get_by_role("link", name=confused).click()
    expect(page.locator("h1")).to_have_text(f"Run {confused}")
    assert header(page, "State") == "completed"
    assert header(page, "Agent") == "confused"
    assert header(page, "Result") == '"nothing was done"'

    steps = page.locator("table.timeline tbody tr")
    expect(steps).to_have_count(3)
    cells = [steps.nth(i).locator("td").all_inner_texts() for i in range(3)]
    assert [c[:3] for c in cells] == [
        ["0", "1", "provider"],
        ["1", "1", "tool"],
        ["2", "1", "provider"],
    ]
    # Each step's duration reads on one line, however wide its details are.
    for i in range(3):
        assert steps.nth(i).locator("td.took").evaluate(LINES) == 1
    call = steps.nth(1)
    expect(call.locator("td").nth(3)).to_have_text("delete_everything")
    expect(call.locator("td").nth(5)).to_have_text("failed")
    expect(call).to_contain_text("unknown tool 'delete_everything' (available: nap)")
    arguments = call.locator("details").filter(has_text="arguments:")
    expect(arguments.locator("pre")).to_be_hidden()
    arguments.locator("summary").click()
    expect(arguments.locator("pre")).to_contain_text('"path": "/"')
    tab.assert_quiet()


def test_an_approved_call_runs_once_and_the_run_finishes(
    browser: Browser, daemons: DaemonPool, store: str, calls_file: Path
) -> None:
    address = console_address(serving_daemon(daemons, store, calls_file))
    run_id = submit(store, "approver", '"pay ACME"')
    wait_for_state(store, run_id, "waiting_for_approval")

    tab = open_tab(browser, address)
    page = tab.page
    log_in(page, "alice")
    page.get_by_role("link", name="Approvals").click()
    request = page.locator("article.request").filter(has_text=run_id)
    expect(request.locator("pre")).to_contain_text('"amount_cents": 900')
    expect(request).to_contain_text("never expires")
    request.get_by_label("Note").fill("invoice checked")
    request.get_by_role("button", name="Approve").click()
    expect(page.locator(".flash")).to_contain_text(
        f"run {run_id}: call transfer-1 approved; every call is decided, the run is requeued"
    )
    expect(page).to_have_url(address + "approvals")

    page.goto(f"/runs/{run_id}")
    # The run page refreshes itself until the run is over.
    expect(page.locator("dl.header dd.state-completed")).to_be_visible()
    expect(page.locator("p.decided")).to_contain_text("approved by alice")
    expect(page.locator("p.decided")).to_contain_text("invoice checked")
    assert len(calls_of(calls_file, run_id, "transfer")) == 1
    [decided] = show(store, run_id)["requests"]
    assert (decided["decision"], decided["operator"]) == ("approved", "alice")
    tab.assert_quiet()


@pytest.mark.parametrize("verdict", ["applied", "not_applied"])
def test_an_interrupted_write_is_resolved_once(
    browser: Browser, daemons: DaemonPool, store: str, calls_file: Path, verdict: str
) -> None:
    run_id = dead_lettered_charge(store)
    before = show(store, run_id)
    address = console_address(serving_daemon(daemons, store, calls_file))
    button = "Resolve: applied" if verdict == "applied" else "Resolve: not applied"

    tab = open_tab(browser, address)
    page = tab.page
    log_in(page, "alice")
    # A second tab of the same operator, drawn before the resolution: its form is stale.
    other_tab = frozen_tab_of(tab, address)
    stale = other_tab.page
    stale.goto("/dead-letters")

    page.get_by_role("link", name="Dead letters").click()
    letter = page.locator("article.dead-letter").filter(has_text=run_id)
    expect(page.locator("h2")).to_have_text(["interrupted_write"])
    known = letter.locator("dl").inner_text()
    for fact in ("charge", "non_idempotent_write", "key-of-the-charge", '"amount_cents": 500'):
        assert fact in known
    expect(letter.locator("dt:text-is('Fencing token') + dd")).to_have_text(str(before["epoch"]))
    form = letter.locator("form").filter(has=page.get_by_role("button", name=button))
    form.get_by_label("Note").fill("checked the bank's statement")
    form.get_by_role("button", name=button).click()
    expect(page.locator(".flash")).to_contain_text(
        f"call recorded as {verdict.replace('_', ' ')}; requeued"
    )

    finished = wait_for_state(store, run_id, "completed")
    assert finished["epoch"] > before["epoch"]
    resolved = [s for s in finished["steps"] if s["resolved_by"] is not None]
    assert len(resolved) == 1
    assert (resolved[0]["tool"], resolved[0]["resolved_by"]) == ("charge", "alice")
    assert resolved[0]["output"]["resolution"] == verdict
    assert calls_of(calls_file, run_id, "charge") == [], "the resolved charge ran"

    again = stale.locator("article.dead-letter").filter(has_text=run_id)
    again_form = again.locator("form").filter(has=stale.get_by_role("button", name=button))
    again_form.get_by_label("Note").fill("twice")
    with stale.expect_response(f"**/runs/{run_id}/resolve") as answer:
        again_form.get_by_role("button", name=button).click()
    assert answer.value.status == 409
    expect(stale.locator("p.refused")).to_contain_text("changed since the page was drawn")
    assert show(store, run_id) == finished, "a second resolution changed the run"

    page.goto(f"/runs/{run_id}")
    expect(page.locator("dl.header dd.state-completed")).to_be_visible()
    tab.assert_quiet()
    other_tab.assert_quiet(refusals=1)


def frozen_tab_of(tab: Tab, address: str) -> Tab:
    """Another tab of ``tab``'s operator (its cookies) whose timers stand still: the
    dead letters page refreshes itself every few seconds, and on a slow machine it would
    redraw without the run resolved meanwhile before the test used its stale form."""
    browser = tab.page.context.browser
    assert browser is not None
    context = browser.new_context(base_url=address, storage_state=tab.page.context.storage_state())
    context.set_default_timeout(WAIT_MILLISECONDS)
    context.clock.install()
    context.clock.pause_at(time.time() + 1)
    return watched(context.new_page())


def cancel(page: Page) -> None:
    """Cancel the run of the page as an operator does: asking for the button, then it."""
    page.get_by_text("Cancel this run…").click()
    page.get_by_role("button", name="Cancel run").click()


def test_a_cancel_asks_first_and_the_page_holds_while_it_asks(browser: Browser, store: str) -> None:
    run_id = submit(store, "greeter", '"hello"')
    queued = show(store, run_id)
    with served_console(store) as address:
        tab = open_tab(browser, address)
        page = tab.page
        log_in(page, "alice")
        page.clock.install()
        page.goto(f"/runs/{run_id}")
        # A cancel is never undone: no one click on the run's page takes it.
        button = page.get_by_role("button", name="Cancel run")
        expect(button).to_be_hidden()
        page.get_by_text("Cancel this run…").click()
        expect(button).to_be_visible()
        expect(page.locator("details.confirm")).to_contain_text(
            "It stops now, for good: a cancelled run is never resumed."
        )
        assert show(store, run_id) == queued
        # The refresh of a run not over waits while the operator decides.
        page.evaluate("() => { window.drawnBefore = true; }")
        page.clock.run_for(12_000)
        page.wait_for_timeout(300)
        assert page.evaluate("() => window.drawnBefore === true")
        button.click()
        expect(page.locator(".flash")).to_contain_text(f"run {run_id}: cancelled")
        assert show(store, run_id)["state"] == "cancelled"
        tab.assert_quiet()


def _forge_cancel(page: Page, run_id: str, fields: dict[str, str]) -> int:
    """Post a cancel form the console never drew, from its own page; the answer's status."""
    with page.expect_response(f"**/runs/{run_id}/cancel") as answer:
        page.evaluate(
            """([action, fields]) => {
                const form = document.createElement("form");
                form.method = "post";
                form.action = action;
                for (const [name, value] of Object.entries(fields)) {
                    const input = document.createElement("input");
                    input.type = "hidden";
                    input.name = name;
                    input.value = value;
                    form.append(input);
                }
                document.body.append(form);
                form.submit();
            }""",
            [f"/runs/{run_id}/cancel", fields],
        )
    return answer.value.status


def test_an_action_without_login_or_without_its_csrf_token_is_refused(
    browser: Browser, store: str
) -> None:
    run_id = submit(store, "greeter", '"hello"')
    queued = show(store, run_id)
    drawn = {"drawn_state": queued["state"], "drawn_epoch": str(queued["epoch"])}
    with served_console(store) as address:
        tab = open_tab(browser, address)
        page = tab.page

        page.goto("/login")
        csrf = page.locator("form[action='/login'] input[name=csrf]").input_value()
        page.goto(f"/runs/{run_id}")
        expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
        expect(page.locator("p.hint")).to_contain_text("Log in to act on this run")
        assert _forge_cancel(page, run_id, {"csrf": csrf, **drawn}) == 403
        expect(page.locator("p.refused")).to_contain_text("log in to act")
        assert show(store, run_id) == queued

        log_in(page, "mallory")
        for tampering, why in (
            ("form.querySelector('input[name=csrf]').remove()", "carries no CSRF token"),
            (
                "form.querySelector('input[name=csrf]').value = 'forged'",
                "CSRF token is not this session's",
            ),
        ):
            page.goto(f"/runs/{run_id}")
            page.evaluate(
                f"() => {{ const form = document.querySelector(\"form[action$='/cancel']\"); "
                f"{tampering}; }}"
            )
            with page.expect_response(f"**/runs/{run_id}/cancel") as answer:
                cancel(page)
            assert answer.value.status == 403
            expect(page.locator("p.refused")).to_contain_text(why)
            assert show(store, run_id) == queued

        # The same form, untouched, is what works.
        page.goto(f"/runs/{run_id}")
        cancel(page)
        expect(page.locator(".flash")).to_contain_text(f"run {run_id}: cancelled")
        assert show(store, run_id)["state"] == "cancelled"
        tab.assert_quiet(refusals=3)


def test_logging_in_from_a_run_comes_back_to_it(browser: Browser, store: str) -> None:
    run_id = submit(store, "greeter", '"hello"')
    with served_console(store) as address:
        tab = open_tab(browser, address)
        page = tab.page
        page.goto(f"/runs/{run_id}")
        page.locator("p.hint").get_by_role("link", name="Log in").click()
        page.get_by_label("Token").fill(TOKEN)
        page.get_by_label("Your name").fill("alice")
        page.get_by_role("button", name="Log in").click()
        expect(page.locator(".flash")).to_have_text("logged in as alice")
        expect(page).to_have_url(re.compile(f"/runs/{run_id}$"))
        expect(page.get_by_text("Cancel this run…")).to_be_visible()
        tab.assert_quiet()


def test_the_runs_page_refreshes_itself_but_not_under_a_filter_being_typed(
    browser: Browser, store: str
) -> None:
    submit(store, "greeter", '"hello"')
    with served_console(store) as address:
        tab = open_tab(browser, address)
        page = tab.page
        # The page's timers on a clock the test moves: no test waits out a refresh.
        page.clock.install()
        # A date filter too: the browser reads its value back in a shorter form.
        page.goto("/runs?state=queued&created_after=1700000000")

        def still_drawn_after(seconds: int) -> bool:
            page.evaluate("() => { window.drawnBefore = true; }")
            page.clock.run_for(seconds * 1000)
            # A reload the timer asked for would be under way within this real moment.
            page.wait_for_timeout(300)
            return bool(page.evaluate("() => window.drawnBefore === true"))

        with page.expect_navigation():
            page.clock.run_for(6000)
        page.get_by_label("Agent").fill("gree")
        page.locator("h1").click()
        assert still_drawn_after(6)
        expect(page.get_by_label("Agent")).to_have_value("gree")
        page.get_by_label("Agent").fill("")
        page.get_by_label("State").select_option("completed")
        page.locator("h1").click()
        assert still_drawn_after(6)
        expect(page.get_by_label("State")).to_have_value("completed")
        tab.assert_quiet()


def test_a_refreshing_page_holds_while_text_on_it_is_selected(browser: Browser, store: str) -> None:
    submit(store, "greeter", '"hello"')
    with served_console(store) as address:
        tab = open_tab(browser, address)
        page = tab.page
        page.clock.install()
        page.goto("/runs")
        # The operator selects a run's text to copy it (an id, an idempotency key).
        page.locator("table.runs tbody td").nth(4).click(click_count=3)
        assert page.evaluate("() => String(window.getSelection())").strip() == "greeter"
        page.evaluate("() => { window.drawnBefore = true; }")
        page.clock.run_for(12_000)
        page.wait_for_timeout(300)
        assert page.evaluate("() => window.drawnBefore === true"), "reloaded under a selection"
        assert page.evaluate("() => String(window.getSelection())").strip() == "greeter"
        # Once it is let go, the page refreshes again.
        page.evaluate("() => window.getSelection().removeAllRanges()")
        with page.expect_navigation():
            page.clock.run_for(6000)
        tab.assert_quiet()


def _follow_until_routed(page: Page, run_id: str, routed: list[Any]) -> None:
    """Follow the link to a run, and wait (a bounded time) until the test's route for
    its page has taken the request into ``routed``."""
    page.locator(f"a[href='/runs/{run_id}']").first.click(no_wait_after=True)
    for _ in range(200):
        if routed:
            return
        page.wait_for_timeout(50)
    raise AssertionError("the link was followed, and its request never reached the route")


def test_a_refresh_never_cuts_off_a_page_being_left(browser: Browser, store: str) -> None:
    """A link followed while the server is slow to answer: the page's refresh, coming
    due meanwhile, must not reload the page under it and abort the navigation."""
    run_id = submit(store, "greeter", '"hello"')
    with served_console(store) as address:
        tab = open_tab(browser, address)
        page = tab.page
        page.clock.install()
        page.goto("/runs")
        held: list[Route] = []

        def hold(route: Route) -> None:
            held.append(route)

        page.route(f"**/runs/{run_id}", hold)
        # Its refresh half a second away, the operator follows the link to a run.
        page.clock.run_for(4_500)
        _follow_until_routed(page, run_id, held)
        # The answer is held while the refresh comes due (the page's clock runs on).
        page.wait_for_timeout(1_500)
        held[0].continue_()
        page.wait_for_url(f"**/runs/{run_id}")
        expect(page.locator("h1")).to_contain_text(run_id)
        tab.assert_quiet()


def test_a_page_left_in_vain_refreshes_again(browser: Browser, store: str) -> None:
    """A navigation the browser gives up (here its answer has no page, a 204) leaves the
    page where it was: its refresh holds for a while, then goes on."""
    run_id = submit(store, "greeter", '"hello"')
    with served_console(store) as address:
        tab = open_tab(browser, address)
        page = tab.page
        page.clock.install()
        page.goto("/runs")
        answered: list[str] = []

        def no_page(route: Route) -> None:
            answered.append(route.request.url)
            route.fulfill(status=204)

        page.route(f"**/runs/{run_id}", no_page)
        _follow_until_routed(page, run_id, answered)
        page.evaluate("() => { window.drawnBefore = true; }")
        page.clock.run_for(10_000)
        page.wait_for_timeout(300)
        assert page.evaluate("() => window.drawnBefore === true"), "reloaded while being left"
        with page.expect_navigation():
            page.clock.run_for(25_000)
        expect(page).to_have_url(re.compile(r"/runs$"))
        tab.assert_quiet()


def _assert_inert(tab: Tab) -> None:
    """Nothing of the payloads became markup: no element, no handler, no script link."""
    page = tab.page
    expect(page.locator("img")).to_have_count(0)
    expect(page.locator("[onerror]")).to_have_count(0)
    expect(page.locator("a[href^='javascript:' i]")).to_have_count(0)
    # The console's one script is its own file; nothing inline.
    scripts = page.locator("script")
    expect(scripts).to_have_count(1)
    assert scripts.get_attribute("src") == "/static/refresh.js"
    tab.assert_quiet()


def test_markup_and_script_that_a_model_or_tool_wrote_never_run(
    browser: Browser, daemons: DaemonPool, store: str, calls_file: Path
) -> None:
    address = console_address(serving_daemon(daemons, store, calls_file))
    payloads = json.dumps({"note": SCRIPT, "name": BROKEN_OUT, "homepage": SCRIPT_URL})
    echoed = submit(store, "echoer", payloads)
    # An agent name and an idempotency key are whatever the submitter typed.
    stranger = ok(
        "submit", BROKEN_OUT, "--input", f'"{SCRIPT_URL}"', "--idempotency-key", SCRIPT,
        "--store", store,
    ).stdout.strip()  # fmt: skip
    finished = wait_for_state(store, echoed, "completed")
    assert SCRIPT in finished["result"] and BROKEN_OUT[2:] in finished["result"]

    tab = open_tab(browser, address)
    page = tab.page
    page.goto("/runs")
    expect(page.locator("table.runs tbody tr")).to_have_count(2)
    expect(page.get_by_role("cell", name=BROKEN_OUT)).to_have_count(1)
    _assert_inert(tab)

    page.goto(f"/runs/{echoed}")
    for summary in page.locator("details summary").all():
        summary.click()
    expect(page.locator("pre").filter(has_text=SCRIPT).first).to_be_visible()
    expect(
        page.locator("pre").filter(has_text="<img src=x onerror=alert(1)>").first
    ).to_be_visible()
    expect(page.locator("pre").filter(has_text=SCRIPT_URL).first).to_be_visible()
    assert SCRIPT in header(page, "Result")
    _assert_inert(tab)

    page.goto(f"/runs/{stranger}")
    assert header(page, "Agent") == BROKEN_OUT
    assert header(page, "Idempotency key") == SCRIPT
    _assert_inert(tab)

    page.goto(f"/runs?search={SCRIPT}")
    expect(page.get_by_label("Run id or idempotency key")).to_have_value(SCRIPT)
    expect(page.locator("table.runs tbody tr")).to_have_count(1)
    _assert_inert(tab)


LINES = (
    "element => { const r = document.createRange(); r.selectNodeContents(element); "
    "return new Set(Array.from(r.getClientRects(), b => Math.round(b.bottom))).size; }"
)
"""How many lines an element's text takes."""


def _overflows(page: Page) -> int:
    """How far the page is wider than the window: a text that never wraps widens it."""
    return int(page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth"))


def test_a_long_text_without_spaces_wraps_instead_of_widening_the_page(
    browser: Browser, store: str
) -> None:
    # A submitter's agent name and key, as a model's error or a tool's name, are anyone's.
    run_id = ok(
        "submit", "A" * 400, "--input", "1", "--idempotency-key", "K" * 200, "--store", store,
    ).stdout.strip()  # fmt: skip
    with served_console(store) as address:
        tab = open_tab(browser, address)
        page = tab.page
        page.set_viewport_size({"width": 1280, "height": 800})
        for path in ["/runs", f"/runs/{run_id}"]:
            page.goto(path)
            assert _overflows(page) == 0, path
        # In the table the name is cut, whole in its title; the short cells beside it
        # (the mode here) stay whole words, on one line.
        page.goto("/runs")
        agent = page.locator("table.runs tbody tr td").nth(4)
        assert agent.inner_text() == "A" * 37 + "..."
        assert agent.get_attribute("title") == "A" * 400
        mode = page.locator("table.runs tbody tr td").nth(3)
        assert mode.inner_text() == "queued"
        assert mode.evaluate(LINES) == 1
        # Nor does a run's id or its time, in a table of ordinary names.
        ok("submit", "greeter", "--input", "1", "--store", store)
        page.goto("/runs?agent=greeter")
        cells = page.locator("table.runs tbody tr").first.locator("td")
        expect(cells.nth(4)).to_have_text("greeter")
        for cell in (cells.nth(0), cells.nth(7)):
            assert cell.evaluate(LINES) == 1, cell.inner_text()
        tab.assert_quiet()


def test_on_a_narrow_window_a_table_scrolls_and_the_page_does_not(
    browser: Browser, store: str
) -> None:
    run_id = submit(store, "confused", '"clean up"')
    with served_console(store) as address:
        tab = open_tab(browser, address)
        page = tab.page
        page.set_viewport_size({"width": 420, "height": 800})
        for path in ["/runs", f"/runs/{run_id}"]:
            page.goto(path)
            assert _overflows(page) == 0, path
        page.goto("/runs")
        table = page.locator("div.wide").first
        assert table.evaluate("box => box.scrollWidth > box.clientWidth")
        # The counts above it wrap whole: "waiting_for_approval" is not broken up.
        count = page.locator("ul.counts li.state-waiting_for_approval")
        assert count.evaluate(LINES) == 1
        tab.assert_quiet()


def test_two_operators_decide_one_request_and_the_second_sees_who_decided(
    browser: Browser, daemons: DaemonPool, store: str, calls_file: Path
) -> None:
    address = console_address(serving_daemon(daemons, store, calls_file))
    run_id = submit(store, "approver", '"pay ACME"')
    wait_for_state(store, run_id, "waiting_for_approval")

    alice, bob = open_tab(browser, address), open_tab(browser, address)
    log_in(alice.page, "alice")
    log_in(bob.page, "bob")
    alice.page.goto("/approvals")
    bob.page.goto("/approvals")
    # A reason typed in holds the page: it does not refresh under the operator's hands.
    bob.page.get_by_label("Reason").fill("too much")

    alice.page.get_by_role("button", name="Approve").click()
    expect(alice.page.locator(".flash")).to_contain_text("call transfer-1 approved")

    with bob.page.expect_response(f"**/runs/{run_id}/reject") as answer:
        bob.page.get_by_role("button", name="Reject").click()
    assert answer.value.status == 409
    refused = bob.page.locator("p.refused")
    expect(refused).to_contain_text("call transfer-1 was already approved by alice")
    expect(refused).to_contain_text("nothing changed")

    wait_for_state(store, run_id, "completed")
    [decided] = show(store, run_id)["requests"]
    assert (decided["decision"], decided["operator"]) == ("approved", "alice")
    assert len(calls_of(calls_file, run_id, "transfer")) == 1
    bob.page.goto(f"/runs/{run_id}")
    expect(bob.page.locator("p.decided")).to_contain_text("approved by alice")
    alice.assert_quiet()
    bob.assert_quiet(refusals=1)


def test_the_documentations_screenshots_are_taken(browser: Browser, tmp_path: Path) -> None:
    taken = take_screenshots(browser, tmp_path)
    assert [p.name for p in taken] == [f"console-{name}.png" for name in PAGES]
    for path in taken:
        assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), path
