"""The console's pages, their JSON twins and its safeguards, over a real SQLite store:
every page renders, filters narrow, pages continue by keyset, untrusted text stays text,
and no action is taken without a login and a CSRF token."""

from __future__ import annotations

import re
import time

import anyio
import httpx
import pytest

from leaseward import ProviderReply, ToolCall, ToolEffect
from leaseward.client import Client, new_run_id
from leaseward.console import pages, security
from leaseward.console.listing import PAGE_SIZE
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import Event, Reason, RunMode, RunState, StepKind, StepStatus
from leaseward.runtime.runs import NewRun
from leaseward.runtime.settlements import Settlement
from leaseward.runtime.workers import WorkerInfo, WorkerRegistration
from leaseward.storage import BatchItem, open_store
from tests.integration.console_support import TOKEN, console, forms_of, logged_in
from tests.integration.support import ghost_claims, provider_step
from tests.integration.test_operator import dead_letter
from tests.stores import created

pytestmark = pytest.mark.anyio

SCRIPT = "<script>alert(1)</script>"
ATTRIBUTE = '"><img src=x onerror=alert(1)>'
LINK = "javascript:alert(1)"
LONE = "\ud800"
PAGES = ["/runs", "/dead-letters", "/approvals", "/workers", "/login"]
APIS = ["/api/runs", "/api/dead-letters", "/api/approvals", "/api/workers"]


@pytest.fixture
def url(db_url: str) -> str:
    return created(db_url)


async def hostile_run(url: str, text: str = SCRIPT) -> str:
    """A dead-lettered run whose every field a model or tool wrote carries a payload:
    markup, and ``text`` where the model's, the tool's and the error's words go."""
    store = await open_store(url)
    try:
        run_id = new_run_id()
        await store.create_run(
            NewRun(
                id=run_id,
                agent="hostile",
                mode=RunMode.QUEUED,
                input_json=dump_json({"q": text}),
                idempotency_key=ATTRIBUTE,
                request_digest="d",
            )
        )
        [claimed] = await store.claim_runs("ghost:1", 1, 30.0, ["hostile"])
        reply = ProviderReply(text=text, tool_calls=[ToolCall(ATTRIBUTE, {"x": text}, "call-1")])
        call = StepWrite(
            seq=1,
            kind=StepKind.TOOL,
            status=StepStatus.SUCCEEDED,
            tool=ATTRIBUTE,
            call_id="call-1",
            effect=ToolEffect.READ_ONLY,
            arguments_json=dump_json({"x": text}),
            output_json=dump_json({"link": LINK, "html": text, "quote": ATTRIBUTE}),
        )
        settlement = Settlement(Event.DEAD_LETTER, Reason.NOT_RETRYABLE, error=text + ATTRIBUTE)
        await store.commit_batch(
            [
                BatchItem(
                    run_id,
                    claimed.epoch,
                    steps=(provider_step(0, reply), call),
                    settlement=settlement,
                )
            ]
        )
        return run_id
    finally:
        await store.aclose()


def assert_inert(html: str) -> None:
    """Nothing the payloads carry can run: the one script is the console's own file."""
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/refresh.js" defer>']
    assert "<img" not in html
    assert not re.search(r"""(href|src|action)\s*=\s*["']?\s*javascript:""", html, re.I)
    assert "onerror=alert(1)>" not in html


async def test_an_empty_page_says_why_it_is_empty(url: str) -> None:
    async with console(url) as page:
        empty = {
            "/runs": "No runs yet: they show here once submitted",
            "/dead-letters": "No dead-lettered runs.",
            "/approvals": "Nothing waits for a person.",
            "/workers": "No workers have registered.",
        }
        for path, said in empty.items():
            assert said in (await page.http.get(path)).text, path
        await page.client.submit("chat", "hi")
        filtered = (await page.http.get("/runs?agent=nobody")).text
        assert "No runs match these filters" in filtered and "No runs yet" not in filtered


