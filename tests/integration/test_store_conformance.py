"""The store protocol, on every dialect: claiming, fencing, reaping, cancelling.

Each test runs once per dialect (the ``store_url`` fixture), against SQLite and
PostgreSQL alike. Time is the store's own: SQLite's is the injected clock, and
PostgreSQL's is the database clock, which the ``clock`` fixture replaces in the
test's own database by one the test moves (``await clock.advance(seconds)``), so
both dialects see exactly the same instants.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import attrs
import msgspec
import pytest

from leaseward import (
    InvalidInput,
    ProviderReply,
    RunNotFound,
    RunPurged,
    StoreError,
    ToolCall,
)
from leaseward.runtime.clock import ManualClock
from leaseward.runtime.commits import Fenced, Refused, Stored
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import Event, Reason, RunMode, RunState, StepKind, StepStatus
from leaseward.runtime.listing import RunListing
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.runtime.workers import WorkerRegistration
from leaseward.storage import BatchItem, CancelOutcome, LeaseMark, SQLStore, open_store
from leaseward.storage.migrations import MIGRATIONS
from leaseward.storage.workers import GONE_WORKERS_KEPT_SECONDS
from tests.integration.support import provider_step

pytestmark = pytest.mark.anyio

COMPLETE = Settlement(Event.COMPLETE, Reason.COMPLETED, result_json='"ok"')

# The database clocks of a PostgreSQL test database, made to stand still: the
# schema's leaseward_now() (transaction) and leaseward_clock() (statement) read
# the database clock; these read a row.
FROZEN_CLOCK_SQL = (
    "CREATE TABLE leaseward_test_clock (seconds double precision NOT NULL)",
    "CREATE OR REPLACE FUNCTION leaseward_now() RETURNS double precision "
    "LANGUAGE sql STABLE AS $$ SELECT seconds FROM leaseward_test_clock $$",
    "CREATE OR REPLACE FUNCTION leaseward_clock() RETURNS double precision "
    "LANGUAGE sql VOLATILE AS $$ SELECT seconds FROM leaseward_test_clock $$",
)


class StoreClock(ManualClock):
    """The clock the store reads, moved by the test.

    On SQLite it is the clock injected into the store. On PostgreSQL the store
    ignores the injected clock and reads the database's, so ``advance`` moves
    that one too (the frozen clock of the test's own database).
    """

    def __init__(self, connection: Any = None) -> None:
        super().__init__()
        self._connection = connection

    async def start(self) -> None:
        if self._connection is not None:
            for statement in FROZEN_CLOCK_SQL:
                await self._connection.execute(statement)
            await self._connection.execute(
                "INSERT INTO leaseward_test_clock (seconds) VALUES ($1)", self.now()
            )

    async def advance(self, seconds: float) -> None:  # type: ignore[override]
        super().advance(seconds)
        if self._connection is not None:
            await self._connection.execute(
                "UPDATE leaseward_test_clock SET seconds = $1", self.now()
            )


def new_run(agent: str = "a", value: Any = None, run_id: str | None = None) -> NewRun:
    return NewRun(
        id=run_id or str(uuid.uuid4()),
        agent=agent,
        mode=RunMode.QUEUED,
        input_json=dump_json(value),
    )


@pytest.fixture
async def clock(anyio_backend: str, store_url: str) -> AsyncIterator[StoreClock]:
    if not store_url.startswith("postgresql"):
        yield StoreClock()
        return
    import asyncpg

    connection = await asyncpg.connect(store_url)
    try:
        moved = StoreClock(connection)
        await moved.start()
        yield moved
    finally:
        await connection.close()


@pytest.fixture
async def store(anyio_backend: str, store_url: str, clock: StoreClock) -> AsyncIterator[SQLStore]:
    opened = await open_store(store_url, clock=clock)
    try:
        yield opened
    finally:
        await opened.aclose()


async def claimed(store: SQLStore, agent: str = "a", lease_seconds: float = 5.0) -> RunRecord:
    record = await store.create_run(new_run(agent))
    (run,) = await store.claim_runs("w1", 1, lease_seconds, [agent])
    assert run.id == record.id
    return run


def intent(seq: int, effect: ToolEffect = ToolEffect.NON_IDEMPOTENT_WRITE) -> StepWrite:
    return StepWrite(
        seq=seq,
        kind=StepKind.TOOL,
        status=StepStatus.STARTED,
        tool="charge",
        call_id="c1",
        effect=effect,
        idempotency_key="k1",
        arguments_json='{"amount":5}',
    )


def outcome_of(step: StepWrite) -> StepWrite:
    return StepWrite(
        seq=step.seq,
        kind=step.kind,
        status=StepStatus.SUCCEEDED,
        tool=step.tool,
        call_id=step.call_id,
        effect=step.effect,
        output_json='{"charged":5}',
        settles=True,
    )


ASK = ProviderReply(tool_calls=[ToolCall("charge", {"amount": 5}, "c1")])


# -- reading ----------------------------------------------------------------------------


async def test_runs_read_together_are_the_runs_read_one_by_one(store: SQLStore) -> None:
    made = [await store.create_run(new_run("a")) for _ in range(3)]
    claimed_one = await claimed(store, "b")
    wanted = [run.id for run in made] + [claimed_one.id, "no-such-run", made[0].id]
    together = await store.get_runs(wanted)
    one_by_one = [await store.get_run(run_id) for run_id in dict.fromkeys(wanted)]
    assert sorted(together, key=lambda run: run.id) == sorted(
        (run for run in one_by_one if run is not None), key=lambda run: run.id
    )
    assert await store.get_runs([]) == []


async def test_runs_read_together_may_be_only_those_that_finished(store: SQLStore) -> None:
    queued = await store.create_run(new_run("a"))
    done = await claimed(store, "b")
    (stored,) = await store.commit_batch([BatchItem(done.id, done.epoch, settlement=COMPLETE)])
    assert stored == Stored()
    finished = await store.get_runs([queued.id, done.id], finished_only=True)
    assert [(run.id, run.state) for run in finished] == [(done.id, RunState.COMPLETED)]


# -- claiming ---------------------------------------------------------------------------


async def test_claim_takes_the_oldest_first_within_the_limit(
    store: SQLStore, clock: StoreClock
) -> None:
    ids = []
    for index in range(4):
        ids.append((await store.create_run(new_run(value=index))).id)
        await clock.advance(1)

    first = await store.claim_runs("w1", 2, 30.0, ["a"])
    await clock.advance(1)
    second = await store.claim_runs("w2", 5, 10.0, ["a"])

    assert [r.id for r in first] == ids[:2]
    assert [r.id for r in second] == ids[2:]
    for run, owner, expires in [
        *[(r, "w1", clock.now() - 1 + 30.0) for r in first],
        *[(r, "w2", clock.now() + 10.0) for r in second],
    ]:
        assert run.state is RunState.RUNNING
        assert run.epoch == 1
        assert run.lease_owner == owner
        assert run.lease_expires_at == pytest.approx(expires)
        stored = await store.get_run(run.id)
        assert stored == run


async def test_claim_takes_only_the_listed_agents(store: SQLStore) -> None:
    mine = await store.create_run(new_run("mine"))
    theirs = await store.create_run(new_run("theirs"))
    other = await store.create_run(new_run("other"))

    assert await store.claim_runs("w1", 10, 5.0, []) == []
    got = await store.claim_runs("w1", 10, 5.0, ["mine", "absent"])
    assert [r.id for r in got] == [mine.id]
    got = await store.claim_runs("w1", 10, 5.0, ["other", "theirs"])
    assert sorted(r.id for r in got) == sorted([theirs.id, other.id])


async def test_a_run_available_later_is_not_claimed_before_its_time(
    store: SQLStore, clock: StoreClock
) -> None:
    run = await claimed(store)
    requeue = Settlement(Event.REQUEUE, delay_seconds=10.0, spends_retry=True)
    (outcome,) = await store.commit_batch([BatchItem(run.id, run.epoch, settlement=requeue)])
    assert isinstance(outcome, Stored)
    queued = await store.get_run(run.id)
    assert queued is not None
    assert (queued.state, queued.requeues) == (RunState.QUEUED, 1)
    assert queued.available_at == pytest.approx(clock.now() + 10.0)

    assert await store.claim_runs("w1", 10, 5.0, ["a"]) == []
    await clock.advance(9.5)
    assert await store.claim_runs("w1", 10, 5.0, ["a"]) == []
    await clock.advance(0.5)
    (again,) = await store.claim_runs("w2", 10, 5.0, ["a"])
    assert (again.id, again.epoch, again.lease_owner) == (run.id, 2, "w2")


async def test_two_stores_on_one_database_never_claim_the_same_run(store_url: str) -> None:
    setup = await open_store(store_url)
    try:
        ids = {(await setup.create_run(new_run(value=i))).id for i in range(300)}
    finally:
        await setup.aclose()
    stores = [await open_store(store_url) for _ in range(3)]
    taken: list[list[str]] = [[] for _ in stores]

    async def claim(index: int) -> None:
        batch = await stores[index].claim_runs(f"w{index}", 7, 30.0, ["a"])
        taken[index].extend(r.id for r in batch)

    try:
        with anyio.fail_after(30):
            # In rounds, so that every store has a claim in flight at the same time
            # (SQLite's busy handler would otherwise let one connection starve the rest).
            while sum(map(len, taken)) < len(ids):
                async with anyio.create_task_group() as tg:
                    for index in range(len(stores)):
                        tg.start_soon(claim, index)
        leftover = await stores[1].claim_runs("w1", 7, 30.0, ["a"])
        runs = await stores[0].list_runs(RunListing(limit=1000))
    finally:
        for opened in stores:
            await opened.aclose()

    every = [run_id for share in taken for run_id in share]
    assert len(every) == len(set(every)) == len(ids)
    assert set(every) == ids
    assert leftover == []
    assert all(taken), "a store claimed nothing"
    assert {(r.state, r.epoch) for r in runs} == {(RunState.RUNNING, 1)}
    owners = {r.id: r.lease_owner for r in runs}
    for index, share in enumerate(taken):
        assert {owners[run_id] for run_id in share} <= {f"w{index}"}


# -- fencing (G6) and terminal is terminal (G9) ----------------------------------------


@pytest.mark.parametrize("stale_epoch", [0, 2])
async def test_a_batch_under_the_wrong_epoch_writes_nothing(
    store: SQLStore, clock: StoreClock, stale_epoch: int
) -> None:
    run = await claimed(store)
    await clock.advance(1)
    (outcome,) = await store.commit_batch(
        [BatchItem(run.id, stale_epoch, steps=(provider_step(0, ASK),), lease_seconds=50.0)]
    )
    assert outcome == Fenced()
    assert await store.list_steps(run.id) == []
    assert await store.get_run(run.id) == run


async def test_a_batch_under_the_right_epoch_records_and_renews(
    store: SQLStore, clock: StoreClock
) -> None:
    run = await claimed(store)
    await clock.advance(3)
    (outcome,) = await store.commit_batch(
        [BatchItem(run.id, 1, steps=(provider_step(0, ASK), intent(1)), lease_seconds=5.0)]
    )
    assert outcome == Stored(cancel_requested=False)
    renewed = await store.get_run(run.id)
    assert renewed is not None
    assert renewed.lease_expires_at == pytest.approx(clock.now() + 5.0)
    steps = await store.list_steps(run.id)
    assert [(s.seq, s.kind, s.status, s.epoch) for s in steps] == [
        (0, StepKind.PROVIDER, StepStatus.SUCCEEDED, 1),
        (1, StepKind.TOOL, StepStatus.STARTED, 1),
    ]
    assert steps[1].finished_at is None
    assert steps[0].started_at == steps[0].finished_at == clock.now()

    assert await store.request_cancel(run.id) is CancelOutcome.REQUESTED
    await clock.advance(1)
    (outcome,) = await store.commit_batch(
        [BatchItem(run.id, 1, steps=(outcome_of(intent(1)),), lease_seconds=7.0)]
    )
    assert outcome == Stored(cancel_requested=True)
    renewed = await store.get_run(run.id)
    assert renewed is not None
    assert renewed.lease_expires_at == pytest.approx(clock.now() + 7.0)
    settled = (await store.list_steps(run.id))[1]
    assert (settled.status, settled.output, settled.finished_at) == (
        StepStatus.SUCCEEDED,
        {"charged": 5},
        clock.now(),
    )


async def test_the_keepers_renewals_renew_held_leases_and_are_fenced_for_stale_ones(
    store: SQLStore, clock: StoreClock
) -> None:
    """The keeper's renewals (on PostgreSQL written apart from the batches, passing rows
    held elsewhere) are fenced as every write is: a stale epoch renews nothing."""
    held, taken = await claimed(store), await claimed(store)
    assert await store.request_cancel(held.id) is CancelOutcome.REQUESTED
    await clock.advance(2)
    outcomes = await store.commit_batch(
        [
            BatchItem(held.id, held.epoch, lease_seconds=9.0, passes_a_held_row=True),
            BatchItem(taken.id, taken.epoch + 1, lease_seconds=9.0, passes_a_held_row=True),
        ]
    )
    assert outcomes == [Stored(cancel_requested=True), Fenced()]
    renewed = await store.get_run(held.id)
    assert renewed is not None
    assert renewed.lease_expires_at == pytest.approx(clock.now() + 9.0)
    assert await store.get_run(taken.id) == taken


@pytest.mark.parametrize("with_settlement", [False, True], ids=["steps only", "settling"])
async def test_an_item_of_no_lease_seconds_fences_and_leaves_its_runs_lease_as_it_was(
    store: SQLStore, clock: StoreClock, with_settlement: bool
) -> None:
    """Most commits of a run only fence: their items renew nothing, and the run's row is
    not written, whether the batch goes in one statement (on PostgreSQL, one item
    settling or none) or in a transaction (on SQLite)."""
    renewing, fencing, stale, cancelled, settling = [await claimed(store) for _ in range(5)]
    assert await store.request_cancel(cancelled.id) is CancelOutcome.REQUESTED
    before = {run.id: await store.get_run(run.id) for run in (fencing, cancelled)}
    await clock.advance(1)
    items = [
        BatchItem(renewing.id, 1, steps=(provider_step(0, ASK),), lease_seconds=7.0),
        BatchItem(fencing.id, 1, steps=(provider_step(0, ASK), intent(1))),
        BatchItem(stale.id, 2, steps=(provider_step(0, ASK),)),
        BatchItem(cancelled.id, 1, steps=(provider_step(0, ASK),)),
    ]
    if with_settlement:
        items.append(BatchItem(settling.id, 1, settlement=COMPLETE))
    outcomes = await store.commit_batch(items)

    assert outcomes[:4] == [Stored(), Stored(), Fenced(), Stored(cancel_requested=True)]
    renewed = await store.get_run(renewing.id)
    assert renewed is not None
    assert renewed.lease_expires_at == pytest.approx(clock.now() + 7.0)
    assert (await lease_of(store, renewing.id)).renewals == 2
    for run in (fencing, cancelled):
        assert await store.get_run(run.id) == before[run.id]
        assert (await lease_of(store, run.id)).renewals == 1
    assert [s.seq for s in await store.list_steps(fencing.id)] == [0, 1]
    assert await store.list_steps(stale.id) == []
    if with_settlement:
        assert outcomes[4] == Stored()
        done = await store.get_run(settling.id)
        assert done is not None and done.state is RunState.COMPLETED


async def test_a_settlement_the_runs_state_does_not_allow_is_refused_and_the_rest_written(
    store: SQLStore, clock: StoreClock
) -> None:
    """An item whose run is held, but whose settlement starts from another state than
    the run's, is refused on its own: nothing of it is written, and the items beside it,
    a completion included, are, in one statement or in a transaction."""
    stepping, completing, misfit = [await claimed(store) for _ in range(3)]
    await clock.advance(1)
    from_the_queue = Settlement(Event.CANCEL_QUEUED, Reason.CANCELLED)
    outcomes = await store.commit_batch(
        [
            BatchItem(stepping.id, 1, steps=(provider_step(0, ASK),)),
            BatchItem(completing.id, 1, steps=(provider_step(0, ASK),), settlement=COMPLETE),
            BatchItem(misfit.id, 1, steps=(provider_step(0, ASK),), settlement=from_the_queue),
        ]
    )

    assert outcomes[:2] == [Stored(), Stored()]
    assert isinstance(outcomes[2], Refused)
    assert [s.seq for s in await store.list_steps(stepping.id)] == [0]
    assert [s.seq for s in await store.list_steps(completing.id)] == [0]
    done = await store.get_run(completing.id)
    assert done is not None and done.state is RunState.COMPLETED
    assert await store.list_steps(misfit.id) == []
    assert await store.get_run(misfit.id) == misfit


async def test_a_settle_under_a_stale_epoch_changes_nothing(
    store: SQLStore, clock: StoreClock
) -> None:
    run = await claimed(store)
    await clock.advance(1)
    for epoch in (0, 2):
        (outcome,) = await store.commit_batch([BatchItem(run.id, epoch, settlement=COMPLETE)])
        assert outcome == Fenced()
    assert await store.get_run(run.id) == run


async def test_a_terminal_run_cannot_be_settled_or_renewed_again(
    store: SQLStore, clock: StoreClock
) -> None:
    run = await claimed(store)
    await clock.advance(1)
    (outcome,) = await store.commit_batch([BatchItem(run.id, 1, settlement=COMPLETE)])
    assert outcome == Stored()
    done = await store.get_run(run.id)
    assert done is not None
    assert (done.state, done.reason, done.result) == (
        RunState.COMPLETED,
        Reason.COMPLETED,
        "ok",
    )
    assert (done.lease_owner, done.lease_expires_at, done.finished_at) == (None, None, clock.now())

    await clock.advance(1)
    attempts = [
        BatchItem(run.id, 1, lease_seconds=5.0),
        BatchItem(run.id, 1, steps=(provider_step(0, ASK),), lease_seconds=5.0),
        BatchItem(run.id, 1, settlement=Settlement(Event.FAIL, Reason.MAX_STEPS, error="x")),
        BatchItem(run.id, 1, settlement=Settlement(Event.REQUEUE, spends_retry=True)),
        BatchItem(run.id, 1, settlement=COMPLETE),
    ]
    for item in attempts:
        (outcome,) = await store.commit_batch([item])
        assert outcome == Fenced(), item
    assert await store.get_run(run.id) == done
    assert await store.list_steps(run.id) == []
    assert await store.claim_runs("w1", 10, 5.0, ["a"]) == []
    assert await store.request_cancel(run.id) is CancelOutcome.ALREADY_FINISHED


async def test_a_bad_step_fails_its_item_only(store: SQLStore, clock: StoreClock) -> None:
    one = await claimed(store)
    two = await claimed(store)
    three = await claimed(store)
    (outcome,) = await store.commit_batch(
        [BatchItem(three.id, 1, steps=(intent(0), outcome_of(intent(0))), lease_seconds=5.0)]
    )
    assert isinstance(outcome, Stored)
    three_before = await store.list_steps(three.id)
    changed_outcome = msgspec.structs.replace(outcome_of(intent(0)), output_json='{"charged":6}')
    await clock.advance(2)

    outcomes = await store.commit_batch(
        [
            # Settles a row that does not exist: the whole item rolls back, lease included.
            BatchItem(
                one.id, 1, steps=(provider_step(0, ASK), outcome_of(intent(1))), lease_seconds=9.0
            ),
            BatchItem(two.id, 1, steps=(provider_step(0, ASK),), lease_seconds=9.0),
            # Settles a row that is already settled, and differently.
            BatchItem(three.id, 1, steps=(changed_outcome,), lease_seconds=9.0),
        ]
    )

    refused_one, stored_two, refused_three = outcomes
    assert isinstance(refused_one, Refused) and "no open intent" in refused_one.error
    assert stored_two == Stored()
    assert isinstance(refused_three, Refused) and "no open intent" in refused_three.error
    assert await store.list_steps(one.id) == []
    assert await store.get_run(one.id) == one
    assert await store.list_steps(three.id) == three_before
    assert [s.seq for s in await store.list_steps(two.id)] == [0]
    renewed = await store.get_run(two.id)
    assert renewed is not None
    assert renewed.lease_expires_at == pytest.approx(clock.now() + 9.0)


async def test_records_sent_again_are_stored_once_and_contradictions_refused(
    store: SQLStore,
) -> None:
    """A batch sent again after its answer was lost finds its rows stored: no error, no
    second row. A row that differs from the stored one under the same seq is refused,
    and its item writes nothing, however many rows its batch holds beside it."""
    runs = [await claimed(store) for _ in range(3)]
    first = [
        BatchItem(run.id, 1, steps=(provider_step(0, ASK), intent(1)), lease_seconds=5.0)
        for run in runs
    ]
    assert await store.commit_batch(first) == [Stored()] * 3
    journals = [await store.list_steps(run.id) for run in runs]

    assert await store.commit_batch(first) == [Stored()] * 3
    assert [await store.list_steps(run.id) for run in runs] == journals

    other_intent = msgspec.structs.replace(intent(1), arguments_json='{"amount":6}')
    again, contradicted, settled = await store.commit_batch(
        [
            first[0],
            BatchItem(runs[1].id, 1, steps=(other_intent,), lease_seconds=5.0),
            BatchItem(runs[2].id, 1, steps=(outcome_of(intent(1)),), lease_seconds=5.0),
        ]
    )
    assert again == Stored() and settled == Stored()
    assert isinstance(contradicted, Refused) and contradicted.data_error
    assert "already recorded differently" in contradicted.error
    assert await store.list_steps(runs[1].id) == journals[1]
    assert [s.status for s in await store.list_steps(runs[2].id)] == [
        StepStatus.SUCCEEDED,
        StepStatus.SUCCEEDED,
    ]


async def test_execute_each_counts_the_rows_its_statement_changed(store: SQLStore) -> None:
    executor = store._executor
    async with executor.transaction():
        await executor.execute("CREATE TEMPORARY TABLE each_rows (n INTEGER PRIMARY KEY)")
        sql = "INSERT INTO each_rows (n) VALUES (:n) ON CONFLICT (n) DO NOTHING"
        assert await executor.execute_each(sql, [{"n": 1}, {"n": 2}, {"n": 3}]) == 3
        assert await executor.execute_each(sql, [{"n": 3}, {"n": 4}]) == 1
        assert await executor.execute_each(sql, []) == 0
        rows = await executor.fetch_all("SELECT n FROM each_rows ORDER BY n")
        await executor.execute("DROP TABLE each_rows")
    assert [row["n"] for row in rows] == [1, 2, 3, 4]


async def test_a_statement_written_alone_is_committed_and_answers_what_it_returns(
    store: SQLStore,
) -> None:
    record = await store.create_run(new_run())
    sql = "UPDATE runs SET cancel_requested = :flag WHERE id = :id RETURNING id"
    rows = await store._executor.write_alone(sql, {"flag": True, "id": record.id})
    assert [row["id"] for row in rows] == [record.id]
    stored = await store.get_run(record.id)
    assert stored is not None and stored.cancel_requested


# -- reaping ----------------------------------------------------------------------------


async def lease_of(store: SQLStore, run_id: str) -> LeaseMark:
    (mark,) = [m for m in await store.running_leases() if m.run_id == run_id]
    return mark


async def test_every_claim_and_renewal_changes_the_lease_mark_and_no_clock_does(
    store: SQLStore, clock: StoreClock
) -> None:
    run = await claimed(store)
    assert await lease_of(store, run.id) == LeaseMark(run.id, 1, 1, 5.0)
    (outcome,) = await store.commit_batch([BatchItem(run.id, 1, lease_seconds=7.0)])
    assert isinstance(outcome, Stored)
    assert await lease_of(store, run.id) == LeaseMark(run.id, 1, 2, 7.0)
    # The store's clock going anywhere says nothing about a lease.
    await clock.advance(3600)
    assert await lease_of(store, run.id) == LeaseMark(run.id, 1, 2, 7.0)
    await clock.advance(-7200)
    assert await lease_of(store, run.id) == LeaseMark(run.id, 1, 2, 7.0)
    # Settled, it is no lease any more; claimed again, it is a new one.
    assert await store.reap(
        (await store.expired_runs([LeaseMark(run.id, 1, 2, 7.0)]))[0], Settlement(Event.REQUEUE)
    )
    assert [m for m in await store.running_leases() if m.run_id == run.id] == []
    await store.claim_runs("w2", 1, 5.0, ["a"])
    assert await lease_of(store, run.id) == LeaseMark(run.id, 2, 3, 5.0)


async def test_a_lease_granted_before_renewals_were_counted_is_granted_what_its_expiry_says(
    store: SQLStore, store_url: str
) -> None:
    run = await claimed(store, lease_seconds=5.0)
    if store_url.startswith("postgresql"):
        import asyncpg

        connection = await asyncpg.connect(store_url)
        try:
            await connection.execute("UPDATE runs SET lease_seconds = NULL")
        finally:
            await connection.close()
    else:
        import sqlite3

        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as database:
            database.execute("UPDATE runs SET lease_seconds = NULL")
    assert (await lease_of(store, run.id)).lease_seconds == pytest.approx(5.0, abs=0.5)


async def test_an_unrenewed_lease_is_found_with_its_last_step(
    store: SQLStore, clock: StoreClock
) -> None:
    run = await claimed(store)
    fresh = await claimed(store)
    (outcome,) = await store.commit_batch(
        [BatchItem(run.id, 1, steps=(provider_step(0, ASK), intent(1)), lease_seconds=5.0)]
    )
    assert isinstance(outcome, Stored)
    seen = await store.running_leases()
    # Renewing the other run keeps it out of the reaper's way.
    await store.commit_batch([BatchItem(fresh.id, 1, lease_seconds=5.0)])

    (expired,) = await store.expired_runs(seen)

    assert (expired.run.id, expired.run.epoch, expired.renewals) == (run.id, 1, 2)
    assert (expired.last_effect, expired.last_status) == (
        ToolEffect.NON_IDEMPOTENT_WRITE,
        StepStatus.STARTED,
    )
    assert await store.expired_runs([]) == []


async def test_reap_settles_an_expired_run_once(store: SQLStore, clock: StoreClock) -> None:
    run = await claimed(store)
    (expired,) = await store.expired_runs([await lease_of(store, run.id)])
    dead = Settlement(Event.DEAD_LETTER, Reason.INTERRUPTED_WRITE, error="reaped")

    assert await store.reap(expired, dead) is True
    assert await store.reap(expired, dead) is False

    record = await store.get_run(run.id)
    assert record is not None
    assert (record.state, record.reason, record.lease_owner) == (
        RunState.DEAD_LETTERED,
        Reason.INTERRUPTED_WRITE,
        None,
    )
    assert await store.expired_runs([LeaseMark(run.id, 1, 1, 5.0)]) == []
    # The worker that lost the run can no longer write under its epoch.
    (outcome,) = await store.commit_batch([BatchItem(run.id, 1, lease_seconds=5.0)])
    assert outcome == Fenced()


async def test_reap_is_fenced_by_a_renewal_since_the_scan(
    store: SQLStore, clock: StoreClock
) -> None:
    run = await claimed(store)
    seen = await lease_of(store, run.id)
    (expired,) = await store.expired_runs([seen])
    # The slow worker comes back and renews before the reaper acts on its scan.
    (outcome,) = await store.commit_batch([BatchItem(run.id, 1, lease_seconds=5.0)])
    assert isinstance(outcome, Stored)
    assert await store.expired_runs([seen]) == []

    requeue = Settlement(Event.REQUEUE, spends_retry=True)
    assert await store.reap(expired, requeue) is False
    record = await store.get_run(run.id)
    assert record is not None
    assert (record.state, record.epoch, record.lease_owner) == (RunState.RUNNING, 1, "w1")
    assert record.requeues == 0


async def test_reap_is_fenced_by_a_new_epoch(store: SQLStore, clock: StoreClock) -> None:
    run = await claimed(store)
    (expired,) = await store.expired_runs([await lease_of(store, run.id)])
    assert await store.reap(expired, Settlement(Event.REQUEUE)) is True
    (again,) = await store.claim_runs("w2", 1, 5.0, ["a"])
    assert again.epoch == 2
    # The old scan names epoch 1: it cannot settle the run now held under epoch 2.
    assert await store.reap(expired, Settlement(Event.DEAD_LETTER, Reason.NOT_RETRYABLE)) is False
    record = await store.get_run(run.id)
    assert record is not None
    assert (record.state, record.epoch, record.lease_owner) == (RunState.RUNNING, 2, "w2")


# -- cancelling -------------------------------------------------------------------------


async def test_cancel_a_queued_run_at_once(store: SQLStore, clock: StoreClock) -> None:
    record = await store.create_run(new_run())
    await clock.advance(1)
    assert await store.request_cancel(record.id) is CancelOutcome.CANCELLED
    cancelled = await store.get_run(record.id)
    assert cancelled is not None
    assert (cancelled.state, cancelled.reason, cancelled.finished_at) == (
        RunState.CANCELLED,
        Reason.CANCELLED,
        clock.now(),
    )
    assert await store.claim_runs("w1", 10, 5.0, ["a"]) == []
    assert await store.request_cancel(record.id) is CancelOutcome.ALREADY_FINISHED


async def test_cancel_a_running_run_sets_the_flag(store: SQLStore) -> None:
    run = await claimed(store)
    assert await store.request_cancel(run.id) is CancelOutcome.REQUESTED
    record = await store.get_run(run.id)
    assert record is not None
    assert (record.state, record.cancel_requested, record.epoch) == (RunState.RUNNING, True, 1)
    # The holder settles it at its next boundary.
    cancel = Settlement(Event.CANCEL_RUNNING, Reason.CANCELLED)
    (outcome,) = await store.commit_batch([BatchItem(run.id, 1, settlement=cancel)])
    assert isinstance(outcome, Stored)
    assert await store.request_cancel(run.id) is CancelOutcome.ALREADY_FINISHED
    final = await store.get_run(run.id)
    assert final is not None
    assert (final.state, final.reason) == (RunState.CANCELLED, Reason.CANCELLED)


async def test_cancel_an_unknown_run(store: SQLStore) -> None:
    with pytest.raises(RunNotFound, match="ghost"):
        await store.request_cancel("ghost")
    assert await store.list_runs() == []


# -- waiting for work -------------------------------------------------------------------


async def test_waiting_for_work_ends_by_its_timeout(store: SQLStore) -> None:
    # SQLite hears nothing from other processes, PostgreSQL nothing was sent: both time out.
    with anyio.fail_after(5):
        started = anyio.current_time()
        await store.wait_for_work(0.1)
    assert anyio.current_time() - started >= 0.09
    assert await store.schema_present()


# -- workers ----------------------------------------------------------------------------


def worker(worker_id: str = "w1", stale_after: float = 15.0) -> WorkerRegistration:
    return WorkerRegistration(
        id=worker_id, host="host-1", pid=4242, agents=("a", "b"), stale_after_seconds=stale_after
    )


async def test_a_worker_is_live_until_its_heartbeat_is_older_than_it_promised(
    store: SQLStore, clock: StoreClock
) -> None:
    started = clock.now()
    await store.register_worker(worker())
    (fresh,) = await store.list_workers()
    assert (fresh.id, fresh.host, fresh.pid, fresh.agents) == ("w1", "host-1", 4242, ("a", "b"))
    assert (fresh.started_at, fresh.heartbeat_at, fresh.heartbeat_age_seconds) == (
        started,
        started,
        0.0,
    )
    assert (fresh.stale_after_seconds, fresh.live) == (15.0, True)

    await clock.advance(10)
    await store.heartbeat_worker(worker())
    await clock.advance(15)
    (beating,) = await store.list_workers()
    assert (beating.started_at, beating.heartbeat_at) == (started, started + 10)
    assert (beating.heartbeat_age_seconds, beating.live) == (15.0, True)

    await clock.advance(0.5)
    (silent,) = await store.list_workers()
    assert (silent.heartbeat_age_seconds, silent.live) == (15.5, False)

    await store.heartbeat_worker(worker())
    assert [w.live for w in await store.list_workers()] == [True]
    # A restart under the same id starts again.
    await store.register_worker(worker())
    (restarted,) = await store.list_workers()
    assert restarted.started_at == clock.now()


async def test_each_worker_is_judged_by_its_own_promise(store: SQLStore, clock: StoreClock) -> None:
    await store.register_worker(worker("quick", stale_after=5.0))
    await clock.advance(1)
    await store.register_worker(worker("patient", stale_after=60.0))
    await clock.advance(10)
    listed = await store.list_workers()
    assert [(w.id, w.live) for w in listed] == [("patient", True), ("quick", False)]


async def test_a_beat_re_registers_a_forgotten_worker_and_remove_forgets_it(
    store: SQLStore, clock: StoreClock
) -> None:
    await store.heartbeat_worker(worker())
    (found,) = await store.list_workers()
    assert found.started_at == found.heartbeat_at == clock.now()
    await store.remove_worker("w1")
    assert await store.list_workers() == []
    await store.remove_worker("w1")
    assert await store.list_workers() == []


async def test_a_draining_worker_is_dated_from_its_first_draining_beat_and_serves_nothing(
    store: SQLStore, clock: StoreClock
) -> None:
    await store.register_worker(worker())
    (serving,) = await store.list_workers()
    assert (serving.draining_since, serving.status, serving.serving) == (None, "live", True)
    await clock.advance(5)
    began = clock.now()
    await store.heartbeat_worker(attrs.evolve(worker(), draining=True))
    await clock.advance(5)
    await store.heartbeat_worker(attrs.evolve(worker(), draining=True))
    (draining,) = await store.list_workers()
    assert (draining.draining_since, draining.status, draining.live) == (began, "draining", True)
    assert not draining.serving
    await clock.advance(20)
    (gone,) = await store.list_workers()
    assert (gone.status, gone.serving) == ("gone", False)
    # A restart under the same id serves again.
    await store.register_worker(worker())
    (restarted,) = await store.list_workers()
    assert (restarted.draining_since, restarted.status) == (None, "live")


async def test_a_worker_gone_longer_than_kept_is_forgotten_at_another_ones_beat(
    store: SQLStore, clock: StoreClock
) -> None:
    await store.register_worker(worker("killed", stale_after=15.0))
    await clock.advance(60)
    await store.register_worker(worker("killed-later", stale_after=15.0))
    # "killed" has been gone (heartbeat older than its promise) for exactly the time kept.
    await clock.advance(GONE_WORKERS_KEPT_SECONDS - 60 + 15)
    await store.register_worker(worker("beating"))
    assert [(w.id, w.live) for w in await store.list_workers()] == [
        ("beating", True),
        ("killed-later", False),
        ("killed", False),
    ]
    await clock.advance(1)
    await store.heartbeat_worker(worker("beating"))
    assert [w.id for w in await store.list_workers()] == ["beating", "killed-later"]
    await clock.advance(60)
    await store.heartbeat_worker(worker("beating"))
    assert [w.id for w in await store.list_workers()] == ["beating"]


async def test_a_migration_numbered_below_the_newest_applied_still_runs(store_url: str) -> None:
    store = await open_store(store_url)
    try:
        # A database migrated by a leaseward that had migration 4 but not yet 3 (nor 18,
        # which changes the table 3 creates).
        async with store._executor.transaction():
            for statement in (
                "DROP INDEX runs_finished",
                "DROP TABLE workers",
                "DELETE FROM schema_migrations WHERE version IN (3, 18)",
            ):
                await store._executor.execute(statement)
        assert await store.schema_version() == 2
        with pytest.raises(StoreError, match="older"):
            await open_store(store_url, read_only=True)
        assert await store.migrate() == MIGRATIONS[-1].version
        assert await store.schema_version() == MIGRATIONS[-1].version
        await store.register_worker(worker())
        assert [w.id for w in await store.list_workers()] == ["w1"]
    finally:
        await store.aclose()


# -- purging ----------------------------------------------------------------------------

DAY_SECONDS = 86_400.0
THIRTY_DAYS_SECONDS = 30 * DAY_SECONDS
FINISHED = (RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED)
ALL_FINISHED = (*FINISHED, RunState.DEAD_LETTERED)
DEAD = Settlement(Event.DEAD_LETTER, Reason.NOT_RETRYABLE, error="bad key")
FAILED = Settlement(Event.FAIL, Reason.MAX_STEPS, error="too long")


async def settled(store: SQLStore, settlement: Settlement = COMPLETE) -> str:
    """A run that took one provider step and settled, all at the store's "now"."""
    run = await claimed(store)
    (outcome,) = await store.commit_batch(
        [
            BatchItem(
                run.id,
                run.epoch,
                steps=(provider_step(0, ASK),),
                lease_seconds=5.0,
                settlement=settlement,
            )
        ]
    )
    assert isinstance(outcome, Stored)
    return run.id


