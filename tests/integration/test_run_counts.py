"""The counts of runs by state that the writes keep (migration 9's run_counts), checked
against a GROUP BY over the runs after every kind of write that adds, moves or removes
runs, on SQLite and PostgreSQL (the ``store_url`` fixture)."""

from __future__ import annotations

import anyio
import pytest

from leaseward import Client
from leaseward.runtime.commits import Stored
from leaseward.runtime.lifecycle import Event, Reason, RunState
from leaseward.runtime.settlements import Settlement
from leaseward.storage import BatchItem, SQLStore, open_store
from leaseward.storage.migrations import MIGRATIONS
from tests.integration.test_purged_keys import dialect_name, empty_url  # noqa: F401
from tests.integration.test_run_listing import (
    DEAD,
    created,
    migrated_without_run_listing,
    settled,
)
from tests.integration.test_store_conformance import (  # noqa: F401
    COMPLETE,
    StoreClock,
    clock,
    lease_of,
    new_run,
    store,
)

pytestmark = pytest.mark.anyio


async def counted_from_runs(store: SQLStore) -> dict[RunState, int]:  # noqa: F811
    rows = await store._executor.fetch_all(
        "SELECT state, COUNT(*) AS runs FROM runs GROUP BY state"
    )
    return {RunState(row["state"]): int(row["runs"]) for row in rows}


async def assert_counts_exact(store: SQLStore) -> None:  # noqa: F811
    kept = await Client(store).run_counts()
    counted = await counted_from_runs(store)
    assert kept == {state: counted.get(state, 0) for state in RunState}


async def test_counts_follow_creates_claims_settles_cancels_reaps_redrives_and_purges(
    store: SQLStore,  # noqa: F811
    clock: StoreClock,  # noqa: F811
) -> None:
    client = Client(store)
    for n in range(8):
        await created(store, f"run-{n}", key=f"key-{n}" if n % 2 else None)
    await assert_counts_exact(store)
    assert (await client.run_counts())[RunState.QUEUED] == 8

    await settled(store, "run-0", "a", COMPLETE)
    await settled(store, "run-1", "a", DEAD)
    await assert_counts_exact(store)

    # One batch moving several runs at once: one completes, one is requeued, one fails.
    claimed = await store.claim_runs("w1", 3, 5.0, ["a"])
    outcomes = await store.commit_batch(
        [
            BatchItem(claimed[0].id, claimed[0].epoch, lease_seconds=5.0, settlement=COMPLETE),
            BatchItem(
                claimed[1].id,
                claimed[1].epoch,
                lease_seconds=5.0,
                settlement=Settlement(Event.REQUEUE, delay_seconds=60.0),
            ),
            BatchItem(
                claimed[2].id,
                claimed[2].epoch,
                lease_seconds=5.0,
                settlement=Settlement(Event.FAIL, Reason.MAX_STEPS, error="too long"),
            ),
        ]
    )
    assert all(isinstance(outcome, Stored) for outcome in outcomes)
    await assert_counts_exact(store)

    (queued, *_) = await client.runs(state=RunState.QUEUED)
    await store.request_cancel(queued.id)
    await assert_counts_exact(store)

    (held,) = await store.claim_runs("w1", 1, 5.0, ["a"])
    (expired,) = await store.expired_runs([await lease_of(store, held.id)])
    reaped = Settlement(Event.DEAD_LETTER, Reason.INTERRUPTED_WRITE, error="reaped")
    assert await store.reap(expired, reaped) is True
    await assert_counts_exact(store)

    await store.redrive("run-1")
    await assert_counts_exact(store)

    await clock.advance(120)
    purged = await store.purge_finished(
        [RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED], older_than_seconds=60
    )
    assert purged.runs == 4
    await assert_counts_exact(store)
    counts = await client.run_counts()
    assert (counts[RunState.COMPLETED], counts[RunState.FAILED], counts[RunState.CANCELLED]) == (
        0,
        0,
        0,
    )


async def test_counts_stay_exact_under_concurrent_writers(
    store: SQLStore,  # noqa: F811
) -> None:
    # Enough statements for PostgreSQL to fold its count rows several times (every 64
    # statements that change a count), while other writers add rows beside the fold.
    async def worker(agent: str) -> None:
        for n in range(30):
            await created(store, f"{agent}-{n}", agent=agent)
            settlement = COMPLETE if n % 3 else DEAD
            await settled(store, f"{agent}-{n}", agent, settlement)

    async with anyio.create_task_group() as workers:
        for agent in ("a", "b", "c", "d"):
            workers.start_soon(worker, agent)

    await assert_counts_exact(store)
    counts = await Client(store).run_counts()
    assert (counts[RunState.COMPLETED], counts[RunState.DEAD_LETTERED]) == (80, 40)
    (row,) = await store._executor.fetch_all("SELECT COUNT(*) AS rows FROM run_counts")
    # 360 statements changed counts; folded, far fewer rows hold them.
    assert int(row["rows"]) < 64 * 2 + len(RunState)


async def test_migration_9_counts_the_runs_already_stored(
    empty_url: str,  # noqa: F811
) -> None:
    opened = await open_store(empty_url, migrate=False)
    try:
        await migrated_without_run_listing(opened)
        for n in range(3):
            await created(opened, f"run-{n}")
        await settled(opened, "run-0", "a", COMPLETE)
        assert await opened.migrate() == MIGRATIONS[-1].version
        await assert_counts_exact(opened)
        counts = await Client(opened).run_counts()
        assert (counts[RunState.QUEUED], counts[RunState.COMPLETED]) == (2, 1)
        await created(opened, "run-3")
        await assert_counts_exact(opened)
    finally:
        await opened.aclose()