async def test_every_page_renders_and_the_root_redirects_to_the_runs(url: str) -> None:
    async with console(url) as page:
        run_id = await page.client.submit("chat", "hi")
        root = await page.http.get("/")
        assert (root.status_code, root.headers["location"]) == (302, "/runs")
        for path in [*PAGES, f"/runs/{run_id}"]:
            answer = await page.http.get(path)
            assert answer.status_code == 200, path
            assert answer.headers["content-type"].startswith("text/html")
        assert run_id in (await page.http.get("/runs")).text
        health = await page.http.get("/healthz")
        assert (health.status_code, health.text) == (200, "ok")


async def test_an_unknown_run_or_page_is_404_and_bad_filters_400(url: str) -> None:
    async with console(url) as page:
        assert (await page.http.get("/runs/missing")).status_code == 404
        missing = await page.http.get("/api/runs/missing")
        assert missing.status_code == 404 and "missing" in missing.json()["error"]
        assert (await page.http.get("/nowhere")).status_code == 404
        for query in ["state=sleeping", "mode=x", "created_after=yesterday", "after=nonsense"]:
            assert (await page.http.get(f"/runs?{query}")).status_code == 400, query
            assert (await page.http.get(f"/api/runs?{query}")).status_code == 400, query


async def test_a_refusal_is_titled_by_what_went_wrong_and_leads_back_to_the_run(
    url: str,
) -> None:
    async with console(url) as page:
        run_id = await page.client.submit("chat", "hi")
        login = forms_of((await page.http.get("/login")).text, "/login")[0]
        unnamed = {**login.fields, "token": TOKEN, "operator": "al\u202eice"}
        bad_name = await page.http.post("/login", data=unnamed)
        assert (
            bad_name.status_code == 400 and '<a href="/login">Back to log in</a>' in bad_name.text
        )
        missing = await page.http.get("/nowhere")
        assert "<h1>Not found</h1>" in missing.text and "Refused" not in missing.text
        assert '<a href="/runs">Back to the runs</a>' in missing.text
        alice = await logged_in(page)
        drawn = forms_of((await alice.http.get(f"/runs/{run_id}")).text, f"/runs/{run_id}/cancel")
        fields = drawn[0].fields
        back = f'<a href="/runs/{run_id}">Back to run {run_id}</a>'
        # A form the operator got wrong (a resolution without its verdict), and one the run
        # moved on from: both lead back to the run's page, where it can be done again.
        unread = await alice.http.post(f"/runs/{run_id}/resolve", data=fields)
        assert unread.status_code == 400 and "<h1>Not understood</h1>" in unread.text
        assert back in unread.text
        # Opened again from the address bar, the action's address shows the run.
        again = await alice.http.get(f"/runs/{run_id}/resolve")
        assert (again.status_code, again.headers["location"]) == (303, f"/runs/{run_id}")
        moved = await alice.http.post(f"/runs/{run_id}/cancel", data={**fields, "drawn_epoch": "7"})
        assert moved.status_code == 409 and "<h1>Not done</h1>" in moved.text
        assert back in moved.text


async def test_a_time_no_calendar_holds_or_a_nul_is_refused_as_bad_input(store_url: str) -> None:
    async with console(created(store_url)) as page:
        await page.client.submit("chat", "hi")
        for query in [
            # Nanoseconds for seconds; far before the year 1.
            "created_after=1796597640000000000",
            "created_before=-99999999999999999",
            "created_after=-1e308",
            # PostgreSQL's text holds no NUL, so no agent, id or key has one.
            "agent=%00",
            "search=x%00y",
        ]:
            for path in ("/runs", "/api/runs"):
                answer = await page.http.get(f"{path}?{query}")
                assert answer.status_code == 400, (path, query, answer.text)
        years = await page.http.get("/api/runs?created_after=1796597640000000000")
        assert "between the years 1 and 9999" in years.json()["error"]
        for path in ("/runs/%00", "/api/runs/x%00y"):
            assert (await page.http.get(path)).status_code == 404, path
        assert (await page.http.get("/healthz")).status_code == 200


