"""Group commit: a batch costs a constant number of statements, every write of a worker
goes through it, reads do not wait behind it, and waiters are woken by the settlement."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from leaseward import (
    Agent,
    App,
    Client,
    InvalidInput,
    ProviderReply,
    ProviderRequest,
    Role,
    RunNotFound,
    RunState,
    Runtime,
    ScriptedProvider,
    StepKind,
    StepStatus,
    ToolCall,
    ToolContext,
    WaitTimeout,
    tool,
)
from leaseward.actors import Persister, Reply
from leaseward.actors.messages import (
    Cancel,
    Claim,
    Persist,
    PersisterMessage,
    ReapRuns,
    Renew,
    Submit,
)
from leaseward.actors.persister import COHORT_AT, SPLIT_AT
from leaseward.runtime.commits import CommitOutcome, Fenced, Stored, Unanswered
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import Event, RunMode
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.storage import (
    BatchItem,
    CancelOutcome,
    ClaimRequest,
    Reap,
    SQLStore,
    WriteBatch,
    WriteResults,
    open_store,
)
from leaseward.storage.journal_items import SET_STATEMENTS_AT
from tests.integration.faults import Injection, faulty_store, query
from tests.stores import created

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.05}


@tool
async def look(ctx: ToolContext, key: str) -> str:
    return key


def echo_app() -> App:
    """One agent, "echo": a read-only tool call, then an answer."""

    def reply(request: ProviderRequest) -> ProviderReply:
        if any(message.role is Role.TOOL for message in request.messages):
            return ProviderReply(text="done")
        return ProviderReply(tool_calls=(ToolCall("look", {"key": "k"}, "c1"),))

    return App([Agent("echo", ScriptedProvider(reply), tools=[look])])


@pytest.fixture
async def counted(tmp_path: Path) -> AsyncIterator[tuple[SQLStore, Injection]]:
    """A SQLite store, and a count of the statements it sends to the database."""
    store, executor = await faulty_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        yield store, executor.inject(lambda statement: True)
    finally:
        await store.aclose()


def queued(agent: str = "a") -> NewRun:
    return NewRun(id=str(uuid.uuid4()), agent=agent, mode=RunMode.QUEUED, input_json='"x"')


def read_step(seq: int) -> StepWrite:
    return StepWrite(
        seq=seq,
        kind=StepKind.PROVIDER,
        status=StepStatus.SUCCEEDED,
        output_json=dump_json({"text": f"turn {seq}"}),
    )


async def statements_for(
    store: SQLStore, statements: Injection, runs: int, *, lease_seconds: float = 30.0
) -> int:
    """Statements one batch of ``runs`` items costs: two steps each, and a renewal of
    ``lease_seconds`` each (0: none)."""
    await store.commit(WriteBatch(new_runs=tuple(queued() for _ in range(runs))))
    [claimed] = (
        await store.commit(WriteBatch(claims=(ClaimRequest("w", runs, 30.0, ("a",)),)))
    ).claims
    assert not isinstance(claimed, Exception) and len(claimed) == runs
    before = statements.fired
    results = await store.commit(
        WriteBatch(
            items=tuple(
                BatchItem(
                    run.id,
                    run.epoch,
                    steps=(read_step(0), read_step(1)),
                    lease_seconds=lease_seconds,
                )
                for run in claimed
            )
        )
    )
    assert all(isinstance(outcome, Stored) for outcome in results.items)
    return statements.fired - before


async def test_a_batch_costs_the_same_statements_for_one_item_or_a_hundred(
    counted: tuple[SQLStore, Injection],
) -> None:
    store, statements = counted
    # The renewal, the fence, and one insert of every row, row by row or from
    # SET_STATEMENTS_AT on in a set; BEGIN and COMMIT are the executor's own.
    assert SET_STATEMENTS_AT <= 100
    for items in (1, 100, 300, 600):
        assert await statements_for(store, statements, items) == 3
    # Items that only fence (most of a run's commits) cost no renewal.
    for items in (1, 100):
        assert await statements_for(store, statements, items, lease_seconds=0.0) == 2


async def test_a_claim_in_a_batch_leases_a_run_submitted_in_the_same_batch(
    store_url: str,
) -> None:
    store = await open_store(store_url)
    try:
        new = queued()
        results = await store.commit(
            WriteBatch(new_runs=(new,), claims=(ClaimRequest("w", 10, 30.0, ("a",)),))
        )
    finally:
        await store.aclose()
    [created], [claimed] = results.new_runs, results.claims
    assert not isinstance(created, Exception) and created.id == new.id
    assert not isinstance(claimed, Exception)
    assert [(run.id, run.state, run.epoch) for run in claimed] == [(new.id, RunState.RUNNING, 1)]


async def test_a_refused_request_is_answered_alone_and_the_rest_of_its_batch_commits(
    store_url: str,
) -> None:
    store = await open_store(store_url)
    try:
        good = queued()
        # An id no database can hold as text: the insert of every run fails with it.
        bad = NewRun(id="\ud83d", agent="a", mode=RunMode.QUEUED, input_json='"x"')
        results = await store.commit(WriteBatch(new_runs=(good, bad), cancels=("nobody",)))
        stored = await store.get_run(good.id)
    finally:
        await store.aclose()
    created, refused = results.new_runs
    assert not isinstance(created, Exception) and created.id == good.id
    assert isinstance(refused, Exception)
    assert isinstance(results.cancels[0], Exception) and "nobody" in str(results.cancels[0])
    assert stored is not None and stored.state is RunState.QUEUED


async def test_concurrent_submits_share_a_few_transactions(db_url: str) -> None:
    async with Runtime.open(db_url, echo_app(), concurrency=1, **FAST) as rt:
        stats = rt.supervisor.persister.stats
        batches, requests = stats.batches, stats.items
        async with anyio.create_task_group() as submits:
            for n in range(300):
                submits.start_soon(rt.submit, "echo", n)
        batches, requests = stats.batches - batches, stats.items - requests
        queued_runs = await rt.runs(limit=1000)
    assert len(queued_runs) == 300
    # Every submit went through the Persister, and each batch took what queued
    # while the one before it committed: a few transactions, not one per submit.
    assert requests >= 300
    assert batches <= 10


async def test_submit_many_queues_every_run_or_none(db_url: str) -> None:
    async with Client.open(created(db_url), app=echo_app()) as client:
        ids = await client.submit_many("echo", [{"n": n} for n in range(50)])
        with pytest.raises(InvalidInput):
            await client.submit_many("echo", [1, 2, {3: "not json"}])
        runs = await client.runs(limit=1000)
    assert len(set(ids)) == 50
    assert sorted(run.id for run in runs) == sorted(ids)
    assert all(run.state is RunState.QUEUED for run in runs)


async def test_a_waiter_is_woken_by_its_own_run_not_by_every_settlement(db_url: str) -> None:
    store, executor = await faulty_store(db_url)
    # Every read a waiter makes of its run, as every waiter polling would make them.
    gets = executor.inject(query("read_runs"))
    try:
        async with Runtime.open(store, echo_app(), concurrency=40, **FAST) as rt:
            ids = [await rt.submit("echo", n) for n in range(40)]
            async with anyio.create_task_group() as waits:
                for run_id in ids:
                    waits.start_soon(rt.wait, run_id, 30)
            infos = [await rt.get(run_id) for run_id in ids]
    finally:
        await store.aclose()
    assert all(info.state is RunState.COMPLETED for info in infos)
    # One read before waiting and one after the wake-up per waiter: a settlement
    # waking every waiter would make about 40 x 40.
    assert gets.fired <= 3 * len(ids) + len(ids)


async def test_a_waiter_for_many_runs_reads_them_together_and_keeps_their_order(
    db_url: str,
) -> None:
    store, executor = await faulty_store(db_url)
    one_by_one = executor.inject(query("read_run"))
    together = executor.inject(query("read_runs"))
    try:
        async with Runtime.open(store, echo_app(), concurrency=40, **FAST) as rt:
            ids = await rt.submit_many("echo", list(range(40)))
            infos = await rt.wait_all([*reversed(ids), ids[0]], timeout=30)
    finally:
        await store.aclose()
    assert [info.id for info in infos] == [*reversed(ids), ids[0]]
    assert all(info.state is RunState.COMPLETED for info in infos)
    # One read of them all, then one of those that settled at each wake-up: far fewer
    # than the one or two per run that waiting for each in turn makes.
    assert one_by_one.fired == 0
    assert together.fired <= len(ids) // 2


async def test_a_waiter_for_many_runs_sees_those_another_process_finished(db_url: str) -> None:
    async with Client.open(created(db_url), app=echo_app()) as client:
        ids = await client.submit_many("echo", list(range(5)))
        async with anyio.create_task_group() as elsewhere:
            waited = client.wait_all(ids, timeout=30)

            async def work() -> None:
                # Another runtime on the same file: its settlements wake nobody here,
                # so the waiter finds them by looking again.
                async with Runtime.open(db_url, echo_app(), concurrency=5, **FAST) as rt:
                    await rt.wait_all(ids, timeout=30)

            elsewhere.start_soon(work)
            infos = await waited
    assert [info.id for info in infos] == ids
    assert all(info.state is RunState.COMPLETED for info in infos)


async def test_waiting_for_many_runs_names_an_unknown_one_and_how_many_did_not_finish(
    db_url: str,
) -> None:
    # A client with no worker: the runs it queues stay queued.
    async with Client.open(created(db_url), app=echo_app()) as client:
        ids = await client.submit_many("echo", [1, 2])
        with pytest.raises(RunNotFound, match="no-such-run"):
            await client.wait_all([ids[0], "no-such-run"], timeout=5)
        with pytest.raises(WaitTimeout, match=r"2 of 2 runs did not finish within 0\.1 seconds"):
            await client.wait_all(ids, timeout=0.1)


async def test_a_wait_with_no_time_left_still_looks_at_the_runs_once(db_url: str) -> None:
    async with Runtime.open(db_url, echo_app(), **FAST) as rt:
        finished = await rt.run("echo", 1)
        assert (await rt.wait(finished.id, timeout=0)).state is RunState.COMPLETED
        [info] = await rt.wait_all([finished.id], timeout=0)
        assert info.state is RunState.COMPLETED
        with pytest.raises(RunNotFound, match="no-such-run"):
            await rt.wait("no-such-run", timeout=0)
    # No worker now: a run that has not finished is not waited for.
    async with Client.open(db_url, app=echo_app()) as client:
        [queued] = await client.submit_many("echo", [2])
        with pytest.raises(WaitTimeout, match="within 0 seconds"):
            await client.wait(queued, timeout=0)


@pytest.mark.parametrize("timeout", [-1.0, float("nan"), "5"])
async def test_a_timeout_that_is_no_number_of_seconds_is_invalid_input(
    db_url: str, timeout: Any
) -> None:
    async with Client.open(created(db_url), app=echo_app()) as client:
        [run_id] = await client.submit_many("echo", [1])
        with pytest.raises(InvalidInput, match="timeout"):
            await client.wait(run_id, timeout=timeout)
        with pytest.raises(InvalidInput, match="timeout"):
            await client.wait_all([run_id], timeout=timeout)


@pytest.mark.parametrize("inputs", ["abc", {"order": 42}, b"ab"], ids=["str", "dict", "bytes"])
async def test_one_input_given_for_many_is_invalid_input_and_queues_nothing(
    db_url: str, inputs: Any
) -> None:
    async with Client.open(created(db_url), app=echo_app()) as client:
        with pytest.raises(InvalidInput, match=r"submit\(\)"):
            await client.submit_many("echo", inputs)
        assert await client.runs() == []


async def test_one_run_id_given_for_many_is_invalid_input(db_url: str) -> None:
    async with Client.open(created(db_url), app=echo_app()) as client:
        run_id = await client.submit("echo", 1)
        with pytest.raises(InvalidInput, match=r"wait\(\)"):
            await client.wait_all(run_id, timeout=1)


def hold_write_lock(path: str, locked: threading.Event, release: threading.Event) -> None:
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        locked.set()
        release.wait(10)
        connection.execute("ROLLBACK")
    finally:
        connection.close()


async def test_sqlite_reads_go_on_while_a_batch_waits_for_the_write_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    async with Runtime.open(f"sqlite:///{path}", echo_app(), concurrency=1, **FAST) as rt:
        done = await rt.submit("echo", "first")
        await rt.wait(done, timeout=10)
        locked, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=hold_write_lock, args=(path, locked, release))
        holder.start()
        try:
            await anyio.to_thread.run_sync(locked.wait)
            async with anyio.create_task_group() as blocked:
                # This submit's batch waits on the busy timeout, holding the writer.
                blocked.start_soon(rt.submit, "echo", "second")
                await anyio.sleep(0.1)
                started = time.monotonic()
                with anyio.fail_after(2):
                    info = await rt.get(done)
                    journal = await rt.steps(done)
                    listed = await rt.runs()
                read_seconds = time.monotonic() - started
                release.set()
        finally:
            release.set()
            await anyio.to_thread.run_sync(holder.join)
    assert info.state is RunState.COMPLETED and journal and listed
    assert read_seconds < 2


async def test_a_stale_item_in_a_set_writes_nothing_beside_live_items_of_the_same_run(
    store_url: str,
) -> None:
    """G: a stale worker changes nothing, even when its item shares one fenced set
    statement with the new owner's item for the same run and with another run's."""
    store = await open_store(store_url)
    try:
        await store.create_run(queued())
        [first] = await store.claim_runs("old", 1, 30.0, ["a"])
        release = Settlement(Event.RELEASE)
        [released] = await store.commit_batch([BatchItem(first.id, 1, settlement=release)])
        assert isinstance(released, Stored)
        [again] = await store.claim_runs("new", 1, 30.0, ["a"])
        assert (again.id, again.epoch) == (first.id, 2)
        await store.create_run(queued())
        [held] = await store.claim_runs("other", 1, 30.0, ["a"])
        stale, live, beside = await store.commit_batch(
            [
                BatchItem(first.id, 1, steps=(read_step(0), read_step(1)), settlement=release),
                BatchItem(first.id, 2, steps=(read_step(0),), lease_seconds=30.0),
                BatchItem(held.id, 1, steps=(read_step(0),), settlement=release),
            ]
        )
        journal = await store.list_steps(first.id)
        run = await store.get_run(first.id)
    finally:
        await store.aclose()
    assert stale == Fenced()
    assert live == Stored()
    assert beside == Stored()
    assert [(step.seq, step.epoch) for step in journal] == [(0, 2)]
    assert run is not None and (run.state, run.epoch, run.lease_owner) == (
        RunState.RUNNING,
        2,
        "new",
    )


async def test_one_batch_of_every_kind_of_request_answers_each_asker_its_own_share(
    store_url: str,
) -> None:
    """The Persister knows no kind: each request adds its own part to the batch and
    takes exactly its part of the results back, whatever else shares the batch."""
    store = await open_store(store_url)
    try:
        runs = [await store.create_run(queued()) for _ in range(4)]
        claimed = {run.id: run for run in await store.claim_runs("w", 3, 30.0, ["a"])}
        writer, kept, reaped = (run for run in runs if run.id in claimed)
        (waiting,) = (run for run in runs if run.id not in claimed)
        (expired,) = await store.expired_runs(
            [mark for mark in await store.running_leases() if mark.run_id == reaped.id]
        )
        fresh_a, fresh_b = queued(), queued("b")
        requests: list[PersisterMessage] = [
            Persist(BatchItem(writer.id, 1, steps=(read_step(0),), lease_seconds=30.0), Reply()),
            # Its own lease, and one at an epoch the run never had.
            Renew(
                (
                    BatchItem(kept.id, 1, lease_seconds=30.0),
                    BatchItem(kept.id, 7, lease_seconds=30.0),
                ),
                Reply(),
            ),
            Submit((fresh_a, fresh_b), Reply()),
            Cancel(waiting.id, Reply()),
            Persist(BatchItem(writer.id, 2, steps=(read_step(1),), lease_seconds=30.0), Reply()),
            ReapRuns((Reap(expired, Settlement(Event.REQUEUE)),), Reply()),
            Claim(ClaimRequest("w2", 5, 30.0, ("b",)), Reply()),
            Cancel("nobody", Reply()),
        ]
        persister = Persister(store)
        # Queued before the Persister starts, so that they all make its first batch.
        for request in requests:
            persister.mailbox.send_nowait(request)
        async with anyio.create_task_group() as actors:
            actors.start_soon(persister.run)
            with anyio.fail_after(10):
                answers = [await request.reply for request in requests]
            actors.cancel_scope.cancel()
        journal = await store.list_steps(writer.id)
    finally:
        await store.aclose()

    assert (persister.stats.batches, persister.stats.largest_batch) == (1, 10)
    stored, renewed, submitted, cancelled, stale, reaps, leased, unknown = answers
    assert stored == Stored()
    assert renewed == (Stored(), Fenced())
    assert isinstance(submitted, tuple)
    assert [run.id for run in submitted if isinstance(run, RunRecord)] == [fresh_a.id, fresh_b.id]
    assert cancelled is CancelOutcome.CANCELLED
    assert stale == Fenced()
    assert reaps == (True,)
    assert isinstance(leased, tuple)
    assert [(r.id, r.epoch) for r in leased if isinstance(r, RunRecord)] == [(fresh_b.id, 1)]
    assert isinstance(unknown, RunNotFound)
    assert [(step.seq, step.epoch) for step in journal] == [(0, 1)]


class ShortAnsweringStore:
    """Answers one journal item fewer than it was sent: a store's bug."""

    async def commit(self, batch: WriteBatch) -> WriteResults:
        return WriteResults(items=(Stored(),) * (len(batch.items) - 1))


