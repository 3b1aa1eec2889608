"""Leaving an embedded Runtime never cuts off a write (G13), whatever ends it: the
graceful close, a cancel from outside, and stop_now(), which does cut it off and says so.

The write holds until the drain is over (the Supervisor has logged that it is
finishing the write), so each test shows the write outliving the drain without a
sleep that a loaded machine could outrun; it outlives its 1 s lease too.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from leaseward import App, Reason, RunState, Runtime, StepStatus, ToolContext, ToolEffect
from leaseward.actors.messages import LeasesReaped
from tests.integration.support import Calls, capture_logs, events, one_call_agent

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {
    "lease_seconds": 1.0,
    "poll_interval_seconds": 0.02,
    "reap_interval_seconds": 0.05,
    "drain_seconds": 0.1,
}
POLL_SECONDS = 0.01
HOLD_PAST_THE_DRAIN_SECONDS = 1.2
DRAINED_WITHIN_SECONDS = 10.0


class Charge:
    """A NON_IDEMPOTENT_WRITE that returns once the drain is over and a lease has passed."""

    def __init__(self, logs: list[dict[str, Any]]) -> None:
        self.calls = Calls()
        self.entered = anyio.Event()
        self.returned = False
        self._logs = logs
        self.app = App(
            [
                one_call_agent(
                    "payer",
                    ToolEffect.NON_IDEMPOTENT_WRITE,
                    self.calls,
                    tool_name="charge",
                    body=self._hold,
                )
            ]
        )

    async def _hold(self, ctx: ToolContext) -> None:
        self.entered.set()
        await self.drained()
        await anyio.sleep(HOLD_PAST_THE_DRAIN_SECONDS)
        self.returned = True

    async def drained(self) -> None:
        # The Supervisor says so only in its log.
        with anyio.fail_after(DRAINED_WITHIN_SECONDS):
            while "worker.finishing_write" not in events(self._logs):  # noqa: ASYNC110
                await anyio.sleep(POLL_SECONDS)


async def _final(store_url: str, run_id: str) -> tuple[Any, Any]:
    async with Runtime.open(store_url, App([]), **FAST) as rt:
        return await rt.get(run_id), await rt.steps(run_id)


async def _finish(store_url: str, charge: Charge, run_id: str) -> Any:
    async with Runtime.open(store_url, charge.app, **FAST) as rt:
        return await rt.wait(run_id, timeout=10)


async def test_leaving_the_runtime_lets_a_write_finish_and_releases_its_run(
    store_url: str,
) -> None:
    with capture_logs() as logs:
        charge = Charge(logs)
        async with Runtime.open(store_url, charge.app, **FAST) as rt:
            run_id = await rt.submit("payer", None)
            await charge.entered.wait()
    assert charge.returned
    run, journal = await _final(store_url, run_id)
    assert (run.state, run.requeues, run.epoch, run.error) == (RunState.QUEUED, 0, 1, None)
    assert [(s.tool, s.status) for s in journal] == [
        (None, StepStatus.SUCCEEDED),
        ("charge", StepStatus.SUCCEEDED),
    ]
    assert not {"call.cut_off", "lease.reaped", "run.dead_lettered"} & set(events(logs))
    assert "lease.released" in events(logs)

    finished = await _finish(store_url, charge, run_id)
    assert (finished.state, finished.result, finished.requeues) == (RunState.COMPLETED, "done", 0)
    assert len(charge.calls) == 1


async def test_a_cancel_from_outside_lets_a_write_finish(store_url: str) -> None:
    with capture_logs() as logs:
        charge = Charge(logs)
        with anyio.CancelScope() as outside:
            async with Runtime.open(store_url, charge.app, **FAST) as rt:
                run_id = await rt.submit("payer", None)
                await charge.entered.wait()
                outside.cancel()
                await anyio.sleep_forever()
    assert charge.returned
    run, journal = await _final(store_url, run_id)
    assert (run.state, run.requeues, run.epoch) == (RunState.QUEUED, 0, 1)
    assert journal[-1].tool == "charge" and journal[-1].status is StepStatus.SUCCEEDED
    assert not {"call.cut_off", "lease.reaped", "run.dead_lettered"} & set(events(logs))

    finished = await _finish(store_url, charge, run_id)
    assert (finished.state, finished.result) == (RunState.COMPLETED, "done")
    assert len(charge.calls) == 1


async def test_stop_now_cuts_the_write_off_and_names_it(store_url: str) -> None:
    cut: list[Any] = []
    with capture_logs() as logs:
        charge = Charge(logs)
        async with (
            anyio.create_task_group() as tasks,
            Runtime.open(store_url, charge.app, **FAST) as rt,
        ):
            run_id = await rt.submit("payer", None)
            await charge.entered.wait()

            async def force() -> None:
                await charge.drained()
                cut.extend(rt.stop_now())

            tasks.start_soon(force)
    assert not charge.returned
    assert [(w.run_id, w.epoch, w.tool, w.call_id) for w in cut] == [
        (run_id, 1, "charge", "call-1")
    ]
    [warning] = [line for line in logs if line["event"] == "worker.cutting_off"]
    assert warning["log_level"] == "warning"
    assert (warning["run_id"], warning["tool"], warning["call_id"]) == (run_id, "charge", "call-1")
    run, _ = await _final(store_url, run_id)
    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    assert len(charge.calls) == 1


async def test_a_write_whose_lease_the_reaper_took_is_cancelled_at_once(store_url: str) -> None:
    """Only a drain waits for a write: one whose lease is gone could record nothing."""
    entered, cancelled = anyio.Event(), anyio.Event()

    async def hold(ctx: ToolContext) -> None:
        entered.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    calls = Calls()
    agent = one_call_agent(
        "payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge", body=hold
    )
    async with Runtime.open(store_url, App([agent]), **FAST) as rt:
        run_id = await rt.submit("payer", None)
        await entered.wait()
        # What this process's LeaseReaper tells the Supervisor when it reaped a lease.
        rt.supervisor.mailbox.send_nowait(LeasesReaped(((run_id, 1),)))
        with anyio.fail_after(5):
            await cancelled.wait()