async def test_the_filter_form_shows_the_time_it_filters_on_to_the_millisecond(
    url: str,
) -> None:
    async with console(url) as page:
        html = (await page.http.get("/runs?created_after=1796597655.75")).text
        assert 'name="created_after" step="any"\n    value="2026-12-06T22:54:15.750"' in html
        html = (await page.http.get("/runs?created_before=2026-12-06T22:54:15Z")).text
        assert 'value="2026-12-06T22:54:15"' in html


async def test_the_dead_letters_page_says_when_it_shows_only_the_newest(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "LIST_LIMIT", 2)
    store = await open_store(url)
    try:
        waiting = await dead_letter(store, Reason.INTERRUPTED_WRITE, outcome=None)
        newer = [
            await dead_letter(store, Reason.NOT_RETRYABLE, outcome=StepStatus.SUCCEEDED)
            for _ in range(3)
        ]
    finally:
        await store.aclose()
    async with console(url) as page:
        html = (await page.http.get("/dead-letters")).text
        # The write that waits for a verdict stays on the page under newer letters.
        assert "3 of 4 dead letters" in html and "every interrupted write" in html
        assert html.index(waiting) < html.index(newer[-1])
        assert newer[0] not in html
        assert 'href="/runs?state=dead_lettered"' in html
        assert 'href="/runs?state=dead_lettered&amp;reason=interrupted_write"' in html
        assert 'data-refresh="5"' in html
        listed = (await page.http.get("/runs?state=dead_lettered&reason=interrupted_write")).text
        assert waiting in listed and not any(run_id in listed for run_id in newer)
        api = await page.http.get("/api/runs", params={"reason": "not_retryable"})
        assert {run["id"] for run in api.json()["runs"]} == set(newer)
        # The JSON twin takes the CLI's --reason and --limit.
        twin = await page.http.get("/api/dead-letters", params={"limit": "10"})
        assert len(twin.json()) == 4
        twin = await page.http.get(
            "/api/dead-letters", params={"reason": "interrupted_write", "limit": "1"}
        )
        assert [run["id"] for run in twin.json()] == [waiting]
        for bad in [{"limit": "0"}, {"limit": "x"}, {"limit": "10001"}, {"reason": "nope"}]:
            refused = await page.http.get("/api/dead-letters", params=bad)
            assert refused.status_code == 400 and refused.json()["error"]
        assert (await page.http.get("/api/approvals", params={"limit": "-1"})).status_code == 400


async def test_a_workers_heartbeat_reads_as_the_cli_prints_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = WorkerInfo("w-old", "h", 1, ("chat",), 0.0, 0.0, 2 * 86400 + 3 * 3600 + 5.0, 30.0)
    live = WorkerInfo("w-new", "h", 2, ("chat",), 0.0, 0.0, 0.25, 30.0)
    draining = WorkerInfo("w-leaving", "h", 3, ("chat",), 0.0, 0.0, 0.5, 30.0, 0.0)

    async def workers(self: Client) -> list[WorkerInfo]:
        return [live, draining, gone]

    monkeypatch.setattr(Client, "workers", workers)
    async with console(url) as page:
        html = (await page.http.get("/workers")).text
    # Two days gone read as two days, as `leaseward workers` says, not 183605.0 s.
    assert "<td>2d3h ago</td>" in html and "<td>0.2s ago</td>" in html
    # A worker that stopped claiming to let its runs finish says so.
    for status in ("live", "draining", "gone"):
        assert f'<tr class="{status}">' in html and f"<td>{status}</td>" in html


async def test_the_json_twins_print_what_the_cli_prints(url: str) -> None:
    async with console(url) as page:
        run_id = await page.client.submit("chat", {"n": 1}, idempotency_key="order-7")
        listed = (await page.http.get("/api/runs")).json()
        assert [r["id"] for r in listed["runs"]] == [run_id] and listed["next"] is None
        shown = listed["runs"][0]
        assert (shown["state"], shown["idempotency_key"], shown["agent"]) == (
            "queued",
            "order-7",
            "chat",
        )
        assert "lease_owner" not in shown
        document = (await page.http.get(f"/api/runs/{run_id}")).json()
        assert (document["id"], document["steps"], document["requests"]) == (run_id, [], [])
        for path in APIS[1:]:
            assert (await page.http.get(path)).json() == []