async def test_results_that_cannot_be_shared_out_leave_no_asker_waiting() -> None:
    persister = Persister(ShortAnsweringStore())  # type: ignore[arg-type]
    requests = [Persist(BatchItem(f"run-{n}", 1), Reply()) for n in range(2)]
    for request in requests:
        persister.mailbox.send_nowait(request)
    with pytest.raises(ValueError, match="results"):
        await persister.run()
    # The batch may be stored, and nobody can say which item is: none counts as stored.
    with anyio.fail_after(1):
        answers = [await request.reply for request in requests]
    assert answers == [Unanswered("the persister could not answer")] * 2


class RecordingStore:
    """Stores every item, and keeps each batch it was given, in order."""

    renews_apart = False

    def __init__(self) -> None:
        self.batches: list[WriteBatch] = []

    async def commit(self, batch: WriteBatch) -> WriteResults:
        self.batches.append(batch)
        return WriteResults(items=(Stored(),) * len(batch.items))


async def test_a_lease_renewal_goes_ahead_of_every_write_queued_before_it() -> None:
    store = RecordingStore()
    persister = Persister(store, max_batch=4)  # type: ignore[arg-type]
    queued_first = [Persist(BatchItem(f"run-{n}", 1), Reply()) for n in range(10)]
    for request in queued_first:
        persister.mailbox.send_nowait(request)
    async with anyio.create_task_group() as actors:
        renewal = await start_renewal(actors, persister, [BatchItem("kept", 3, lease_seconds=30.0)])
        actors.start_soon(persister.run)
        with anyio.fail_after(10):
            assert await renewal == (Stored(),)
            for request in queued_first:
                await request.reply
        actors.cancel_scope.cancel()

    # The renewal was asked for last and committed first; the rest kept their order.
    assert [item.run_id for item in store.batches[0].items][:1] == ["kept"]
    assert [item.run_id for batch in store.batches for item in batch.items][1:] == [
        f"run-{n}" for n in range(10)
    ]