async def cancelled(store: SQLStore) -> str:
    record = await store.create_run(new_run())
    assert await store.request_cancel(record.id) is CancelOutcome.CANCELLED
    return record.id


async def test_purge_deletes_only_finished_runs_older_than_the_cutoff(
    store: SQLStore, clock: StoreClock
) -> None:
    old_done = [await settled(store), await settled(store, FAILED), await cancelled(store)]
    old_dead = await settled(store, DEAD)
    old_queued = (await store.create_run(new_run("idle"))).id
    old_running = (await claimed(store, lease_seconds=100 * DAY_SECONDS)).id
    await clock.advance(THIRTY_DAYS_SECONDS + 1)
    recent = await settled(store)

    result = await store.purge_finished(FINISHED, THIRTY_DAYS_SECONDS)

    # A batch takes runs of one state: one each here.
    assert (result.runs, result.steps, result.batches, result.dry_run) == (3, 2, 3, False)
    assert result.finished_before == pytest.approx(clock.now() - THIRTY_DAYS_SECONDS)
    for run_id in old_done:
        assert await store.get_run(run_id) is None
        assert await store.list_steps(run_id) == []
    kept = {r.id: r.state for r in await store.list_runs()}
    assert kept == {
        old_dead: RunState.DEAD_LETTERED,
        old_queued: RunState.QUEUED,
        old_running: RunState.RUNNING,
        recent: RunState.COMPLETED,
    }
    assert len(await store.list_steps(old_dead)) == 1

    again = await store.purge_finished(ALL_FINISHED, THIRTY_DAYS_SECONDS)
    assert (again.runs, again.steps) == (1, 1)
    assert await store.get_run(old_dead) is None
    assert {r.id for r in await store.list_runs()} == {old_queued, old_running, recent}
    # Claim and reap still see the live runs.
    (claim,) = await store.claim_runs("w2", 10, 5.0, ["idle", "a"])
    assert claim.id == old_queued


