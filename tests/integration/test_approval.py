"""Human approval and human input (G12): parking without a worker, deciding, executing once.

Every test runs on both stores. Tools append each execution to a fsynced ledger
(``approval_worker.py``), so executions are counted across processes, and the
ledger is compared with the journal and the requests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest

from leaseward import (
    ArgumentsNotApproved,
    Client,
    Decision,
    IllegalTransition,
    InvalidInput,
    Reason,
    RequestExpired,
    RequestKind,
    RequestNotFound,
    RunInfo,
    RunState,
    Runtime,
    StepInfo,
    StepKind,
    StepStatus,
)
from leaseward.actors.metrics import Metrics
from leaseward.runtime.encoding import arguments_digest
from tests.integration.approval_worker import LOG_FILE, build_app, executions
from tests.stores import created

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).resolve().with_name("approval_worker.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT_SECONDS = 20.0
POLL_SECONDS = 0.02
WA, WI = RunState.WAITING_FOR_APPROVAL, RunState.WAITING_FOR_INPUT


def runtime(store_url: str, ledger: Path, **options: Any) -> AbstractAsyncContextManager[Runtime]:
    settings: dict[str, Any] = {
        "poll_interval_seconds": 0.02,
        "reap_interval_seconds": 0.05,
        "lease_seconds": 2.0,
        **options,
    }
    return Runtime.open(store_url, build_app(ledger), **settings)


async def until_state(client: Client, run_id: str, state: RunState) -> RunInfo:
    with anyio.fail_after(WAIT_SECONDS):
        while True:
            run = await client.get(run_id)
            if run.state is state:
                return run
            assert not run.state.terminal, (run.state, run.reason, run.error)
            await anyio.sleep(POLL_SECONDS)


async def parked(rt: Runtime, agent: str, state: RunState = WA) -> str:
    run_id = await rt.submit(agent, "go")
    await until_state(rt.client, run_id, state)
    return run_id


def tool_rows(steps: list[StepInfo]) -> list[tuple[str | None, str | None, StepStatus]]:
    return [(s.tool, s.call_id, s.status) for s in steps if s.kind is StepKind.TOOL]


async def test_a_parked_run_holds_no_lease_and_an_approved_call_executes_once(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_id = await parked(rt, "payer")
        record = await rt.store.get_run(run_id)
        assert record is not None
        assert (record.lease_owner, record.lease_expires_at, record.epoch) == (None, None, 1)
        assert rt.supervisor.active_runs == 0
        [request] = await rt.approvals()
        assert (request.run_id, request.agent, request.call_id, request.tool) == (
            run_id,
            "payer",
            "call-1",
            "charge",
        )
        assert (request.kind, request.decision, request.arguments) == (
            RequestKind.APPROVAL,
            None,
            {"amount": 5},
        )
        assert request.arguments_digest == arguments_digest({"amount": 5})
        assert executions(tmp_path) == []

        approved = await rt.approve(run_id, "call-1", operator="alice", note="looks fine")
        assert approved.state is RunState.QUEUED
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        steps = await rt.steps(run_id)
        [decided] = await rt.requests(run_id)
        assert await rt.approvals() == []

    assert (run.state, run.result) == (RunState.COMPLETED, '{"charged": 5}')
    assert [(e["call_id"], e["amount"]) for e in executions(tmp_path, run_id)] == [("call-1", 5)]
    # The normal write path: intent, then outcome, under the epoch that resumed it.
    [write] = [s for s in steps if s.kind is StepKind.TOOL]
    assert (write.status, write.epoch, write.arguments) == (StepStatus.SUCCEEDED, 2, {"amount": 5})
    assert (decided.decision, decided.operator, decided.note) == (
        Decision.APPROVED,
        "alice",
        "looks fine",
    )
    assert decided.decided_at is not None and decided.decided_at >= decided.requested_at


async def test_a_rejected_call_never_executes_and_the_model_gets_the_reason(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_id = await parked(rt, "payer")
        await rt.reject(run_id, operator="bob", reason="customer asked to wait")
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        steps = await rt.steps(run_id)

    error = "rejected by bob: customer asked to wait"
    assert (run.state, run.result) == (RunState.COMPLETED, f'{{"error": "{error}"}}')
    assert executions(tmp_path) == []
    [refused] = [s for s in steps if s.kind is StepKind.TOOL]
    assert (refused.status, refused.output, refused.error) == (
        StepStatus.FAILED,
        {"error": error},
        error,
    )


async def test_a_rejection_needs_a_reason_and_an_empty_one_changes_nothing(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_id = await parked(rt, "payer")
        with pytest.raises(InvalidInput, match="reason"):
            await rt.reject(run_id, reason="  ")
        [request] = await rt.approvals()
        assert request.pending
        assert (await rt.get(run_id)).state is WA


LONE_SURROGATE = "\ud800"
BAD_DECISIONS: list[Any] = [
    pytest.param({"operator": 7}, id="operator-int"),
    pytest.param({"operator": f"al{LONE_SURROGATE}"}, id="operator-lone-surrogate"),
    pytest.param({"operator": "al\x00ice"}, id="operator-nul"),
    pytest.param({"note": 7}, id="note-int"),
    pytest.param({"note": {"checked": True}}, id="note-dict"),
    pytest.param({"note": "ok\x00"}, id="note-nul"),
    pytest.param({"note": LONE_SURROGATE}, id="note-lone-surrogate"),
    pytest.param({"call_id": 1}, id="call-id-int"),
    pytest.param({"reason": f"no{LONE_SURROGATE}"}, id="reason-lone-surrogate"),
    pytest.param({"reason": "no\x00"}, id="reason-nul"),
]


@pytest.mark.parametrize("bad", BAD_DECISIONS)
async def test_a_decision_given_a_wrong_value_is_refused_and_changes_nothing(
    store_url: str, tmp_path: Path, bad: dict[str, Any]
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_id = await parked(rt, "payer")
        decide = rt.reject if "reason" in bad else rt.approve
        options = {"reason": "no"} if decide is rt.reject else {}
        with pytest.raises(InvalidInput, match=next(iter(bad))):
            await decide(run_id, **{**options, **bad})
        [request] = await rt.approvals()
        assert (request.pending, request.operator) == (True, None)
        assert (await rt.get(run_id)).state is WA
    assert executions(tmp_path) == []


async def test_a_resolution_given_a_wrong_value_is_refused_before_the_store_is_asked(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_id = await parked(rt, "payer")
        # "no" is true: taken as it is, an operator's no would skip a write as applied.
        wrong: list[dict[str, Any]] = [
            {"applied": "no"},
            {"applied": 0},
            {"operator": 7},
            {"note": 7},
        ]
        for bad in wrong:
            with pytest.raises(InvalidInput, match=next(iter(bad))):
                await rt.resolve(run_id, **{"applied": False, **bad})
        with pytest.raises(InvalidInput, match="operator"):
            await rt.send_input(run_id, "blue", operator=7)  # type: ignore[arg-type]
        assert (await rt.get(run_id)).state is WA


async def test_each_call_of_a_turn_needs_its_own_decision(store_url: str, tmp_path: Path) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_id = await parked(rt, "pair")
        # The read before them ran; both gated calls were asked about at once.
        assert [e["tool"] for e in executions(tmp_path)] == ["lookup"]
        pending = await rt.approvals()
        assert [(r.call_id, r.arguments) for r in pending] == [
            ("first", {"amount": 5}),
            ("second", {"amount": 7}),
        ]
        with pytest.raises(RequestNotFound, match="first, second"):
            await rt.approve(run_id)
        still = await rt.approve(run_id, "second", operator="alice")
        # One decision of two: the run keeps waiting, and nothing executed.
        assert still.state is WA
        assert [e["tool"] for e in executions(tmp_path)] == ["lookup"]
        await rt.reject(run_id, "first", operator="alice", reason="duplicate")
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        steps = await rt.steps(run_id)

    assert run.state is RunState.COMPLETED
    assert [(e["call_id"], e["amount"]) for e in executions(tmp_path) if e["tool"] == "charge"] == [
        ("second", 7)
    ]
    assert tool_rows(steps) == [
        ("lookup", "look", StepStatus.SUCCEEDED),
        ("charge", "first", StepStatus.FAILED),
        ("charge", "second", StepStatus.SUCCEEDED),
    ]


async def test_a_policy_asks_only_for_the_calls_it_names(store_url: str, tmp_path: Path) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_id = await parked(rt, "policy")
        assert [(e["call_id"], e["amount"]) for e in executions(tmp_path)] == [("small", 5)]
        [request] = await rt.approvals()
        assert (request.call_id, request.arguments) == ("big", {"amount": 500})
        await rt.approve(run_id, "big")
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
    assert run.state is RunState.COMPLETED
    assert [e["call_id"] for e in executions(tmp_path)] == ["small", "big"]


async def test_a_second_decision_or_a_wrong_call_id_changes_nothing(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_id = await parked(rt, "payer")
        with pytest.raises(RequestNotFound, match="no request for call 'call-9'"):
            await rt.approve(run_id, "call-9")
        assert (await rt.get(run_id)).state is WA
        assert (await rt.approvals())[0].pending
        await rt.approve(run_id, "call-1", operator="alice")
        for again in (
            rt.approve(run_id, "call-1", operator="mallory"),
            rt.reject(run_id, "call-1", operator="mallory", reason="changed my mind"),
        ):
            with pytest.raises(IllegalTransition, match="already approved by alice"):
                await again
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        [request] = await rt.requests(run_id)
        with pytest.raises(IllegalTransition, match="already approved"):
            await rt.approve(run_id, "call-1")
    assert run.state is RunState.COMPLETED
    assert (request.decision, request.operator) == (Decision.APPROVED, "alice")
    assert len(executions(tmp_path)) == 1


async def test_an_undecided_request_expires_as_a_rejection(store_url: str, tmp_path: Path) -> None:
    metrics = Metrics()
    async with runtime(store_url, tmp_path, metrics=metrics) as rt:
        tool_timeout = await rt.submit("expiring", "go")
        agent_timeout = await rt.submit("agent_expiry", "go")
        runs = [await rt.wait(r, timeout=WAIT_SECONDS) for r in (tool_timeout, agent_timeout)]
        requests = [(await rt.requests(r))[0] for r in (tool_timeout, agent_timeout)]
        with pytest.raises(RequestExpired, match="it was rejected as expired"):
            await rt.approve(tool_timeout, "call-1")

    assert [r.result for r in runs] == ['{"error": "rejected: approval expired"}'] * 2
    assert [(r.decision, r.note, r.operator) for r in requests] == [
        (Decision.EXPIRED, "approval expired", None)
    ] * 2
    for request in requests:
        assert request.expires_at is not None
        assert request.expires_at == pytest.approx(request.requested_at + 0.3)
    assert executions(tmp_path) == []
    count = metrics.registry.get_sample_value(
        "leaseward_approval_decision_seconds_count", {"decision": "expired"}
    )
    assert count == 2


async def test_cancel_works_in_both_waiting_states_and_a_decision_after_it_is_refused(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        approval = await parked(rt, "payer")
        question = await parked(rt, "asker", WI)
        assert await rt.cancel(approval) is True
        assert await rt.cancel(question) is True
        assert [(await rt.get(r)).state for r in (approval, question)] == [RunState.CANCELLED] * 2
        with pytest.raises(IllegalTransition, match="cancelled"):
            await rt.approve(approval, "call-1")
        with pytest.raises(IllegalTransition, match="cancelled"):
            await rt.send_input(question, "blue")
        # Nothing waits any more: the cancelled runs' requests are not listed.
        assert await rt.approvals() == []
    assert executions(tmp_path) == []


async def test_approve_racing_cancel_never_executes_a_cancelled_run(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_ids = [await parked(rt, "payer") for _ in range(6)]
        outcomes: dict[str, list[object]] = {r: [] for r in run_ids}

        async def approve(run_id: str) -> None:
            try:
                outcomes[run_id].append(await rt.approve(run_id, "call-1"))
            except IllegalTransition as exc:
                outcomes[run_id].append(exc)

        async def cancel(run_id: str) -> None:
            outcomes[run_id].append(await rt.cancel(run_id))

        async with anyio.create_task_group() as tasks:
            for run_id in run_ids:
                tasks.start_soon(approve, run_id)
                tasks.start_soon(cancel, run_id)
        finals = [await rt.wait(r, timeout=WAIT_SECONDS) for r in run_ids]

    for run_id, run in zip(run_ids, finals, strict=True):
        ran = executions(tmp_path, run_id)
        assert len(ran) <= 1
        assert run.state in (RunState.CANCELLED, RunState.COMPLETED), run
        refused = [o for o in outcomes[run_id] if isinstance(o, IllegalTransition)]
        if refused:
            # The cancel came first: the approval changed nothing, and nothing ran.
            assert (run.state, ran) == (RunState.CANCELLED, [])
        if run.state is RunState.COMPLETED:
            assert len(ran) == 1


async def test_ask_human_parks_for_input_and_the_answer_is_the_result(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_id = await parked(rt, "asker", WI)
        [request] = await rt.approvals()
        assert (request.kind, request.tool, request.question) == (
            RequestKind.INPUT,
            "ask_human",
            "Which colour?",
        )
        assert request.expires_at is None
        with pytest.raises(IllegalTransition, match="asks for input"):
            await rt.approve(run_id, "ask-1")
        await rt.send_input(run_id, {"colour": "blue"}, operator="carol")
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        [answered] = await rt.requests(run_id)
        with pytest.raises(IllegalTransition, match="already answered"):
            await rt.send_input(run_id, "red", call_id="ask-1")
    assert (run.state, run.result) == (RunState.COMPLETED, '{"colour": "blue"}')
    assert (answered.decision, answered.value, answered.operator) == (
        Decision.ANSWERED,
        {"colour": "blue"},
        "carol",
    )


async def test_interactive_run_returns_waiting_and_resumes_through_the_queue(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run = await rt.run("payer", "now")
        assert (run.state, run.mode.value) == (WA, "interactive")
        assert rt.supervisor.active_runs == 0
        await rt.approve(run.id)
        done = await rt.wait(run.id, timeout=WAIT_SECONDS)
    assert (done.state, done.mode.value) == (RunState.COMPLETED, "interactive")
    assert len(executions(tmp_path)) == 1


async def test_a_retried_run_with_its_key_returns_the_run_waiting_as_the_first_did(
    store_url: str, tmp_path: Path
) -> None:
    """Before, the retry waited for the person's decision, for days maybe, while the first
    call had returned the run waiting at once."""
    async with runtime(store_url, tmp_path) as rt:
        first = await rt.run("payer", "now", idempotency_key="request-7")
        assert first.state is WA
        with anyio.fail_after(5):
            again = await rt.run("payer", "now", idempotency_key="request-7")
        assert (again.id, again.state) == (first.id, WA)
        queued = await rt.submit("asker", "go", idempotency_key="request-8")
        await until_state(rt.client, queued, WI)
        with anyio.fail_after(5):
            joined = await rt.run("asker", "go", idempotency_key="request-8")
        assert (joined.id, joined.state) == (queued, WI)
        await rt.approve(first.id)
        with anyio.fail_after(WAIT_SECONDS):
            done = await rt.run("payer", "now", idempotency_key="request-7")
    assert (done.id, done.state) == (first.id, RunState.COMPLETED)
    assert len(executions(tmp_path)) == 1


async def test_a_request_outlives_a_restart_and_two_workers_execute_each_call_once(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(store_url, tmp_path, worker_id="first:1") as rt:
        run_ids = [await parked(rt, "payer") for _ in range(4)]
    # No worker runs while the decisions are made, from a process that executes nothing.
    async with Client.open(store_url) as client:
        assert len(await client.approvals()) == 4
        for run_id in run_ids:
            await client.approve(run_id, operator="alice")
    async with (
        runtime(store_url, tmp_path, worker_id="second:1"),
        runtime(store_url, tmp_path, worker_id="third:1") as rt,
    ):
        finals = [await rt.wait(r, timeout=WAIT_SECONDS) for r in run_ids]
    assert [r.state for r in finals] == [RunState.COMPLETED] * 4
    ran = executions(tmp_path)
    assert sorted(e["run_id"] for e in ran) == sorted(run_ids)


# -- a worker SIGKILLed around the approved call -------------------------------------------


def start_worker(store_url: str, ledger: Path, crash_point: str | None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("LEASEWARD_TEST_CRASH_POINT", None)
    if crash_point is not None:
        env["LEASEWARD_TEST_CRASH_POINT"] = crash_point
        env["LEASEWARD_TEST_CRASH_MARKER"] = str(ledger / "crash.jsonl")
    return subprocess.Popen(
        [sys.executable, str(WORKER), store_url, str(ledger)],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def killed_at_crash_point(proc: subprocess.Popen[str], ledger: Path) -> None:
    try:
        code = proc.wait(timeout=WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        log = (ledger / LOG_FILE).read_text() if (ledger / LOG_FILE).exists() else ""
        pytest.fail(f"the worker never reached its crash point:\n{log[-3000:]}")
    assert code == -signal.SIGKILL


@pytest.mark.parametrize(
    ("agent", "point", "state", "reason", "executed_by"),
    [
        # Killed after claiming the approved run, before the intent: nothing ran, and
        # the approval still authorises its one execution, by the next worker.
        ("payer", "before_intent", RunState.COMPLETED, Reason.COMPLETED, "survivor"),
        # Killed after the approved write's intent: nobody knows whether it ran, so it
        # is never run again; an operator decides.
        ("payer", "after_intent", RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE, None),
        # Killed just after the approved write: it ran once, and never runs again.
        ("payer", "after_call", RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE, "worker"),
        # The intent consumed the approval, whatever the effect: an approved idempotent
        # write is not executed again under it either.
        ("refunder", "after_intent", RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE, None),
    ],
)
async def test_a_worker_killed_around_an_approved_call_never_executes_it_twice(
    store_url: str,
    tmp_path: Path,
    agent: str,
    point: str,
    state: RunState,
    reason: Reason,
    executed_by: str | None,
) -> None:
    async with runtime(store_url, tmp_path) as rt:
        run_id = await parked(rt, agent)
    async with Client.open(store_url) as client:
        await client.approve(run_id, operator="alice")
    worker = start_worker(store_url, tmp_path, point)
    killed_at_crash_point(worker, tmp_path)
    # Another worker reaps the dead lease and carries the run on from its journal.
    async with runtime(store_url, tmp_path, worker_id="survivor:1") as rt:
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        steps = await rt.steps(run_id)
    assert (run.state, run.reason) == (state, reason), run.error
    pids = {"worker": worker.pid, "survivor": os.getpid()}
    expected = [] if executed_by is None else [pids[executed_by]]
    assert [e["pid"] for e in executions(tmp_path, run_id)] == expected
    intents = [s for s in steps if s.kind is StepKind.TOOL and s.call_id == "call-1"]
    assert len(intents) == 1


async def test_requests_survive_a_killed_worker_that_parked_them(
    store_url: str, tmp_path: Path
) -> None:
    worker = start_worker(store_url, tmp_path, None)
    try:
        # The worker may not have created the store yet: a client creates none.
        async with Client.open(created(store_url)) as client:
            run_id = await client.submit("payer", "go")
            await until_state(client, run_id, WA)
    finally:
        worker.kill()
        worker.wait()
    async with Client.open(store_url) as client:
        [request] = await client.approvals()
        assert request.run_id == run_id
        await client.approve(run_id)
    async with runtime(store_url, tmp_path) as rt:
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
    assert run.state is RunState.COMPLETED
    assert len(executions(tmp_path)) == 1


async def test_a_cancelled_runs_requests_never_expire_nor_crowd_out_those_that_do(
    store_url: str, tmp_path: Path
) -> None:
    async with runtime(
        store_url, tmp_path, lease_seconds=7200.0, reap_interval_seconds=3600.0
    ) as rt:
        cancelled = await parked(rt, "expiring")
        waiting = await parked(rt, "expiring")
        await rt.cancel(cancelled)
        await anyio.sleep(0.4)
        # A batch of one: the cancelled run's request, older, must not take its place.
        [expired] = await rt.store.expire_requests(1)
        assert (expired.run_id, expired.call_id, expired.requeued) == (waiting, "call-1", True)
        assert await rt.store.expire_requests(1) == []
        [untouched] = await rt.requests(cancelled)
        assert untouched.pending
        run = await rt.wait(waiting, timeout=WAIT_SECONDS)
    assert run.result == '{"error": "rejected: approval expired"}'


async def test_an_approval_is_bound_to_the_arguments_its_approver_was_shown(
    store_url: str, tmp_path: Path
) -> None:
    """Alice looks at a charge of 50; Bob rejects it meanwhile, and the model asks for
    5000 under the same call id. Alice's approval of what she saw must not approve that."""
    async with runtime(store_url, tmp_path) as rt:
        run_id = await parked(rt, "escalating")
        [shown] = await rt.approvals()
        assert shown.arguments == {"amount": 50}
        await rt.reject(run_id, "call-1", reason="too much", operator="bob")
        with anyio.fail_after(WAIT_SECONDS):
            while True:
                if [r.arguments for r in await rt.approvals()] == [{"amount": 5000}]:
                    break
                await anyio.sleep(POLL_SECONDS)
        seen = shown.arguments_digest[:12]
        with pytest.raises(ArgumentsNotApproved, match=f"not of those shown \\({seen}\\)"):
            await rt.approve(run_id, "call-1", digest=seen, operator="alice")
        with pytest.raises(ArgumentsNotApproved):
            await rt.approve(run_id, digest=shown.arguments_digest, operator="alice")
        for malformed in ("abc", "Z" * 12, shown.arguments_digest + "0"):
            with pytest.raises(InvalidInput, match="digest"):
                await rt.approve(run_id, digest=malformed, operator="alice")
        # The store checks it too: an empty start would match every digest.
        with pytest.raises(InvalidInput, match="digest"):
            await rt.store.decide(run_id, "call-1", Decision.APPROVED, operator="alice", digest="")
        [waiting] = await rt.approvals()
        assert waiting.pending and executions(tmp_path, run_id) == []
        await rt.approve(run_id, digest=waiting.arguments_digest[:8], operator="alice")
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
    assert run.state is RunState.COMPLETED
    assert [e["amount"] for e in executions(tmp_path, run_id)] == [5000]
