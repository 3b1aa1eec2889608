"""The holes a review found in the never-twice promise, each reproduced, then closed.

Every test drives the real runtime on a real SQLite file or the real PostgreSQL
server; faults come from a wrapper around the real executor or from a second real
connection holding a lock.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Reason,
    RecoveryPolicy,
    RunState,
    Runtime,
    ScriptedProvider,
    StepStatus,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.actors.reaper import LeaseReaper
from leaseward.runtime.clock import ManualClock, SystemClock
from leaseward.storage import open_store
from tests.integration.faults import FaultyExecutor, Statement, faulty_store, query, records_tool
from tests.integration.support import (
    Calls,
    ghost_claims,
    intent,
    provider_step,
)

pytestmark = pytest.mark.anyio

CHARGE = ProviderReply(tool_calls=[ToolCall("charge", {"amount": 5}, "call-1")])


def _sqlite_lease_left(db_path: Path, run_id: str) -> float:
    connection = sqlite3.connect(db_path)
    try:
        (expires,) = connection.execute(
            "SELECT lease_expires_at FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
    finally:
        connection.close()
    return float(expires) - time.time()


class LockedBeforeIntent:
    """Another process holds SQLite's write lock when the intent's batch arrives.

    The lock is taken by a real second connection in a thread, once the run's claim
    has committed and before the worker hears so: the next write of the run, its
    intent (which carries the provider turn that asked for the call), waits for the
    lock on the busy timeout for ``hold_seconds``.
    """

    def __init__(self, executor: FaultyExecutor, db_path: Path, hold_seconds: float) -> None:
        self._db_path = db_path
        self._hold_seconds = hold_seconds
        self.held = 0
        self.released = threading.Event()
        self.intent_after_release: list[bool] = []
        executor.inject(query("claim_runs"), self._lock_after_commit, times=1)
        executor.inject(records_tool("charge", StepStatus.STARTED), self._intent)

    async def _lock_after_commit(self, statement: Statement) -> None:
        assert statement.transaction is not None
        statement.transaction.after_commit(self._lock)

    async def _lock(self) -> None:
        self.held += 1
        locked = threading.Event()
        threading.Thread(target=self._hold, args=(locked,), daemon=True).start()
        await anyio.to_thread.run_sync(locked.wait)

    async def _intent(self, statement: Statement) -> None:
        self.intent_after_release.append(self.released.is_set())

    def _hold(self, locked: threading.Event) -> None:
        connection = sqlite3.connect(self._db_path, isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")
            locked.set()
            time.sleep(self._hold_seconds)
            connection.execute("ROLLBACK")
        finally:
            connection.close()
            self.released.set()


async def test_a_write_never_starts_on_a_lease_eaten_by_a_lock_wait(tmp_path: Path) -> None:
    """Hole 1: the intent batch waited 1.5 s for the write lock under a 1 s lease.

    Before, the batch dated the renewed lease from before the wait, so it had
    run out when the commit returned, and the charge started anyway: a second
    worker could reap the run mid-charge. Now the charge starts only with a
    lease that lasts until the keeper's next renewal plus the margin (1/3 s +
    0.2 s here), read from the database itself.
    """
    db_path = tmp_path / "runs.db"
    url = f"sqlite:///{db_path}?busy_timeout_ms=5000"
    lease_left_at_call: list[float] = []

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=0.5)
    async def charge(ctx: ToolContext, amount: int) -> int:
        lease_left_at_call.append(_sqlite_lease_left(db_path, ctx.run_id))
        assert ctx.lease_remaining() >= 0.5
        assert ctx.fencing_token == ctx.epoch == 1
        return amount

    store, executor = await faulty_store(url)
    locked = LockedBeforeIntent(executor, db_path, hold_seconds=1.5)
    app = App([Agent("payer", ScriptedProvider([CHARGE, ProviderReply(text="ok")]), [charge])])
    async with Runtime.open(
        store,
        app,
        lease_seconds=1.0,
        deadline_margin_seconds=0.2,
        reap_interval_seconds=0.05,
        poll_interval_seconds=0.02,
    ) as rt:
        run = await rt.wait(await rt.submit("payer", None), timeout=20)
    await store.aclose()

    assert locked.held == 1
    # The intent's statements ran only once the other connection let the lock go.
    assert locked.intent_after_release == [True]
    assert (run.state, run.epoch) == (RunState.COMPLETED, 1)
    assert len(lease_left_at_call) == 1
    # The database's lease lasted past the keeper's next renewal when the call started.
    assert lease_left_at_call[0] >= 0.5


async def test_a_worker_behind_the_database_clock_keeps_its_lease_through_a_long_call(
    pg_url: str,
) -> None:
    """Hole 3: a worker 100 s behind PostgreSQL's clock ran a 1.5 s model call
    under a 1 s lease without extending it, because its first deadline was the
    database's expiry compared with its own clock. Now its deadlines are on its
    own monotonic clock: the call starts with enough lease to reach the next
    renewal, the keeper renews it while the call runs, and no reaper takes it."""

    class Behind(SystemClock):
        def now(self) -> float:
            return super().now() - 100.0

    lease_left_at_call: list[float] = []
    turns = 0

    async def lease_left(run_id: str) -> float:
        connection = await asyncpg.connect(pg_url)
        try:
            value = await connection.fetchval(
                "SELECT lease_expires_at - EXTRACT(EPOCH FROM clock_timestamp()) "
                "FROM runs WHERE id = $1",
                run_id,
            )
        finally:
            await connection.close()
        return float(value)

    class SlowModel:
        timeout_seconds = 2.0

        async def complete(self, request: ProviderRequest) -> ProviderReply:
            nonlocal turns
            turns += 1
            lease_left_at_call.append(await lease_left(request.run_id))
            await anyio.sleep(1.5)
            return ProviderReply(text="done")

    app = App([Agent("thinker", SlowModel(), [])])
    settings: dict[str, Any] = {
        "lease_seconds": 1.0,
        "deadline_margin_seconds": 0.2,
        "reap_interval_seconds": 0.05,
        "poll_interval_seconds": 0.02,
    }
    async with (
        Runtime.open(pg_url, app, clock=Behind(), worker_id="behind", **settings) as rt,
        Runtime.open(pg_url, app, worker_id="reaper", concurrency=1, **settings),
    ):
        run = await rt.wait(await rt.submit("thinker", None), timeout=20)

    assert (run.state, run.epoch) == (RunState.COMPLETED, 1)
    assert turns == 1
    assert lease_left_at_call[0] >= 0.5


async def test_a_reaped_actor_still_alive_keeps_its_run_from_a_second_local_actor(
    store_url: str,
) -> None:
    """Hole 5: a run reaped by another process while this worker's actor waited
    on the model was claimed again by this worker; the new actor's entry was then
    removed by the old one's cleanup, and ``active_runs`` said 0 mid-charge."""
    entered = anyio.Event()
    release = anyio.Event()
    charges: list[int] = []
    turns: list[int] = []

    class StuckModel:
        async def complete(self, request: ProviderRequest) -> ProviderReply:
            turns.append(len(request.messages))
            if len(turns) == 1:
                entered.set()
                await release.wait()
            return CHARGE if len(request.messages) == 1 else ProviderReply(text="ok")

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(ctx: ToolContext, amount: int) -> int:
        charges.append(ctx.epoch)
        return amount

    app = App([Agent("payer", StuckModel(), [charge])])
    other = await open_store(store_url)
    async with Runtime.open(
        store_url,
        app,
        lease_seconds=60.0,
        deadline_margin_seconds=1.0,
        reap_interval_seconds=30.0,
        poll_interval_seconds=0.02,
    ) as rt:
        run_id = await rt.submit("payer", None)
        await entered.wait()
        # Another worker's reaper finds the lease expired (its clock says a lease
        # went by unrenewed between two of its passes).
        reaper_clock = ManualClock()
        reaper = LeaseReaper(
            other, interval_seconds=1.0, policy=RecoveryPolicy(), clock=reaper_clock
        )
        assert await reaper.reap_once() == ()
        reaper_clock.advance(61.0)
        reaped = await reaper.reap_once()
        assert [r.run_id for r in reaped] == [run_id]
        for _ in range(20):  # claim polls go by; none may start a second actor
            await anyio.sleep(0.02)
        assert rt.supervisor.active_runs == 1
        assert (await rt.get(run_id)).state is RunState.QUEUED
        release.set()
        run = await rt.wait(run_id, timeout=20)
    await other.aclose()

    # The old actor's record was fenced out; the run was claimed again once the
    # old actor had ended, and the charge ran once, under the new epoch.
    assert charges == [2]
    assert (run.state, run.epoch) == (RunState.COMPLETED, 2)