async def test_purge_takes_bounded_batches(store: SQLStore, clock: StoreClock) -> None:
    ids = {await settled(store) for _ in range(7)}
    await clock.advance(2 * DAY_SECONDS)
    result = await store.purge_finished([RunState.COMPLETED], DAY_SECONDS, batch_runs=3)
    assert (result.runs, result.steps, result.batches) == (7, 7, 3)
    assert all([await store.get_run(run_id) is None for run_id in ids])


async def test_a_dry_run_counts_and_changes_nothing(store: SQLStore, clock: StoreClock) -> None:
    for settlement in (COMPLETE, COMPLETE, FAILED, DEAD):
        await settled(store, settlement)
    await cancelled(store)
    await clock.advance(2 * DAY_SECONDS)
    await settled(store)
    before = await store.list_runs()

    dry = await store.purge_finished(FINISHED, DAY_SECONDS, dry_run=True, batch_runs=2)
    assert (dry.runs, dry.steps, dry.batches, dry.dry_run) == (4, 3, 3, True)
    assert await store.list_runs() == before
    only = await store.purge_finished([RunState.COMPLETED], DAY_SECONDS, dry_run=True)
    assert (only.runs, only.steps, only.batches) == (2, 2, 1)
    assert await store.list_runs() == before


@pytest.mark.parametrize(
    ("states", "older_than", "batch_runs"),
    [
        ([RunState.QUEUED], 1.0, 10),
        ([RunState.COMPLETED, RunState.RUNNING], 1.0, 10),
        ([RunState.COMPLETED], 0.0, 10),
        ([RunState.COMPLETED], 1.0, 0),
    ],
)
async def test_a_purge_of_live_runs_or_with_no_age_is_refused(
    store: SQLStore,
    clock: StoreClock,
    states: list[RunState],
    older_than: float,
    batch_runs: int,
) -> None:
    queued = await store.create_run(new_run())
    await clock.advance(10)
    with pytest.raises(InvalidInput):
        await store.purge_finished(states, older_than, batch_runs=batch_runs)
    assert [r.id for r in await store.list_runs()] == [queued.id]


