"""A run's row locked by another session does not cut off the calls of other runs.

On PostgreSQL a run's row can be held by another transaction for a while: an
operator's command stalled between its statements, a session opened by hand, a
worker paused inside its own transaction. Seen: with one run's row locked for
longer than the lease, every call in flight on that worker was cut off and
dead-lettered, each a write that applied, because the keeper renews all of a
worker's leases in one statement and that statement waited on the one row.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Reason,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from tests.integration.support import Calls, capture_logs, one_call_agent

pytestmark = pytest.mark.anyio

LEASE_SECONDS = 1.0
CALL_SECONDS = 3.0
LOCK_SECONDS = 2.5
FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.2}


async def test_a_locked_run_row_does_not_cut_off_the_calls_of_other_runs(pg_url: str) -> None:
    import asyncpg

    calls = Calls()
    started = {name: anyio.Event() for name in ("x", "y")}

    def agent(name: str) -> Any:
        async def charge_slowly(ctx: ToolContext) -> None:
            started[name].set()
            await anyio.sleep(CALL_SECONDS)

        return one_call_agent(
            name,
            ToolEffect.NON_IDEMPOTENT_WRITE,
            calls,
            tool_name="charge",
            timeout_seconds=CALL_SECONDS * 4,
            body=charge_slowly,
        )

    locker = await asyncpg.connect(pg_url)
    try:
        async with Runtime.open(
            pg_url, App([agent("x"), agent("y")]), lease_seconds=LEASE_SECONDS, **FAST
        ) as rt:
            locked = await rt.submit("x", None)
            other = await rt.submit("y", None)
            with anyio.fail_after(10):
                for event in started.values():
                    await event.wait()
            async with locker.transaction():
                await locker.execute("SELECT id FROM runs WHERE id = $1 FOR UPDATE", locked)
                await anyio.sleep(LOCK_SECONDS)
            [run, _] = await rt.wait_all([other, locked], timeout=20)
    finally:
        await locker.close()
    assert (run.state, run.reason) == (RunState.COMPLETED, Reason.COMPLETED), run.error
    assert [seen["run_id"] for seen in calls.seen].count(other) == 1


RUNS = 50
STEPS = 30


def _writer(record: Any) -> Agent:
    """An agent whose every turn but the last asks for one call of ``record``."""

    def reply(request: ProviderRequest) -> ProviderReply:
        turn = (len(request.messages) - 1) // 2
        if turn < STEPS:
            return ProviderReply(tool_calls=(ToolCall("record", {"key": f"k{turn}"}, f"c{turn}"),))
        return ProviderReply(text="done")

    return Agent("writer", ScriptedProvider(reply), tools=[record], max_steps=STEPS + 1)


async def test_rows_a_worker_commits_are_no_renewal_fault(pg_url: str) -> None:
    """The rows the worker's own batches hold are passed by the keeper's renewals of runs
    waiting for those batches, and that is no fault: a commit renews its own lease."""

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def record(ctx: ToolContext, key: str) -> str:
        return key

    agent = _writer(record)
    with capture_logs() as logs:
        async with Runtime.open(
            pg_url, App([agent]), lease_seconds=0.6, concurrency=RUNS, **FAST
        ) as rt:
            ids = await rt.submit_many("writer", [None] * RUNS)
            runs = await rt.wait_all(ids, timeout=60)
            keeper = rt.supervisor.keeper.stats
    assert {run.state for run in runs} == {RunState.COMPLETED}
    assert keeper.renewals > 0, "no renewal was due while runs waited for their commits"
    assert keeper.renewals_failed == 0
    assert [line for line in logs if line["event"] == "lease.renew_failed"] == []


async def test_a_call_that_ended_while_its_renewal_was_on_its_way_is_no_renewal_fault(
    pg_url: str,
) -> None:
    """A renewal sent during a call can meet the run's row held by the commit of that
    call's outcome, and be answered once the run's next call has begun: that lease was
    renewed by the commit since, and a fleet at work logged a warning for it."""

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def record(ctx: ToolContext, key: str) -> str:
        # Calls that end at every moment of a renewal round.
        await anyio.sleep((hash(ctx.idempotency_key) % 9) * 0.03)
        return key

    agent = _writer(record)
    with capture_logs() as logs:
        # Short, for many rounds; not shorter, for the keeper's renewals to land in time
        # on a busy shared machine, where a call is cut off rather than risk its lease.
        async with Runtime.open(
            pg_url, App([agent]), lease_seconds=0.45, concurrency=RUNS, **FAST
        ) as rt:
            ids = await rt.submit_many("writer", [None] * RUNS)
            runs = await rt.wait_all(ids, timeout=120)
            keeper = rt.supervisor.keeper.stats
    assert {run.state for run in runs} == {RunState.COMPLETED}
    assert keeper.renewals > 0
    assert [line for line in logs if line["event"] == "lease.renew_failed"] == []
    assert keeper.renewals_failed == 0
    # At debug, each round of the keeper's says how many leases it renewed.
    rounds = [line for line in logs if line["event"] == "lease.renewed" and "runs" in line]
    assert sum(line["runs"] for line in rounds) == keeper.renewals