@pytest.mark.parametrize(
    ("effect", "change"),
    [
        (ToolEffect.NON_IDEMPOTENT_WRITE, "removed"),
        (ToolEffect.NON_IDEMPOTENT_WRITE, "schema_changed"),
        (ToolEffect.IDEMPOTENT_WRITE, "removed"),
        (ToolEffect.IDEMPOTENT_WRITE, "schema_changed"),
        (ToolEffect.IDEMPOTENT_WRITE, "made_non_idempotent"),
    ],
)
async def test_an_open_attempt_of_a_write_wins_over_every_other_check(
    store_url: str, effect: ToolEffect, change: str
) -> None:
    """Hole 7: the tool was removed, or its arguments no longer validate, in a deploy;
    the journal still holds a write that may have run. An idempotent one could be
    made again only under its key: told of the error, the model would ask again under
    a new key, and the write would apply twice. Nor may it be made again once a deploy
    declared its tool non-idempotent: its code now says a second execution is unsafe."""
    calls = Calls()
    now = ToolEffect.NON_IDEMPOTENT_WRITE if change == "made_non_idempotent" else effect

    @tool(name="charge", effect=now)
    async def charge_in_cents(ctx: ToolContext, cents: int) -> int:
        calls.record(ctx, cents=cents)
        return cents

    @tool(name="charge", effect=now)
    async def charge(ctx: ToolContext, amount: int) -> int:
        calls.record(ctx, amount=amount)
        return amount

    tools = {"removed": [], "schema_changed": [charge_in_cents]}.get(change, [charge])
    app = App([Agent("payer", ScriptedProvider([CHARGE, ProviderReply(text="ok")]), tools)])
    store = await open_store(store_url)
    run_id = await ghost_claims(store, "payer", (provider_step(0, CHARGE), intent(1, effect, "k")))
    async with Runtime.open(
        store, app, reap_interval_seconds=0.05, poll_interval_seconds=0.02
    ) as rt:
        run = await rt.wait(run_id, timeout=10)
        journal = await rt.steps(run_id)
    await store.aclose()

    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    if change == "made_non_idempotent":
        assert run.error is not None and "its tool is now a non_idempotent_write" in run.error
    assert calls.seen == []
    assert [(s.seq, s.status) for s in journal] == [
        (0, StepStatus.SUCCEEDED),
        (1, StepStatus.STARTED),
    ]