# -- idempotency keys outlive a purge ----------------------------------------------------


async def keyed(
    store: SQLStore, key: str, settlement: Settlement | None = COMPLETE, agent: str = "a"
) -> str:
    """A run of ``agent`` submitted with ``key`` and, unless ``settlement`` is None,
    settled at once."""
    new = attrs.evolve(new_run(agent), idempotency_key=key, request_digest=f"digest-{key}")
    record = await store.create_run(new)
    assert record.id == new.id
    if settlement is not None:
        (run,) = await store.claim_runs("w1", 1, 5.0, [agent])
        assert run.id == new.id
        (outcome,) = await store.commit_batch(
            [BatchItem(run.id, run.epoch, lease_seconds=5.0, settlement=settlement)]
        )
        assert isinstance(outcome, Stored)
    return record.id


async def resubmitted(store: SQLStore, key: str) -> str:
    """The run id a retried submit with ``key`` gets: the run's, stored or purged."""
    new = attrs.evolve(new_run("idle"), idempotency_key=key, request_digest=f"digest-{key}")
    try:
        return (await store.create_run(new)).id
    except RunPurged as purged:
        return purged.run_id


async def test_a_purge_keeps_the_keys_and_says_when_it_purged_their_runs(
    store: SQLStore, clock: StoreClock
) -> None:
    done = await keyed(store, "k-done")
    dead = await keyed(store, "k-dead", DEAD)
    plain = await settled(store)
    finished_at = clock.now()
    await clock.advance(2 * DAY_SECONDS)

    assert (await store.purge_finished(ALL_FINISHED, DAY_SECONDS)).runs == 3
    assert await store.list_runs() == []
    assert await resubmitted(store, "k-done") == done
    assert await resubmitted(store, "k-dead") == dead
    assert await store.list_runs() == []
    purged = await store.purged_run(done)
    assert purged is not None
    assert (purged.run_id, purged.idempotency_key, purged.state, purged.reason) == (
        done,
        "k-done",
        RunState.COMPLETED,
        Reason.COMPLETED,
    )
    assert (purged.finished_at, purged.purged_at) == (finished_at, clock.now())
    purged_dead = await store.purged_run(dead)
    assert purged_dead is not None
    assert (purged_dead.state, purged_dead.reason) == (
        RunState.DEAD_LETTERED,
        Reason.NOT_RETRYABLE,
    )
    # A run without a key leaves nothing behind.
    assert await store.purged_run(plain) is None
    assert await store.purged_run("no-such-run") is None