async def test_filters_narrow_the_runs_and_the_search_finds_an_id_or_a_key(url: str) -> None:
    async with console(url) as page:
        first = await page.client.submit("alpha", 1)
        keyed = await page.client.submit("beta", 2, idempotency_key="order-9")
        await page.client.cancel(first)
        interactive = new_run_id()
        await page.client.store.create_run(
            NewRun(
                id=interactive,
                agent="gamma",
                mode=RunMode.INTERACTIVE,
                input_json="3",
                lease_owner="here",
                lease_seconds=60.0,
            )
        )

        async def ids(query: str) -> set[str]:
            answer = await page.http.get(f"/api/runs?{query}")
            assert answer.status_code == 200, answer.text
            return {r["id"] for r in answer.json()["runs"]}

        assert await ids("") == {first, keyed, interactive}
        assert await ids("state=cancelled") == {first}
        assert await ids("agent=beta") == {keyed}
        assert await ids("mode=interactive") == {interactive}
        assert await ids("search=order-9") == {keyed}
        assert await ids(f"search={first}") == {first}
        # A run id copied in upper case is the same run; a key keeps its case.
        assert await ids(f"search={first.upper()}") == {first}
        assert await ids("search=ORDER-9") == set()
        assert first in (await page.http.get(f"/runs/{first.upper()}")).text
        assert (await page.http.get(f"/api/runs/{first.upper()}")).json()["id"] == first
        assert await ids("reason=cancelled") == {first}
        created_at = (await page.client.get(keyed)).created_at
        assert keyed in await ids(f"created_after={created_at!r}")
        assert await ids(f"created_before={created_at!r}") == await ids("") - await ids(
            f"created_after={created_at!r}"
        )
        assert await ids("created_after=2000-01-01T00:00") == {first, keyed, interactive}
        assert await ids("created_before=2000-01-01T00:00") == set()
        html = (await page.http.get("/runs?agent=beta")).text
        assert keyed in html and first not in html


async def test_pages_continue_by_cursor_and_counts_stand_at_the_top(url: str) -> None:
    async with console(url) as page:
        ids = set(await page.client.submit_many("chat", range(PAGE_SIZE + 5)))
        first = (await page.http.get("/api/runs")).json()
        assert len(first["runs"]) == PAGE_SIZE and first["next"]
        rest = (await page.http.get("/api/runs", params={"after": first["next"]})).json()
        assert len(rest["runs"]) == 5 and rest["next"] is None
        assert {r["id"] for r in first["runs"] + rest["runs"]} == ids
        await page.client.submit("other", "x")
        html = (await page.http.get("/runs?agent=chat")).text
        # The counts are of all runs, and say so: a filter does not narrow them.
        assert "<li>All runs:</li>" in html and "queued</a>: 56" in html
        next_link = re.search(r'<a rel="next" href="([^"]+)"', html)
        assert next_link is not None and "agent=chat" in next_link.group(1)
        assert 'rel="first"' not in html
        following = await page.http.get(next_link.group(1).replace("&amp;", "&"))
        assert following.status_code == 200 and 'rel="next"' not in following.text
        # A later page leads back to the first, under the same filters.
        first_link = re.search(r'<a rel="first" href="([^"]+)"', following.text)
        assert first_link is not None and first_link.group(1) == "/runs?agent=chat"


async def test_runs_that_need_a_person_stand_out(url: str) -> None:
    run_id = await hostile_run(url)
    async with console(url) as page:
        html = (await page.http.get("/runs")).text
        assert f'<tr class="dead-letter">\n  <td><a href="/runs/{run_id}" ' in html