async def start_renewal(
    actors: anyio.abc.TaskGroup, persister: Persister, items: list[BatchItem]
) -> Reply[tuple[CommitOutcome, ...]]:
    """Ask ``persister`` for ``items``' renewal in a task of ``actors``; its answer's channel."""
    answered: Reply[tuple[CommitOutcome, ...]] = Reply()

    async def renew() -> None:
        answered.answer(await persister.renew(items))

    actors.start_soon(renew)
    # The renewal is in the mailbox before the Persister's first drain.
    await anyio.lowlevel.checkpoint()
    return answered


class HeldStore:
    """Stores every item, each commit held until ``let_go`` is set; counts how many
    batches were in its hands at once."""

    def __init__(self) -> None:
        self.batches: list[WriteBatch] = []
        self.let_go = anyio.Event()
        self.in_hand = 0
        self.most_in_hand = 0
        self._handed = anyio.Event()

    async def until_handed(self, batches: int) -> None:
        while len(self.batches) < batches:
            await self._handed.wait()

    async def commit(self, batch: WriteBatch) -> WriteResults:
        self.batches.append(batch)
        self._handed.set()
        self._handed = anyio.Event()
        self.in_hand += 1
        self.most_in_hand = max(self.most_in_hand, self.in_hand)
        try:
            await self.let_go.wait()
        finally:
            self.in_hand -= 1
        return WriteResults(items=(Stored(),) * len(batch.items))