async def test_forget_keys_takes_only_keys_of_purged_runs_older_than_the_cutoff(
    store: SQLStore, clock: StoreClock
) -> None:
    old_purged = await keyed(store, "old-purged")
    old_live = await keyed(store, "old-live", settlement=None, agent="idle")
    old_dead_kept = await keyed(store, "old-dead-kept", DEAD)
    await clock.advance(10 * DAY_SECONDS)
    recent_purged = await keyed(store, "recent-purged")
    await clock.advance(DAY_SECONDS)
    assert (await store.purge_finished(FINISHED, 0.5 * DAY_SECONDS)).runs == 2

    dry = await store.forget_keys(5 * DAY_SECONDS, dry_run=True)
    assert (dry.keys, dry.batches, dry.dry_run) == (1, 1, True)
    assert dry.created_before == pytest.approx(clock.now() - 5 * DAY_SECONDS)
    assert await resubmitted(store, "old-purged") == old_purged

    done = await store.forget_keys(5 * DAY_SECONDS)
    assert (done.keys, done.batches, done.dry_run) == (1, 1, False)
    assert await store.purged_run(old_purged) is None
    again = await resubmitted(store, "old-purged")
    assert again not in (old_purged, "")
    # Too young, or its run still stored (queued, a kept dead letter): kept.
    assert await resubmitted(store, "recent-purged") == recent_purged
    assert await resubmitted(store, "old-live") == old_live
    assert await resubmitted(store, "old-dead-kept") == old_dead_kept
    assert (await store.forget_keys(5 * DAY_SECONDS)).keys == 0