async def test_a_queued_run_no_live_worker_serves_says_why_it_waits(url: str) -> None:
    async with console(url) as page:
        run_id = await page.client.submit("chat", "hi")
        note = "no live worker serves chat; the run waits until one does"
        assert note in (await page.http.get(f"/runs/{run_id}")).text
        assert "no live worker serves its agent" in (await page.http.get("/runs")).text
        serving = WorkerRegistration("w1", "host", 1, ("chat",), stale_after_seconds=60.0)
        await page.client.store.register_worker(serving)
        assert note not in (await page.http.get(f"/runs/{run_id}")).text
        assert "no live worker serves" not in (await page.http.get("/runs")).text


async def expired_run(url: str) -> str:
    """A run claimed by a worker that is gone, its lease already expired; its id."""
    store = await open_store(url)
    try:
        run_id = await ghost_claims(store, "payer", (provider_step(0, ProviderReply(text="hi")),))
    finally:
        await store.aclose()
    await anyio.sleep(0.05)
    return run_id


async def test_a_running_run_whose_lease_expired_stands_out(url: str) -> None:
    run_id = await expired_run(url)
    async with console(url) as page:
        html = (await page.http.get("/runs")).text
        assert f'<tr class="lease-expired">\n  <td><a href="/runs/{run_id}" ' in html
        assert "lease expired" in (await page.http.get(f"/runs/{run_id}")).text


async def test_an_expired_lease_no_live_worker_will_reap_says_how_to_reap_it(url: str) -> None:
    run_id = await expired_run(url)
    note = "no live worker reaps expired leases now: start a daemon, or run"
    async with console(url) as page:
        assert note in (await page.http.get(f"/runs/{run_id}")).text
        reaping = WorkerRegistration("w1", "host", 1, ("chat",), stale_after_seconds=60.0)
        await page.client.store.register_worker(reaping)
        assert note not in (await page.http.get(f"/runs/{run_id}")).text


async def test_what_models_and_tools_wrote_is_escaped_everywhere(url: str) -> None:
    run_id = await hostile_run(url)
    async with console(url) as page:
        alice = await logged_in(page)
        for path in [f"/runs/{run_id}", "/runs", "/dead-letters", f"/runs?search={SCRIPT}"]:
            html = (await alice.http.get(path)).text
            assert_inert(html)
        html = (await alice.http.get(f"/runs/{run_id}")).text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
        assert LINK in html
        # What the run was submitted with, shown as its JSON.
        assert "<dt>Input</dt><dd><pre>{\n  &#34;q&#34;: &#34;&lt;script&gt;" in html
        document = (await page.http.get(f"/api/runs/{run_id}")).json()
        assert document["steps"][1]["output"]["link"] == LINK
        assert document["input"] == {"q": SCRIPT}


async def test_a_calls_arguments_are_shown_once_in_its_row(url: str) -> None:
    run_id = await hostile_run(url)
    async with console(url) as page:
        html = (await page.http.get(f"/runs/{run_id}")).text
    [row] = [r for r in html.split("<tr ")[1:] if "effect-read_only" in r]
    # Once, where they open in full; a second shortened line above it said the same.
    assert row.count("arguments: ") == 1
    assert "<summary>arguments: " in row


async def test_a_lone_surrogate_a_model_or_tool_wrote_is_shown_escaped_not_a_500(
    url: str,
) -> None:
    # Decoded JSON may hold one; the store keeps it, but no UTF-8 encodes it.
    run_id = await hostile_run(url, f"a{LONE}b")
    async with console(url) as page:
        for path in [f"/runs/{run_id}", "/runs", "/dead-letters"]:
            answer = await page.http.get(path)
            assert answer.status_code == 200, path
            assert_inert(answer.text)
        assert "a\\ud800b" in (await page.http.get(f"/runs/{run_id}")).text
        answer = await page.http.get(f"/api/runs/{run_id}")
        assert answer.status_code == 200
        [_, call] = answer.json()["steps"]
        assert (call["arguments"]["x"], call["output"]["html"]) == (f"a{LONE}b", f"a{LONE}b")


async def test_every_response_carries_the_security_headers(url: str) -> None:
    async with console(url) as page:
        answers = [await page.http.get(p) for p in [*PAGES, *APIS, "/nowhere", "/healthz"]]
        answers.append(await page.http.get("/static/console.css"))
        answers.append(await page.http.post("/runs/x/cancel", data={}))
        for answer in answers:
            policy = answer.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
            assert "default-src 'self'" in policy and "unsafe-inline" not in policy
            assert answer.headers["x-content-type-options"] == "nosniff"