async def committed_by(
    store: HeldStore, persister: Persister, waiting: int, batches: int
) -> tuple[list[int], list[CommitOutcome]]:
    """With ``waiting`` journal items queued, the sizes of the first ``batches`` batches
    ``persister`` hands ``store`` before any is answered, and then every answer."""
    requests = [Persist(BatchItem(f"run-{n}", 1), Reply()) for n in range(waiting)]
    for request in requests:
        persister.mailbox.send_nowait(request)
    async with anyio.create_task_group() as actors:
        actors.start_soon(persister.run)
        sizes, answers = await held_then_answered(store, batches, requests)
        actors.cancel_scope.cancel()
    return sizes, answers


async def held_then_answered(
    store: HeldStore, batches: int, requests: Sequence[Persist]
) -> tuple[list[int], list[CommitOutcome]]:
    """The sizes of the batches ``store`` holds once it has ``batches`` of them and no
    more come, and then, each let go, every answer to ``requests``."""
    with anyio.fail_after(5):
        await store.until_handed(batches)
    # A batch more would have been handed over by now, were it to be.
    for _ in range(10):
        await anyio.lowlevel.checkpoint()
    sizes = [len(batch.items) for batch in store.batches]
    store.let_go.set()
    with anyio.fail_after(5):
        answers = [await request.reply for request in requests]
    return sizes, answers