async def test_a_dry_run_of_purge_and_forget_together_counts_the_keys_both_would_take(
    store: SQLStore, clock: StoreClock
) -> None:
    """A nightly cleanup purges, then forgets old keys: its dry run counted no key of the
    runs the purge would delete, and the real run then forgot them."""
    await keyed(store, "already-purged")
    await clock.advance(1)
    assert (await store.purge_finished(FINISHED, 0.5)).runs == 1
    await keyed(store, "old-finished")
    await keyed(store, "old-dead-kept", DEAD)
    await keyed(store, "old-live", settlement=None, agent="idle")
    await clock.advance(10 * DAY_SECONDS)
    await keyed(store, "recent-finished")
    await clock.advance(DAY_SECONDS)

    would_purge = await store.purge_finished(FINISHED, 0.5 * DAY_SECONDS, dry_run=True)
    assert (would_purge.runs, set(would_purge.states)) == (2, set(FINISHED))
    alone = await store.forget_keys(5 * DAY_SECONDS, dry_run=True)
    together = await store.forget_keys(5 * DAY_SECONDS, dry_run=True, after_purge=would_purge)
    assert (alone.keys, together.keys) == (1, 2)
    # What the dry run counted is what the real cleanup does.
    await store.purge_finished(FINISHED, 0.5 * DAY_SECONDS)
    assert (await store.forget_keys(5 * DAY_SECONDS)).keys == together.keys