async def test_login_sets_a_strict_http_only_cookie_and_never_shows_the_token(url: str) -> None:
    async with console(url) as page:
        login = forms_of((await page.http.get("/login")).text, "/login")[0]
        wrong = await page.http.post(
            "/login", data={**login.fields, "token": "not-it", "operator": "mallory"}
        )
        assert wrong.status_code == 403 and "mallory" not in wrong.text
        right = await page.http.post(
            "/login", data={**login.fields, "token": TOKEN, "operator": "alice"}
        )
        assert right.status_code == 303
        cookie = right.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "secure" not in cookie
        for path in [*PAGES, *APIS]:
            assert TOKEN not in (await page.http.get(path)).text
        assert "operator <strong>alice</strong>" in (await page.http.get("/runs")).text


async def test_a_cookie_copied_before_a_logout_opens_nothing_after_it(url: str) -> None:
    async with console(url) as page:
        run_id = await page.client.submit("chat", "hi")
        path = f"/runs/{run_id}/cancel"
        alice = await logged_in(page)
        form = forms_of((await alice.http.get(f"/runs/{run_id}")).text, path)[0]
        copied = dict(alice.http.cookies)
        logout = forms_of((await alice.http.get("/runs")).text, "/logout")[0]
        assert (await alice.http.post("/logout", data=logout.fields)).status_code == 303

        transport = page.http._transport
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", cookies=copied
        ) as thief:
            assert "operator <strong>alice</strong>" not in (await thief.get("/runs")).text
            refused = await thief.post(path, data=form.fields)
            assert refused.status_code == 403
        assert (await page.client.get(run_id)).state is RunState.QUEUED