async def a_quarter_then_the_rest(
    store: HeldStore, persister: Persister, actors: anyio.abc.TaskGroup
) -> list[Persist]:
    """Start ``persister`` in ``actors`` with 25 journal items waiting, and send 75 more
    once the 25 are in ``store``'s hands; returns the 100, in the order sent."""
    first = [Persist(BatchItem(f"first-{n}", 1), Reply()) for n in range(25)]
    later = [Persist(BatchItem(f"later-{n}", 1), Reply()) for n in range(75)]
    for request in first:
        persister.mailbox.send_nowait(request)
    actors.start_soon(persister.run)
    with anyio.fail_after(5):
        await store.until_handed(1)
    for request in later:
        persister.mailbox.send_nowait(request)
    return [*first, *later]


async def test_a_store_that_commits_side_by_side_gets_half_of_what_waits_and_the_rest_at_once() -> (
    None
):
    store = HeldStore()
    persister = Persister(store, concurrent_batches=2)  # type: ignore[arg-type]
    sizes, answers = await committed_by(store, persister, 40, 2)
    assert sizes == [20, 20]
    assert store.most_in_hand == 2
    assert answers == [Stored()] * 40


async def test_batches_side_by_side_stay_even_when_many_come_while_a_small_one_is_in_flight() -> (
    None
):
    """Before, a batch took every request that waited while a small one was in flight:
    at N=100 on PostgreSQL the two settled at a quarter and three quarters of the runs,
    and the loop waited while the large one committed. Now each takes its share of
    what waits or is in flight: 25 in flight and 75 waiting make a batch of 50."""
    store = HeldStore()
    persister = Persister(store, concurrent_batches=2)  # type: ignore[arg-type]
    async with anyio.create_task_group() as actors:
        requests = await a_quarter_then_the_rest(store, persister, actors)
        sizes, answers = await held_then_answered(store, 2, requests)
        actors.cancel_scope.cancel()
    assert sizes[:2] == [25, 50]
    assert sum(len(batch.items) for batch in store.batches) == 100
    assert store.most_in_hand == 2
    assert answers == [Stored()] * 100


