"""Store faults under the real store, on each dialect: writes fail closed, reads fail soft
(G3-G5). The faults are injected at the executor, so every write still goes through
the real group commit."""

from __future__ import annotations

from typing import Any

import pytest

from leaseward import (
    App,
    FailureClass,
    Reason,
    RecoveryPolicy,
    RunState,
    Runtime,
    StepStatus,
    ToolEffect,
)
from tests.integration.faults import (
    crash,
    fail,
    faulty_store,
    query,
    records_tool,
    settles_tool,
)
from tests.integration.support import Calls, capture_logs, events, one_call_agent

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.05}


@pytest.mark.parametrize(
    ("effect", "state", "reason"),
    [
        (ToolEffect.IDEMPOTENT_WRITE, RunState.FAILED, Reason.AUDIT_FAILED),
        (ToolEffect.NON_IDEMPOTENT_WRITE, RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE),
    ],
)
async def test_unrecorded_write_result_fails_the_run_and_leaves_the_intent(
    store_url: str, effect: ToolEffect, state: RunState, reason: Reason
) -> None:
    calls = Calls()
    store, executor = await faulty_store(store_url)
    executor.inject(settles_tool("charge"), fail())
    app = App([one_call_agent("payer", effect, calls, tool_name="charge")])
    with capture_logs() as logs:
        async with Runtime.open(store, app, **FAST) as rt:
            run = await rt.wait(await rt.submit("payer", {"order": 1}), timeout=10)
            journal = await rt.steps(run.id)
    await store.aclose()

    assert len(calls) == 1
    assert (run.state, run.reason) == (state, reason)
    assert run.result is None
    assert "AuditPersistenceFailed" in (run.error or "")
    intent = [s for s in journal if s.tool == "charge"]
    assert [s.status for s in intent] == [StepStatus.STARTED]
    assert "audit.failed" in events(logs)


async def test_read_tool_under_the_same_fault_completes(store_url: str) -> None:
    calls = Calls()
    store, executor = await faulty_store(store_url)
    refusals = executor.inject(records_tool("lookup"), fail())
    app = App([one_call_agent("reader", ToolEffect.READ_ONLY, calls, tool_name="lookup")])
    with capture_logs() as logs:
        async with Runtime.open(store, app, **FAST) as rt:
            run = await rt.wait(await rt.submit("reader", None), timeout=10)
    await store.aclose()

    assert (run.state, run.reason, run.result) == (RunState.COMPLETED, Reason.COMPLETED, "done")
    assert len(calls) == 1
    assert refusals.fired, "the fault never fired"
    assert "step.record_failed" in events(logs)


async def test_read_record_that_fails_once_is_sent_again_with_the_next_step(store_url: str) -> None:
    calls = Calls()
    store, executor = await faulty_store(store_url)
    refusal = executor.inject(records_tool("lookup"), fail(), times=1)
    app = App([one_call_agent("reader", ToolEffect.READ_ONLY, calls, tool_name="lookup")])
    async with Runtime.open(store, app, **FAST) as rt:
        run = await rt.wait(await rt.submit("reader", None), timeout=10)
        journal = await rt.steps(run.id)
    await store.aclose()

    assert refusal.fired == 1
    assert run.state is RunState.COMPLETED
    assert [s.seq for s in journal] == [0, 1, 2]
    assert [(s.tool, s.status) for s in journal if s.tool] == [("lookup", StepStatus.SUCCEEDED)]


@pytest.mark.parametrize("effect", [ToolEffect.IDEMPOTENT_WRITE, ToolEffect.NON_IDEMPOTENT_WRITE])
async def test_write_whose_intent_cannot_be_stored_is_never_called(
    store_url: str, effect: ToolEffect
) -> None:
    calls = Calls()
    store, executor = await faulty_store(store_url)
    refusals = executor.inject(records_tool("charge", StepStatus.STARTED), fail())
    app = App([one_call_agent("payer", effect, calls, tool_name="charge")])
    async with Runtime.open(store, app, **FAST) as rt:
        run_id = await rt.submit("payer", None)
        with pytest.raises(TimeoutError):
            # A refused intent is a store fault: retryable, so the run is requeued
            # with backoff instead of finishing; what matters is the tool never ran.
            await rt.wait(run_id, timeout=0.5)
        run = await rt.get(run_id)
    await store.aclose()

    assert len(calls) == 0
    assert run.state is RunState.QUEUED
    assert run.requeues == 1
    assert run.failure_class is FailureClass.CONNECTION
    assert refusals.fired


async def test_persister_crash_is_restarted_and_fails_the_write_closed(store_url: str) -> None:
    calls = Calls()
    store, executor = await faulty_store(store_url)
    app = App([one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls)])
    quick_retry = RecoveryPolicy(backoff_base_seconds=0.01)
    with capture_logs() as logs:
        async with Runtime.open(store, app, recovery=quick_retry, **FAST) as rt:
            # The first journal item's batch opens with its fence.
            crashed = executor.inject(query("renew_leases", "held_leases"), crash(), times=1)
            first = await rt.wait(await rt.submit("payer", None), timeout=10)
            second = await rt.wait(await rt.submit("payer", None), timeout=10)
    await store.aclose()

    assert crashed.fired == 1
    assert "actor.crashed" in events(logs)
    assert "actor.restarted" in events(logs)
    # The crashed batch (the first run's intent, which carries its provider turn) was
    # answered "not persisted": the call did not start (G3), the run went back to the
    # queue as after a store fault, and the write ran exactly once.
    assert (first.state, first.requeues) == (RunState.COMPLETED, 1)
    assert (second.state, second.requeues) == (RunState.COMPLETED, 0)
    assert [c["run_id"] for c in calls.seen] == [first.id, second.id]
