"""The console's actions on both stores: each does its work once and the store changes
exactly once; an action on a run that moved on since its page was drawn is refused with
the run's state and who decided, and changes nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from leaseward import (
    Agent,
    App,
    Decision,
    ProviderReply,
    Reason,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.cli.tables import timestamp
from leaseward.runtime.lifecycle import StepStatus
from leaseward.storage import open_store
from tests.integration.approval_worker import executions
from tests.integration.console_support import TOKEN, console, forms_of, logged_in
from tests.integration.faults import faulty_store, lose_answer, query
from tests.integration.test_approval import parked, runtime
from tests.integration.test_operator import dead_letter
from tests.stores import created

pytestmark = pytest.mark.anyio


async def dead_lettered(store_url: str, reason: Reason, outcome: StepStatus | None) -> str:
    store = await open_store(store_url)
    try:
        return await dead_letter(store, reason, outcome=outcome)
    finally:
        await store.aclose()


async def parked_run(store_url: str, ledger: Path, agent: str, state: RunState) -> str:
    """A run of ``agent`` waiting for a person, with no worker left running."""
    async with runtime(store_url, ledger) as rt:
        return await parked(rt, agent, state)


async def test_approve_runs_the_call_once_and_the_run_finishes(
    store_url: str, tmp_path: Path
) -> None:
    run_id = await parked_run(store_url, tmp_path, "payer", RunState.WAITING_FOR_APPROVAL)
    async with console(store_url) as page:
        alice = await logged_in(page, "alice")
        html = (await alice.http.get("/approvals")).text
        assert "&#34;amount&#34;: 5" in html and "never expires" in html
        # How long it has waited, as `leaseward approvals` says it beside the time.
        [waiting] = await page.client.requests(run_id)
        assert re.search(rf"requested {timestamp(waiting.requested_at)} \([0-9.]+s ago\)", html)
        done = await alice.submit("/approvals", f"/runs/{run_id}/approve", note="looks right")
        assert (done.status_code, done.headers["location"]) == (303, "/approvals")
        assert "every call is decided" in (await alice.http.get("/approvals")).text
        [request] = await page.client.requests(run_id)
        assert (request.decision, request.operator, request.note) == (
            Decision.APPROVED,
            "alice",
            "looks right",
        )
        assert (await page.client.get(run_id)).state is RunState.QUEUED
        async with runtime(store_url, tmp_path) as rt:
            finished = await rt.wait(run_id, timeout=20)
    assert finished.state is RunState.COMPLETED
    assert len(executions(tmp_path, run_id)) == 1


async def test_two_operators_deciding_one_request_the_second_is_told_who_decided(
    store_url: str, tmp_path: Path
) -> None:
    run_id = await parked_run(store_url, tmp_path, "payer", RunState.WAITING_FOR_APPROVAL)
    async with console(store_url) as page:
        alice = await logged_in(page, "alice")
        bob = await logged_in(page, "bob")
        drawn_for_bob = forms_of((await bob.http.get("/approvals")).text, f"/runs/{run_id}/reject")
        assert (await alice.submit("/approvals", f"/runs/{run_id}/approve")).status_code == 303
        late = await bob.http.post(
            f"/runs/{run_id}/reject", data={**drawn_for_bob[0].fields, "reason": "too much"}
        )
        assert late.status_code == 409
        assert "already approved by alice" in late.text and "queued" in late.text
        [request] = await page.client.requests(run_id)
        assert (request.decision, request.operator) == (Decision.APPROVED, "alice")


async def test_a_rejection_needs_a_reason_and_is_kept_escaped(
    store_url: str, tmp_path: Path
) -> None:
    run_id = await parked_run(store_url, tmp_path, "payer", RunState.WAITING_FOR_APPROVAL)
    async with console(store_url) as page:
        bob = await logged_in(page, "bob")
        empty = await bob.submit(f"/runs/{run_id}", f"/runs/{run_id}/reject", reason="  ")
        assert empty.status_code == 400 and "reason" in empty.text
        assert (await page.client.requests(run_id))[0].pending
        reason = "<script>alert(1)</script>"
        done = await bob.submit(f"/runs/{run_id}", f"/runs/{run_id}/reject", reason=reason)
        assert done.status_code == 303
        [request] = await page.client.requests(run_id)
        assert (request.decision, request.operator, request.note) == (
            Decision.REJECTED,
            "bob",
            reason,
        )
        html = (await bob.http.get(f"/runs/{run_id}")).text
        assert "rejected by bob" in html and "&lt;script&gt;alert(1)" in html
        assert "<script>alert" not in html


async def test_an_approval_from_the_console_is_bound_to_the_arguments_it_showed(
    store_url: str, tmp_path: Path
) -> None:
    run_id = await parked_run(store_url, tmp_path, "payer", RunState.WAITING_FOR_APPROVAL)
    async with console(store_url) as page:
        erin = await logged_in(page, "erin")
        [form] = forms_of((await erin.http.get("/approvals")).text, f"/runs/{run_id}/approve")
        [request] = await page.client.requests(run_id)
        assert form.fields["digest"] == request.arguments_digest
        other = {**form.fields, "digest": "0" * 64}
        refused = await erin.http.post(f"/runs/{run_id}/approve", data=other)
        assert refused.status_code == 409 and "not of those shown" in refused.text
        assert (await page.client.requests(run_id))[0].pending


async def test_a_decision_whose_form_names_no_call_is_refused(
    store_url: str, tmp_path: Path
) -> None:
    run_id = await parked_run(store_url, tmp_path, "payer", RunState.WAITING_FOR_APPROVAL)
    async with console(store_url) as page:
        dave = await logged_in(page, "dave")
        [form] = forms_of((await dave.http.get(f"/runs/{run_id}")).text, f"/runs/{run_id}/approve")
        fields = {name: value for name, value in form.fields.items() if name != "call_id"}
        refused = await dave.http.post(f"/runs/{run_id}/approve", data=fields)
        assert refused.status_code == 400 and "names no call" in refused.text
        assert (await page.client.requests(run_id))[0].pending


async def test_reply_answers_an_input_request_with_json(store_url: str, tmp_path: Path) -> None:
    run_id = await parked_run(store_url, tmp_path, "asker", RunState.WAITING_FOR_INPUT)
    async with console(store_url) as page:
        carol = await logged_in(page, "carol")
        assert "Which colour?" in (await carol.http.get(f"/runs/{run_id}")).text
        bare = await carol.submit(f"/runs/{run_id}", f"/runs/{run_id}/reply", value="blue")
        assert bare.status_code == 400 and "not JSON" in bare.text
        assert "line 1, column 1" in bare.text
        # What was typed is drawn again, to copy back once fixed.
        assert re.search(r"Your reply, as you sent it <textarea[^>]*>blue</textarea>", bare.text)
        big = await carol.submit(
            f"/runs/{run_id}", f"/runs/{run_id}/reply", value=json.dumps("x" * 300_000)
        )
        assert big.status_code == 400 and "the answer is" in big.text and "limit" in big.text
        # Deeper than the JSON reader recurses: refused as too deep, not a server error.
        deep = await carol.submit(f"/runs/{run_id}", f"/runs/{run_id}/reply", value="[" * 200_000)
        assert deep.status_code == 400 and "nested too deep" in deep.text
        assert (await page.client.requests(run_id))[0].pending
        done = await carol.submit(f"/runs/{run_id}", f"/runs/{run_id}/reply", value='"blue"')
        assert done.status_code == 303
        [request] = await page.client.requests(run_id)
        assert (request.decision, request.operator, request.value) == (
            Decision.ANSWERED,
            "carol",
            "blue",
        )


async def test_a_verdict_from_the_console_is_bound_to_the_call_it_showed(store_url: str) -> None:
    run_id = await dead_lettered(store_url, Reason.INTERRUPTED_WRITE, None)
    async with console(store_url) as page:
        frank = await logged_in(page, "frank")
        forms = forms_of((await frank.http.get(f"/runs/{run_id}")).text, f"/runs/{run_id}/resolve")
        assert {form.fields["step"] for form in forms} == {"1"}
        other = {**forms[0].fields, "step": "7", "note": "checked"}
        refused = await frank.http.post(f"/runs/{run_id}/resolve", data=other)
        assert refused.status_code == 409 and "not step 7" in refused.text
        assert (await page.client.get(run_id)).state is RunState.DEAD_LETTERED


@pytest.mark.parametrize("verdict", ["applied", "not_applied"])
async def test_resolve_records_the_verdict_once_and_requeues_the_run(
    store_url: str, verdict: str
) -> None:
    run_id = await dead_lettered(store_url, Reason.INTERRUPTED_WRITE, None)
    async with console(store_url) as page:
        alice = await logged_in(page, "alice")
        html = (await alice.http.get("/dead-letters")).text
        assert "Fencing token" in html and "the model is asked" in html
        assert "Resolve: applied" in html and "Resolve: not applied" in html
        drawn = (await alice.http.get("/dead-letters")).text
        no_note = await alice.submit("/dead-letters", f"/runs/{run_id}/resolve", verdict=verdict)
        assert no_note.status_code == 400
        done = await alice.submit(
            "/dead-letters", f"/runs/{run_id}/resolve", verdict=verdict, note="checked the bank"
        )
        assert done.status_code == 303
        run = await page.client.get(run_id)
        assert (run.state, run.epoch) == (RunState.QUEUED, 2)
        again = [
            f for f in forms_of(drawn, f"/runs/{run_id}/resolve") if f.fields["verdict"] == verdict
        ]
        repeated = await alice.http.post(
            f"/runs/{run_id}/resolve", data={**again[0].fields, "note": "twice"}
        )
        assert repeated.status_code == 409 and "queued" in repeated.text
        steps = await page.client.steps(run_id)
        resolved = [s for s in steps if s.resolved_by is not None]
        assert len(resolved) == 1 and resolved[0].resolved_by == "alice"
        assert resolved[0].output["resolution"] == verdict
        assert resolved[0].output["note"] == "checked the bank"
        assert (await page.client.get(run_id)).epoch == 2


async def test_redrive_requeues_a_dead_letter_once(store_url: str) -> None:
    run_id = await dead_lettered(store_url, Reason.NOT_RETRYABLE, StepStatus.FAILED)
    async with console(store_url) as page:
        alice = await logged_in(page)
        drawn = (await alice.http.get(f"/runs/{run_id}")).text
        assert forms_of(drawn, f"/runs/{run_id}/resolve") == []
        done = await alice.submit(f"/runs/{run_id}", f"/runs/{run_id}/redrive")
        assert done.status_code == 303
        run = await page.client.get(run_id)
        assert (run.state, run.requeues) == (RunState.QUEUED, 0)
        form = forms_of(drawn, f"/runs/{run_id}/redrive")[0]
        repeated = await alice.http.post(f"/runs/{run_id}/redrive", data=form.fields)
        assert repeated.status_code == 409
        assert (await page.client.get(run_id)).epoch == run.epoch


async def test_cancel_and_an_action_on_a_run_that_moved_on(store_url: str) -> None:
    async with console(created(store_url)) as page:
        alice = await logged_in(page)
        run_id = await page.client.submit("chat", "hi")
        drawn = forms_of((await alice.http.get(f"/runs/{run_id}")).text, f"/runs/{run_id}/cancel")
        await page.client.cancel(run_id)
        stale = await alice.http.post(f"/runs/{run_id}/cancel", data=drawn[0].fields)
        assert stale.status_code == 409 and "cancelled" in stale.text
        other = await page.client.submit("chat", "again")
        done = await alice.submit(f"/runs/{other}", f"/runs/{other}/cancel")
        assert done.status_code == 303
        assert (await page.client.get(other)).state is RunState.CANCELLED
        assert "cancelled" in (await alice.http.get(f"/runs/{other}")).text


async def test_a_cancel_whose_answer_was_lost_says_it_may_have_been_made(
    store_url: str,
) -> None:
    """Its COMMIT applied and its answer went missing: "store unavailable" would send the
    operator to do it again."""
    store, executor = await faulty_store(created(store_url))
    async with console(store_url, store=store) as page:
        alice = await logged_in(page)
        run_id = await page.client.submit("chat", "hi")
        executor.inject(query("cancel_runs"), lose_answer(), times=1)
        lost = await alice.submit(f"/runs/{run_id}", f"/runs/{run_id}/cancel")
        assert lost.status_code == 503
        said = " ".join(lost.text.split())
        assert "answer to the cancel of this run was lost" in said, said
        assert "may have been made all the same" in said, said
        assert (await page.client.get(run_id)).state is RunState.CANCELLED


async def test_an_expired_request_shows_when_it_expired_and_when_that_was_noticed(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_id = await rt.submit("expiring", "go")
        await rt.wait(run_id, timeout=20)
    async with console(store_url) as page:
        [request] = await page.client.requests(run_id)
        assert request.decision is Decision.EXPIRED
        assert request.expires_at is not None and request.decided_at is not None
        html = (await page.http.get(f"/runs/{run_id}")).text
    expired_at, noticed_at = timestamp(request.expires_at), timestamp(request.decided_at)
    assert f"expired at {expired_at}, noticed at {noticed_at}" in html


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
async def wire(ctx: ToolContext, amount: int) -> int:
    return amount


async def test_the_line_saying_what_an_action_did_shows_a_models_call_id_escaped(
    store_url: str,
) -> None:
    # A model names its calls: a right-to-left override in one would turn the rest of the
    # line around, and the operator would read another outcome than the one that happened.
    call = "pay\u202edevorppa ton"
    app = App(
        [
            Agent(
                "spoofer",
                ScriptedProvider(
                    [ProviderReply(tool_calls=[ToolCall("wire", {"amount": 1}, call)])]
                ),
                tools=[wire],
            )
        ]
    )
    async with Runtime.open(store_url, app, poll_interval_seconds=0.02) as rt:
        run_id = await parked(rt, "spoofer")
    async with console(store_url) as page:
        alice = await logged_in(page, "alice")
        done = await alice.submit(f"/runs/{run_id}", f"/runs/{run_id}/approve")
        assert done.status_code == 303
        html = (await alice.http.get(done.headers["location"])).text
        flash = html.split('<p class="flash" role="status">')[1].split("</p>")[0]
        assert "\u202e" not in flash
        assert "call pay\\u202edevorppa ton approved" in flash


async def test_a_reader_not_logged_in_sees_what_a_dead_letter_waits_for(store_url: str) -> None:
    interrupted = await dead_lettered(store_url, Reason.INTERRUPTED_WRITE, None)
    failed = await dead_lettered(store_url, Reason.NOT_RETRYABLE, StepStatus.FAILED)
    settled = await dead_lettered(store_url, Reason.INTERRUPTED_WRITE, StepStatus.SUCCEEDED)
    for token in (TOKEN, None):
        async with console(store_url, token=token) as page:
            # As `leaseward show` prints it: the call to look up, or that a redrive is next.
            html = (await page.http.get(f"/runs/{interrupted}")).text
            assert "Interrupted write" in html and "nobody knows whether it applied" in html
            [call] = [s for s in await page.client.steps(interrupted) if s.tool is not None]
            assert f"idempotency key <code>{call.idempotency_key}</code>" in html
            assert forms_of(html, f"/runs/{interrupted}/resolve") == []
            html = (await page.http.get(f"/runs/{failed}")).text
            assert "then redrive the run" in html
            assert forms_of(html, f"/runs/{failed}/redrive") == []
            html = (await page.http.get(f"/runs/{settled}")).text
            assert "nothing is left to decide" in html and "Interrupted write" not in html