async def test_a_few_waiting_requests_are_not_split() -> None:
    store = HeldStore()
    persister = Persister(store, concurrent_batches=2)  # type: ignore[arg-type]
    sizes, answers = await committed_by(store, persister, SPLIT_AT - 1, 1)
    assert sizes == [SPLIT_AT - 1]
    assert answers == [Stored()] * (SPLIT_AT - 1)


async def test_a_store_with_one_writer_gets_one_batch_at_a_time_half_of_a_cohort_first() -> None:
    store = HeldStore()
    persister = Persister(store)  # type: ignore[arg-type]
    sizes, answers = await committed_by(store, persister, 40, 1)
    assert sizes == [20]
    assert store.most_in_hand == 1
    assert answers == [Stored()] * 40


async def send_to_a_waiting_persister(
    persister: Persister, actors: anyio.abc.TaskGroup, requests: Sequence[PersisterMessage]
) -> None:
    """Start ``persister`` in ``actors`` and, once it waits on an empty mailbox, send it
    ``requests`` in one turn of the event loop, as a batch's runs or a burst send theirs."""
    actors.start_soon(persister.run)
    for _ in range(3):
        await anyio.lowlevel.checkpoint()
    for request in requests:
        persister.mailbox.send_nowait(request)


async def batches_of_requests_sent_together(sent: int) -> list[int]:
    """The sizes of the batches a one-writer Persister, idle with nothing waiting, makes of
    ``sent`` journal items that come in one turn of the event loop, as the runs a batch
    answered send theirs; each batch is held until the one before it is answered."""
    store = HeldStore()
    persister = Persister(store)  # type: ignore[arg-type]
    requests = [Persist(BatchItem(f"run-{n}", 1), Reply()) for n in range(sent)]
    async with anyio.create_task_group() as actors:
        await send_to_a_waiting_persister(persister, actors, requests)
        with anyio.fail_after(5):
            while sum(len(batch.items) for batch in store.batches) < sent:
                await store.until_handed(len(store.batches) + 1)
                assert store.most_in_hand == 1
                store.let_go.set()
                store.let_go = anyio.Event()
            for request in requests:
                assert await request.reply == Stored()
        actors.cancel_scope.cancel()
    return [len(batch.items) for batch in store.batches]


