"""A stop that lands while a write's intent is being committed: between the intent's
send and its reply. The call never started, so the next attempt must not take it
for an interrupted write and dead-letter it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from leaseward import App, Reason, RunState, Runtime, StepStatus, ToolEffect
from tests.integration.faults import FaultyExecutor, Statement, faulty_store, records_tool
from tests.integration.support import Calls, one_call_agent, until

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {
    "poll_interval_seconds": 0.02,
    "reap_interval_seconds": 0.05,
    "lease_seconds": 2.0,
}
WAIT_SECONDS = 20.0


class HoldsTheIntent:
    """Holds the transaction that carries the charge's intent until ``release`` says so,
    then commits it: the stop lands while the intent is on its way, and it is stored."""

    def __init__(self, executor: FaultyExecutor) -> None:
        self.intent_sent = anyio.Event()
        self.release: Callable[[], bool] = lambda: False
        executor.inject(records_tool("charge", StepStatus.STARTED), self._hold, times=1)

    async def _hold(self, statement: Statement) -> None:
        self.intent_sent.set()
        # Read at each look: the test sets it once the intent is on its way.
        await until(lambda: self.release(), WAIT_SECONDS)


async def test_a_drain_that_cancels_a_run_mid_intent_withdraws_the_intent(
    store_url: str,
) -> None:
    """Issue 18, item 6: before, the intent was stored after the run was released, and
    the next attempt dead-lettered a charge that had never started interrupted_write."""
    calls = Calls()
    app = App([one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")])
    store, executor = await faulty_store(store_url)
    holds = HoldsTheIntent(executor)
    try:
        async with Runtime.open(store, app, drain_seconds=0, **FAST) as rt:
            run_id = await rt.submit("payer", None)
            with anyio.fail_after(WAIT_SECONDS):
                await holds.intent_sent.wait()
            actors = list(rt.supervisor._local.values())
            assert len(actors) == 1
            # Released once the drain has cancelled the run's actor: the cancel lands
            # between the intent's send and its reply.
            holds.release = lambda: all(actor.scope.cancel_called for actor in actors)
        released = await store.get_run(run_id)
        journal = await store.list_steps(run_id)
    finally:
        await store.aclose()

    assert released is not None
    assert (released.state, released.requeues) == (RunState.QUEUED, 0)
    assert [s for s in journal if s.tool == "charge"] == []
    assert len(calls) == 0

    async with Runtime.open(store_url, app, **FAST) as rt:
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
    assert (run.state, run.reason) == (RunState.COMPLETED, Reason.COMPLETED)
    assert len(calls) == 1
