"""An interactive run (``Runtime.run``) is one of its Supervisor's runs, like one it claimed:
a reap of its lease cancels it, and leaving the Runtime waits for it, then cuts it off.

The worker's clock is a ManualClock that stands still, so its LeaseKeeper never
renews a lease nor cuts a call off: only what the test does moves the lease.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from leaseward import (
    App,
    Reason,
    RunState,
    Runtime,
    ScriptedProvider,
    StepStatus,
    ToolContext,
    ToolEffect,
)
from leaseward.actors import LeaseReaper, LeasesReaped
from leaseward.runtime.clock import ManualClock
from leaseward.runtime.lifecycle import RecoveryPolicy
from leaseward.runtime.runs import RunInfo
from leaseward.storage import open_store
from tests.integration.support import Calls, capture_logs, events, one_call_agent

pytestmark = pytest.mark.anyio

LEASE_SECONDS = 2.0
FAST: dict[str, Any] = {
    "lease_seconds": LEASE_SECONDS,
    "poll_interval_seconds": 0.02,
    "reap_interval_seconds": 0.05,
    "drain_seconds": 0.1,
}
CANCELLED_WITHIN_SECONDS = 5.0
# A call the test fails to cut off still ends, in real time, so a failure is a
# failure and not a hang.
TOOL_TIMEOUT_SECONDS = 8.0


class Held:
    """A tool call that blocks until it is cancelled, and says when it was."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.cancelled = anyio.Event()

    async def __call__(self, ctx: ToolContext) -> None:
        self.entered.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise


async def test_an_interactive_run_whose_lease_was_reaped_is_cancelled_and_settles_nothing(
    store_url: str,
) -> None:
    held, calls = Held(), Calls()
    agent = one_call_agent(
        "payer",
        ToolEffect.NON_IDEMPOTENT_WRITE,
        calls,
        tool_name="charge",
        body=held,
        timeout_seconds=TOOL_TIMEOUT_SECONDS,
    )
    finished: list[RunInfo] = []
    reaper_store = await open_store(store_url)
    try:
        with capture_logs() as logs:
            async with (
                Runtime.open(store_url, App([agent]), clock=ManualClock(), **FAST) as rt,
                anyio.create_task_group() as tasks,
            ):

                async def run() -> None:
                    finished.append(await rt.run("payer", None))

                tasks.start_soon(run)
                await held.entered.wait()
                (run_id,) = {seen["run_id"] for seen in calls.seen}

                # A reaper whose clock moves sees the lease unrenewed for as long as it
                # was granted, and reaps it, fenced on the mark it watched.
                reaper_clock = ManualClock()
                reaper = LeaseReaper(
                    reaper_store, interval_seconds=1.0, policy=RecoveryPolicy(), clock=reaper_clock
                )
                assert await reaper.reap_once() == ()
                reaper_clock.advance(LEASE_SECONDS)
                (reaped,) = await reaper.reap_once()
                assert (reaped.run_id, reaped.epoch) == (run_id, 1)

                # What a worker's own LeaseReaper tells its Supervisor once it reaped.
                rt.supervisor.mailbox.send_nowait(LeasesReaped(((run_id, 1),)))
                with anyio.fail_after(CANCELLED_WITHIN_SECONDS):
                    await held.cancelled.wait()
        journal = await reaper_store.list_steps(run_id)
    finally:
        await reaper_store.aclose()

    (info,) = finished
    # The reaper's verdict stands: the actor's own settlement was fenced.
    assert (info.state, info.reason) == (RunState.FAILED, Reason.INTERACTIVE_INTERRUPTED)
    assert info.error is not None and "lease" in info.error and "expired" in info.error
    # Nobody resumes it: whoever runs it again is told the charge may have applied.
    assert "during a non_idempotent_write call, which may have applied" in info.error
    assert len(calls) == 1
    assert isinstance(agent.provider, ScriptedProvider) and agent.provider.calls == 1
    assert [(s.seq, s.tool, s.status, s.epoch) for s in journal] == [
        (0, None, StepStatus.SUCCEEDED, 1),
        (1, "charge", StepStatus.STARTED, 1),
    ]
    lost = [line for line in logs if line["event"] == "lease.lost" and "by" in line]
    assert [(line["run_id"], line["by"]) for line in lost] == [(run_id, "reaper")]


async def test_leaving_the_runtime_waits_for_an_interactive_run_then_cuts_it_off(
    store_url: str,
) -> None:
    held, calls = Held(), Calls()
    agent = one_call_agent(
        "reader",
        ToolEffect.READ_ONLY,
        calls,
        tool_name="lookup",
        body=held,
        timeout_seconds=TOOL_TIMEOUT_SECONDS,
    )
    finished: list[RunInfo] = []
    # Not owned by the Runtime, so still open for the run's last read once it has left.
    store = await open_store(store_url)
    try:
        with capture_logs() as logs, anyio.fail_after(CANCELLED_WITHIN_SECONDS):
            async with anyio.create_task_group() as callers:
                async with Runtime.open(store, App([agent]), clock=ManualClock(), **FAST) as rt:

                    async def run() -> None:
                        finished.append(await rt.run("reader", None))

                    # A caller's task that outlives the Runtime: leaving drains it.
                    callers.start_soon(run)
                    await held.entered.wait()
                assert held.cancelled.is_set()
        (info,) = finished
        journal = await store.list_steps(info.id)
    finally:
        await store.aclose()

    assert (info.state, info.reason) == (RunState.FAILED, Reason.INTERACTIVE_INTERRUPTED)
    assert "may have applied" not in (info.error or "")
    assert len(calls) == 1
    assert [s.seq for s in journal] == [0]
    assert "worker.draining" in events(logs)


async def test_an_interactive_run_whose_caller_is_cancelled_says_so(store_url: str) -> None:
    held = Held()
    agent = one_call_agent(
        "reader", ToolEffect.READ_ONLY, Calls(), timeout_seconds=TOOL_TIMEOUT_SECONDS, body=held
    )
    async with Runtime.open(store_url, App([agent]), **FAST) as rt:
        async with anyio.create_task_group() as caller:
            caller.start_soon(rt.run, "reader", None)
            with anyio.fail_after(CANCELLED_WITHIN_SECONDS):
                await held.entered.wait()
            caller.cancel_scope.cancel()
        [stopped] = await rt.runs()
    assert held.cancelled.is_set()
    assert (stopped.state, stopped.reason) == (RunState.FAILED, Reason.INTERACTIVE_INTERRUPTED)
    assert stopped.error == (
        "the run stopped before it finished: its caller was cancelled or its worker shut down"
    )