async def test_a_store_with_one_writer_splits_what_came_together_into_two_cohorts() -> None:
    """The runs of one batch send their next requests together: half of them go first,
    and the rest, a cohort by then, right behind, while the first half's runs step."""
    assert await batches_of_requests_sent_together(100) == [50, 50]
    assert await batches_of_requests_sent_together(SPLIT_AT) == [SPLIT_AT // 2] * 2
    assert await batches_of_requests_sent_together(SPLIT_AT - 1) == [SPLIT_AT - 1]


async def first_batch_beside_a_late_request(waiting: int) -> int:
    """The size of the first batch a one-writer Persister hands its store with ``waiting``
    journal items queued, while one more is sent in the event loop's next turn."""
    store = HeldStore()
    persister = Persister(store)  # type: ignore[arg-type]
    requests = [Persist(BatchItem(f"run-{n}", 1), Reply()) for n in range(waiting)]
    for request in requests:
        persister.mailbox.send_nowait(request)
    late = Persist(BatchItem("late", 1), Reply())

    async def send_late() -> None:
        await anyio.lowlevel.checkpoint()
        persister.mailbox.send_nowait(late)

    async with anyio.create_task_group() as actors:
        actors.start_soon(send_late)
        actors.start_soon(persister.run)
        with anyio.fail_after(5):
            await store.until_handed(1)
        size = len(store.batches[0].items)
        store.let_go.set()
        with anyio.fail_after(5):
            for request in [*requests, late]:
                assert await request.reply == Stored()
        actors.cancel_scope.cancel()
    return size


async def test_a_cohort_waiting_is_committed_at_once_and_a_few_wait_for_the_next_turn() -> None:
    """With COHORT_AT requests waiting, the batch is theirs at once: the runs the last
    batch answered take their steps while it commits. Fewer wait one turn of the event
    loop, in which those runs join them."""
    assert await first_batch_beside_a_late_request(COHORT_AT) == COHORT_AT
    assert await first_batch_beside_a_late_request(COHORT_AT - 1) == COHORT_AT


async def test_a_store_with_one_writer_keeps_its_two_cohorts_even() -> None:
    """Before, a cohort waiting was the next batch whole: at N=100 the runs fell into
    cohorts of 25 and 75 that stayed so, and the loop waited while the 75 committed,
    the 25 runs' steps long done. Now a cohort takes its share of what waits and of the
    runs the last batch answered: after 25, a cohort of 75 waiting makes a batch of 50."""
    store = HeldStore()
    persister = Persister(store)  # type: ignore[arg-type]
    async with anyio.create_task_group() as actors:
        requests = await a_quarter_then_the_rest(store, persister, actors)
        with anyio.fail_after(5):
            while sum(len(batch.items) for batch in store.batches) < 100:
                store.let_go.set()
                store.let_go = anyio.Event()
                await store.until_handed(len(store.batches) + 1)
            store.let_go.set()
            answers = [await request.reply for request in requests]
        actors.cancel_scope.cancel()
    assert [len(batch.items) for batch in store.batches] == [25, 50, 25]
    assert store.most_in_hand == 1
    assert answers == [Stored()] * 100


@pytest.mark.parametrize("side_by_side", [1, 2])
async def test_a_burst_of_submits_is_one_batch_with_the_claim_sent_behind_it(
    store_url: str, side_by_side: int
) -> None:
    """Before, 40 submits that came together, to a Persister waiting for mail, were split
    as runs' steps are, and the claim sent after the first of them leased only the
    runs of its half: the others waited for a claim of their own. Submits are no
    cohort of runs: they commit together, and the claim leases every one of them,
    whether batches commit one at a time or side by side."""
    store = await open_store(store_url)
    try:
        first = Submit((queued(),), Reply())
        claim = Claim(ClaimRequest("w", 100, 30.0, ("a",)), Reply())
        rest = [Submit((queued(),), Reply()) for _ in range(39)]
        requests: list[PersisterMessage] = [first, claim, *rest]
        persister = Persister(store, concurrent_batches=side_by_side)
        async with anyio.create_task_group() as actors:
            await send_to_a_waiting_persister(persister, actors, requests)
            with anyio.fail_after(10):
                leased = await claim.reply
                for request in [first, *rest]:
                    await request.reply
            actors.cancel_scope.cancel()
    finally:
        await store.aclose()
    assert isinstance(leased, tuple)
    assert len(leased) == 40
    assert persister.stats.batches == 1


async def test_a_renewal_ahead_of_a_cohort_leaves_it_shared_out() -> None:
    """The keeper's renewals go to the head of the mailbox, ahead of the runs' steps:
    the batch it begins still takes only its share of them, as any cohort's would."""
    store = HeldStore()
    persister = Persister(store)  # type: ignore[arg-type]
    steps = [Persist(BatchItem(f"run-{n}", 1), Reply()) for n in range(40)]
    for request in steps:
        persister.mailbox.send_nowait(request)
    renewal = Renew((BatchItem("kept", 3, lease_seconds=30.0),), Reply())
    persister.mailbox.send_first(renewal)
    async with anyio.create_task_group() as actors:
        actors.start_soon(persister.run)
        with anyio.fail_after(5):
            await store.until_handed(1)
            store.let_go.set()
            assert await renewal.reply == (Stored(),)
            answers = [await request.reply for request in steps]
        actors.cancel_scope.cancel()
    assert [item.run_id for item in store.batches[0].items][:1] == ["kept"]
    assert len(store.batches[0].items) == 21
    assert answers == [Stored()] * 40