async def test_a_session_ends_twelve_hours_after_its_login_however_often_it_acts(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with console(url) as page:
        alice = await logged_in(page)
        logged_in_at = time.time()
        first, second = [await page.client.submit("chat", n) for n in range(2)]

        async def drawn_cancel(run_id: str) -> dict[str, str]:
            path = f"/runs/{run_id}/cancel"
            return forms_of((await alice.http.get(f"/runs/{run_id}")).text, path)[0].fields

        # Eleven hours on: acting signs the cookie anew, which must not lengthen it.
        monkeypatch.setattr(time, "time", lambda: logged_in_at + 11 * 3600)
        assert (
            await alice.http.post(f"/runs/{first}/cancel", data=await drawn_cancel(first))
        ).status_code == 303
        later = await drawn_cancel(second)
        monkeypatch.setattr(time, "time", lambda: logged_in_at + security.SESSION_SECONDS + 60)
        assert "operator <strong>alice</strong>" not in (await alice.http.get("/runs")).text
        refused = await alice.http.post(f"/runs/{second}/cancel", data=later)
        assert refused.status_code == 403
        assert (await page.client.get(second)).state is RunState.QUEUED


async def test_over_https_the_session_cookie_is_secure(url: str) -> None:
    # Behind a proxy that ends TLS, under the proxy's name.
    async with console(url, allowed_hosts=("console.example",)) as page:
        transport = page.http._transport
        async with httpx.AsyncClient(
            transport=transport, base_url="https://console.example"
        ) as tls:
            answer = await tls.get("/login")
            assert "secure" in answer.headers["set-cookie"].lower()


async def test_an_action_needs_a_login_and_a_csrf_token_and_changes_nothing_without(
    url: str,
) -> None:
    async with console(url) as page:
        run_id = await page.client.submit("chat", "hi")
        path = f"/runs/{run_id}/cancel"
        # Not logged in: the page draws no action, and a forged one is refused.
        assert forms_of((await page.http.get(f"/runs/{run_id}")).text, path) == []
        csrf = forms_of((await page.http.get("/login")).text, "/login")[0].fields["csrf"]
        drawn = {"csrf": csrf, "drawn_state": "queued", "drawn_epoch": "0"}
        anonymous = await page.http.post(path, data=drawn)
        assert anonymous.status_code == 403 and "log in" in anonymous.text
        alice = await logged_in(page)
        form = forms_of((await alice.http.get(f"/runs/{run_id}")).text, path)[0]
        for forged, why in [
            ({**form.fields, "csrf": "forged"}, "CSRF token is not this session"),
            ({k: v for k, v in form.fields.items() if k != "csrf"}, "carries no CSRF token"),
        ]:
            refused = await alice.http.post(path, data=forged)
            assert refused.status_code == 403 and why in refused.text
        # A login form posted from elsewhere is refused too.
        assert (
            await alice.http.post("/login", data={"token": TOKEN, "operator": "x"})
        ).status_code == 403
        assert (await page.client.get(run_id)).state is RunState.QUEUED
        done = await alice.http.post(path, data=form.fields)
        assert done.status_code == 303
        assert (await page.client.get(run_id)).state is RunState.CANCELLED


async def test_a_form_from_before_a_restart_says_the_session_ended(url: str) -> None:
    async with console(url) as before, console(url) as after:
        run_id = await before.client.submit("chat", "hi")
        path = f"/runs/{run_id}/cancel"
        alice = await logged_in(before)
        form = forms_of((await alice.http.get(f"/runs/{run_id}")).text, path)[0]
        login = forms_of((await before.http.get("/login")).text, "/login")[0]
        # The console restarts (a new key signs its sessions); the pages stay open.
        restarted = httpx.AsyncClient(
            transport=after.http._transport, base_url="http://127.0.0.1", cookies=alice.http.cookies
        )
        async with restarted:
            refused = await restarted.post(path, data=form.fields)
            assert refused.status_code == 403 and "CSRF" not in refused.text
            assert "session this page was drawn for has ended" in refused.text
            assert (await after.client.get(run_id)).state is RunState.QUEUED
        async with httpx.AsyncClient(
            transport=after.http._transport,
            base_url="http://127.0.0.1",
            cookies=before.http.cookies,
        ) as stranger:
            # A login form of the old console, posted to the new one, is drawn again.
            again = await stranger.post(
                "/login", data={**login.fields, "token": TOKEN, "operator": "bob"}
            )
            assert again.status_code == 403 and "drawn before the console restarted" in again.text
            [fresh] = forms_of(again.text, "/login")
            done = await stranger.post(
                "/login", data={**fresh.fields, "token": TOKEN, "operator": "bob"}
            )
            assert done.status_code == 303


async def test_a_tab_drawn_before_a_logout_elsewhere_is_told_to_reload(url: str) -> None:
    async with console(url) as page:
        run_id = await page.client.submit("chat", "hi")
        path = f"/runs/{run_id}/cancel"
        alice = await logged_in(page)
        stale = forms_of((await alice.http.get(f"/runs/{run_id}")).text, path)[0]
        stale_login = forms_of((await page.http.get("/login")).text, "/login")[0]
        # Another tab of the same browser logs out, and then in again.
        logout = forms_of((await alice.http.get("/runs")).text, "/logout")[0]
        assert (await alice.http.post("/logout", data=logout.fields)).status_code == 303
        login = forms_of((await alice.http.get("/login")).text, "/login")[0]
        await alice.http.post("/login", data={**login.fields, "token": TOKEN, "operator": "al"})
        refused = await alice.http.post(path, data=stale.fields)
        assert refused.status_code == 403
        assert "drawn before you logged in or out" in refused.text and "reload" in refused.text
        assert (await page.client.get(run_id)).state is RunState.QUEUED
        # A login form drawn before the browser's session changed is drawn again.
        again = await alice.http.post(
            "/login", data={**stale_login.fields, "token": TOKEN, "operator": "bob"}
        )
        assert again.status_code == 403 and "before a login or logout" in again.text
        assert forms_of(again.text, "/login")


async def test_a_login_returns_to_the_page_it_was_asked_from(url: str) -> None:
    async with console(url) as page:
        run_id = await page.client.submit("chat", "hi")
        html = (await page.http.get(f"/runs/{run_id}")).text
        link = re.search(r'href="(/login\?next=[^"]+)"', html)
        assert link is not None, "the run's page links to a login that comes back to it"
        login = forms_of((await page.http.get(link.group(1).replace("&amp;", "&"))).text)[0]
        assert login.fields["next"] == f"/runs/{run_id}"
        wrong = await page.http.post(
            "/login", data={**login.fields, "token": "not-it", "operator": "alice"}
        )
        # A mistyped token keeps where the login goes back to.
        retry = forms_of(wrong.text, "/login")[0]
        assert retry.fields["next"] == f"/runs/{run_id}"
        done = await page.http.post(
            "/login", data={**retry.fields, "token": TOKEN, "operator": "alice"}
        )
        assert (done.status_code, done.headers["location"]) == (303, f"/runs/{run_id}")
        # Only the console's own pages: anything else goes to the runs.
        for elsewhere in ["//evil.example/runs", "https://evil.example", "/runs/a/b", "/\\evil"]:
            form = forms_of((await page.http.get("/login", params={"next": elsewhere})).text)
            assert "next" not in form[0].fields
            sent = await page.http.post(
                "/login",
                data={**form[0].fields, "next": elsewhere, "token": TOKEN, "operator": "x"},
            )
            assert (sent.status_code, sent.headers["location"]) == (303, "/runs")


async def test_a_name_the_console_was_not_given_is_refused(url: str) -> None:
    """DNS rebinding: a site whose name now points at 127.0.0.1 must not read the console."""
    async with console(url, allowed_hosts=("console.example", "*.corp.example")) as page:
        run_id = await page.client.submit("chat", "a secret input")
        transport = page.http._transport
        for host in ["evil.example", "evil.example:8787", "corp.example", "localhost.evil"]:
            async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as rebound:
                for path in ["/runs", f"/runs/{run_id}", "/api/runs", f"/api/runs/{run_id}"]:
                    answer = await rebound.get(path)
                    assert answer.status_code == 400, (host, path)
                    assert "a secret input" not in answer.text and run_id not in answer.text
                    assert "does not answer to the name" in answer.text
                assert (await rebound.get("/api/runs")).json()["error"]
                # A load balancer's probe asks by the service's name.
                assert (await rebound.get("/healthz")).text == "ok"
                refused = await rebound.post(f"/runs/{run_id}/cancel", data={})
                assert refused.status_code == 400
        for host in [
            "localhost:8787",
            "127.0.0.1",
            "[::1]:8787",
            "10.1.2.3:80",
            "app.localhost",
            "console.example",
            "CONSOLE.EXAMPLE.:443",
            "a.corp.example",
        ]:
            async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as ok:
                assert (await ok.get(f"/api/runs/{run_id}")).status_code == 200, host
        assert (await page.client.get(run_id)).state is RunState.QUEUED


async def test_without_a_token_the_console_only_reads(url: str) -> None:
    async with console(url, token=None) as page:
        html = (await page.http.get("/login")).text
        assert "only reads" in html and forms_of(html, "/login") == []
        assert "read only" in (await page.http.get("/runs")).text
        login = await page.http.post(
            "/login", data={"csrf": "x", "token": "anything", "operator": "alice"}
        )
        assert login.status_code == 403
        # An action posted anyway (a page drawn before a restart without the token, a
        # script) says why nobody can act here, not that someone should log in.
        run_id = await page.client.submit("chat", "hi")
        run_page = await page.http.get(f"/runs/{run_id}")
        csrf = re.search(r'name="csrf" value="([^"]+)"', run_page.text)
        fields = {"drawn_state": "queued", "drawn_epoch": "0"}
        for sent in ({"csrf": csrf.group(1)} if csrf else {}, {}):
            refused = await page.http.post(f"/runs/{run_id}/cancel", data={**fields, **sent})
            assert refused.status_code == 403
            assert "this console only reads" in refused.text
            assert "log in" not in refused.text.lower()
        assert (await page.client.get(run_id)).state is RunState.QUEUED