@pytest.mark.parametrize(("older_than", "batch_keys"), [(0.0, 10), (-1.0, 10), (1.0, 0)])
async def test_forget_keys_with_no_age_or_batch_is_refused(
    store: SQLStore, older_than: float, batch_keys: int
) -> None:
    with pytest.raises(InvalidInput):
        await store.forget_keys(older_than, batch_keys=batch_keys)


async def test_forget_keys_takes_bounded_batches_its_dry_run_counts(
    store: SQLStore, clock: StoreClock
) -> None:
    for n in range(7):
        await keyed(store, f"key-{n}")
    await clock.advance(2 * DAY_SECONDS)
    assert (await store.purge_finished(FINISHED, DAY_SECONDS, batch_runs=3)).runs == 7
    for batch_keys, batches in ((3, 3), (7, 1), (1, 7), (10, 1)):
        dry = await store.forget_keys(DAY_SECONDS, dry_run=True, batch_keys=batch_keys)
        assert (dry.keys, dry.batches) == (7, batches)
    done = await store.forget_keys(DAY_SECONDS, batch_keys=3)
    assert (done.keys, done.batches, done.dry_run) == (7, 3, False)


@pytest.mark.parametrize(
    ("completed", "failed", "batch_runs"),
    [(0, 0, 3), (1, 0, 3), (3, 0, 3), (6, 0, 3), (7, 2, 3), (4, 4, 2), (5, 1, 1)],
)
async def test_a_dry_run_counts_the_batches_the_purge_then_takes(
    store: SQLStore, clock: StoreClock, completed: int, failed: int, batch_runs: int
) -> None:
    for n in range(completed):
        if n % 2:
            await keyed(store, f"c-{n}")
        else:
            await settled(store)
    for _ in range(failed):
        await settled(store, FAILED)
    await clock.advance(2 * DAY_SECONDS)
    dry = await store.purge_finished(FINISHED, DAY_SECONDS, dry_run=True, batch_runs=batch_runs)
    done = await store.purge_finished(FINISHED, DAY_SECONDS, batch_runs=batch_runs)
    assert (dry.runs, dry.steps, dry.batches) == (done.runs, done.steps, done.batches)
    assert done.runs == completed + failed


async def test_a_withdrawal_leaves_no_open_intent_and_refuses_a_settled_one(
    store: SQLStore,
) -> None:
    """An intent whose commit went unanswered may never have been stored: withdrawing
    it then changes nothing. A settled call is not an attempt's to withdraw."""
    run = await claimed(store)
    never_stored = msgspec.structs.replace(intent(0), withdraws=True)
    (outcome,) = await store.commit_batch([BatchItem(run.id, 1, steps=(never_stored,))])
    assert isinstance(outcome, Stored)
    assert await store.list_steps(run.id) == []

    (outcome,) = await store.commit_batch(
        [BatchItem(run.id, 1, steps=(intent(0), outcome_of(intent(0))), lease_seconds=5.0)]
    )
    assert isinstance(outcome, Stored)
    settled = await store.list_steps(run.id)
    (outcome,) = await store.commit_batch(
        [BatchItem(run.id, 1, steps=(msgspec.structs.replace(intent(0), withdraws=True),))]
    )
    assert not isinstance(outcome, Stored)
    assert "no open intent" in (outcome.error or "")
    assert await store.list_steps(run.id) == settled
