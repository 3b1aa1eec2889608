"""The Persister: the single writer of a worker process, committing every write in groups."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import attrs
from anyio.abc import TaskStatus

from leaseward.actors.mailbox import Mailbox, Reply
from leaseward.actors.messages import (
    Cancel,
    Claim,
    Persist,
    PersisterMessage,
    ReapRuns,
    Renew,
    Submit,
)
from leaseward.actors.metrics import Metrics
from leaseward.actors.store_faults import StoreFaults
from leaseward.runtime.commits import CommitOutcome, Refused, Unanswered
from leaseward.runtime.errors import CommitOutcomeUnknown, LeasewardError, StoreError
from leaseward.runtime.logs import get_logger
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.storage.crash_points import ARMED, carries_outcome, crash_point
from leaseward.storage.protocol import (
    BatchItem,
    CancelOutcome,
    ClaimRequest,
    Reap,
    Store,
    WriteBatch,
    unwrap,
)

__all__ = [
    "AT_ONCE_RUNS",
    "AT_ONCE_SECONDS",
    "COHORT_AT",
    "MAX_BATCH_ITEMS",
    "SPLIT_AT",
    "Persister",
    "PersisterStats",
]

MAX_BATCH_ITEMS = 512
"""Requests after which a batch takes no more (a submit of many runs counts each run,
and is never split: one larger than this is a batch of its own, or ends one)."""

SPLIT_AT = 32
"""Requests, at least, to be shared out between batches: those waiting and in flight,
for a store that commits batches side by side; for a store with one writer (split in
two), those waiting when they all came together, or a cohort waiting and the runs the
last batch answered."""

COHORT_AT = 16
"""Requests waiting, at least, when a store with one writer is free again, for them to be
its next batch at once: they were sent while the last batch committed, and the runs it
answered take their steps while this one commits. Fewer wait one turn of the event
loop, in which those runs join them."""

AT_ONCE_SECONDS = 0.02
"""How long submits committed at once may hold the event loop, in all, between two of its
turns; they are one task's. Past it, or from another task, a submit joins the next
batch, and whoever else waits gets the loop."""

AT_ONCE_RUNS = 32
"""Runs a submit carries, at most, to be committed at once: more make a write that would
hold the loop long, for a wait that their number already shares out."""

# Requests whose batch takes all that waits: a burst of them is no cohort of runs.
_TAKING_ALL = (Submit, Claim)

log = get_logger("leaseward.persister")

_BATCH_FAILED = "persister.batch_failed"
# Batches whose outcome is unknown, summed up apart: they may leave writes to be resolved.
_BATCH_UNANSWERED = "persister.batch_failed.outcome_unknown"


@attrs.define
class PersisterStats:
    batches: int = 0
    items: int = 0
    largest_batch: int = 0
    commit_seconds: float = 0.0
    at_once: int = 0
    """Submits committed at once, on their caller's turn; each is one of ``batches``."""


class _TurnShare:
    """What work done at once has taken of the event loop's turn, and for which task.

    One task's at a turn: one task submitting after another is what waits a batch
    each, where many tasks submitting together are what a batch is for.
    """

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._spent = 0.0
        self._holder: asyncio.Task[Any] | None = None

    def left(self) -> float:
        return max(0.0, self._seconds - self._spent)

    def allows(self) -> bool:
        holder = self._holder
        return holder is None or (self._spent < self._seconds and holder is asyncio.current_task())

    def spend(self, seconds: float) -> None:
        if self._holder is None:
            self._holder = asyncio.current_task()
            # Runs once the loop comes round again: everyone else has had a turn.
            asyncio.get_running_loop().call_soon(self._turned)
        self._spent += seconds

    def _turned(self) -> None:
        self._spent = 0.0
        self._holder = None


class Persister:
    """Drains its mailbox and commits what it found in one transaction (group commit).

    Every write of the process comes here: journal items, lease renewals,
    submits, claims, cancels and reaps. While one batch commits, new requests queue in the
    mailbox and form the next batch, so the cost of an fsync is shared by
    every request that waited on it. ``group_commit=False`` commits one
    request a transaction (for comparison).

    A store with one writer (SQLite), or a server so near that a second batch would only
    take CPU from the runs (``Store.concurrent_batches``), gets one batch at a time.
    When it is free again and a cohort of COHORT_AT or more waits, sent while the last
    batch committed, that cohort is the batch at once, committed while the runs just
    answered take their steps. Fewer are joined by those runs, which take one turn of
    the event loop to send their requests; and when all of them came so, in step, half
    go first and the rest right behind, which is how the runs fall into two cohorts
    that take turns.
    A cohort takes no more than half of itself and the runs just answered, so that the
    two stay even: the loop steps one half of the runs while the other half commits.

    A submit of a few runs (AT_ONCE_RUNS) is committed at once, on its caller's turn of
    the event loop (``Store.commit_at_once``), waiting there for a batch in flight on
    SQLite's thread to end: one submit after another, as a backfill makes them, would
    each wait for a batch, and with the runs taking turns the writer is never idle.
    Those at once hold the loop for no more than AT_ONCE_SECONDS a turn, waits
    included, and are one task's; past it, from another task, or with the writer held
    otherwise (another process), a submit joins the next batch.

    A store that commits ``concurrent_batches`` batches side by side (a PostgreSQL
    server a network away, on connections of its own) gets up to that many at once,
    each with its share of the requests waiting and in flight: with none in flight,
    half of what waits goes first and the rest right behind it, and from then on the
    batches stay even. The runs answered by one take their next steps while the other's
    commit is on its way, instead of every run waiting for every commit together.

    A batch that a submit or a claim begins is not shared out: it takes all that waits,
    up to its size. A burst of submits is no cohort of runs, and the claim sent behind
    the first of them leases every run of the burst when they commit together.
    """

    def __init__(
        self,
        store: Store,
        *,
        group_commit: bool = True,
        max_batch: int = MAX_BATCH_ITEMS,
        concurrent_batches: int | None = 1,
        metrics: Metrics | None = None,
        faults: StoreFaults | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics if metrics is not None else Metrics()
        self._faults = faults if faults is not None else StoreFaults()
        self._max_batch = max_batch if group_commit else 1
        self._group_commit = group_commit
        # None: as many as the store says as this actor starts, once its rehearsal has
        # measured the server's round trip.
        self._asked_batches = concurrent_batches
        self.concurrent_batches = 1
        """How many batches it commits side by side: decided as it starts running."""
        self.mailbox: Mailbox[PersisterMessage] = Mailbox()
        self.stats = PersisterStats()
        self._at_once = _TurnShare(AT_ONCE_SECONDS)
        # Requests in the batches on their way, for a store that commits side by side.
        self._in_flight = 0
        # Requests of the last batch, for a store with one writer: their runs take their
        # next steps while the next batch commits.
        self._answered = 0
        # The loop the actor runs on, for the commonest request's reply: a future made
        # without one looks up the running loop, a system call (getpid) each time.
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- requests ---------------------------------------------------------------------

    def persist(self, item: BatchItem) -> Awaitable[CommitOutcome]:
        """Send ``item`` to the next batch; await the answer. Not a coroutine: the
        commonest request of all goes out as it is made, with no frame of its own."""
        reply: Reply[CommitOutcome] = Reply(loop=self._loop or asyncio.get_running_loop())
        self.mailbox.send_nowait(Persist(item, reply))
        return reply

    async def renew(self, items: Sequence[BatchItem]) -> tuple[CommitOutcome, ...]:
        if self._store.renews_apart:
            # Not queued: a batch ahead of it (a reap, a settlement) may wait as long as
            # another transaction holds one run's row, and every lease of the worker would
            # run out behind it.
            return await self._renew_apart(items)
        reply: Reply[tuple[CommitOutcome, ...]] = Reply()
        # Ahead of the queue: a renewal that waits behind a flood of other writes (a
        # hundred thousand runs parking) lets leases run out under calls that are alive.
        self.mailbox.send_first(Renew(tuple(items), reply))
        return await reply

    async def _renew_apart(self, items: Sequence[BatchItem]) -> tuple[CommitOutcome, ...]:
        started = time.perf_counter()
        try:
            results = await self._store.commit(WriteBatch(items=tuple(items)))
        except LeasewardError as exc:
            unanswered = _batch_failed(self._faults, exc, len(items))
            failed = Unanswered(exc.message) if unanswered else Refused(exc.message)
            return (failed,) * len(items)
        self._faults.answered(_BATCH_FAILED, _BATCH_UNANSWERED)
        self._committed(len(items), time.perf_counter() - started)
        if len(results.items) != len(items):
            raise StoreError(f"{len(results.items)} results for {len(items)} renewals")
        return results.items

    async def submit(self, runs: Sequence[NewRun]) -> tuple[RunRecord | LeasewardError, ...]:
        if len(runs) <= AT_ONCE_RUNS and self._at_once.allows():
            started = time.perf_counter()
            results = self._store.commit_at_once(
                WriteBatch(new_runs=tuple(runs)), wait_seconds=self._at_once.left()
            )
            elapsed = time.perf_counter() - started
            self._at_once.spend(elapsed)
            if results is not None:
                self.stats.at_once += 1
                self._committed(len(runs), elapsed)
                return results.new_runs
        reply: Reply[tuple[RunRecord | LeasewardError, ...]] = Reply()
        self.mailbox.send_nowait(Submit(tuple(runs), reply))
        return await reply

    async def claim(self, request: ClaimRequest) -> tuple[RunRecord, ...]:
        reply: Reply[tuple[RunRecord, ...] | LeasewardError] = Reply()
        self.mailbox.send_nowait(Claim(request, reply))
        return unwrap(await reply)

    async def cancel(self, run_id: str) -> CancelOutcome:
        reply: Reply[CancelOutcome | LeasewardError] = Reply()
        self.mailbox.send_nowait(Cancel(run_id, reply))
        return unwrap(await reply)

    async def reap(self, reaps: Sequence[Reap]) -> tuple[bool | LeasewardError, ...]:
        reply: Reply[tuple[bool | LeasewardError, ...]] = Reply()
        self.mailbox.send_nowait(ReapRuns(tuple(reaps), reply))
        return await reply

    # -- the actor: drain, commit, answer ---------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._loop = asyncio.get_running_loop()
        if not self._group_commit:
            self.concurrent_batches = 1
        elif self._asked_batches is None:
            self.concurrent_batches = self._store.concurrent_batches
        else:
            self.concurrent_batches = self._asked_batches
        if self.concurrent_batches == 1:
            task_status.started()
            while True:
                batch = await self._drain()
                await self._commit(batch)
                self._answered = len(batch)
        slots = anyio.Semaphore(self.concurrent_batches)
        async with anyio.create_task_group() as batches:
            task_status.started()
            while True:
                await slots.acquire()
                batch = await self._drain(slots)
                self._in_flight += len(batch)
                batches.start_soon(self._commit_in, slots, batch)

    async def _commit_in(self, slots: anyio.Semaphore, batch: list[PersisterMessage]) -> None:
        try:
            # Shielded: a batch beside it that crashes the actor must not cut this one
            # off at its COMMIT, whose askers would then be told "not persisted" of a
            # commit that may have applied. The store's command timeout bounds it.
            with anyio.CancelScope(shield=True):
                await self._commit(batch)
        finally:
            self._in_flight -= len(batch)
            slots.release()

    async def _drain(self, slots: anyio.Semaphore | None = None) -> list[PersisterMessage]:
        """The next batch: the first request that comes, and every one waiting behind it
        up to the batch's size; unless the first is a submit or a claim, its share of
        them (see the class's description)."""
        cohort = slots is None and len(self.mailbox) >= COHORT_AT
        first = await self.mailbox.receive()
        batch, size = [first], first.size
        if not cohort:
            try:
                # One turn of the event loop lets the runs answered by the last batch
                # send their next request, so they join this batch instead of the next.
                await anyio.lowlevel.checkpoint()
            except BaseException:
                # Stopped with a request in hand (a batch beside this one crashed the
                # actor): it goes back to the head of the mailbox for the restarted actor.
                self.mailbox.send_first(first)
                raise
        limit = self._max_batch
        waiting = 1 + len(self.mailbox)
        if type(first) not in _TAKING_ALL:
            limit = (
                self._one_writer_share(waiting, limit, cohort=cohort)
                if slots is None
                else self._side_by_side_share(waiting, limit)
            )
        while size < limit:
            more = self.mailbox.receive_nowait()
            if more is None:
                break
            batch.append(more)
            size += more.size
        return batch

    def _one_writer_share(self, waiting: int, limit: int, *, cohort: bool) -> int:
        """How many of the ``waiting`` requests the next batch of one writer takes, at most
        ``limit``.

        Requests that all came in one turn are the runs of one batch in step: half of
        them commit while the other half wait, and from then on each half commits while
        the runs of the other take their steps. A cohort takes its share of what waits
        and of the runs the last batch answered, which join the rest of it: a whole
        cohort of 75 after a batch of 25 kept the runs at a quarter and three quarters
        for good, and the loop idle while the 75 committed, the 25 runs' steps long done.
        """
        sharing = waiting + self._answered if cohort else waiting
        return min(limit, -(-sharing // 2)) if sharing >= SPLIT_AT else limit

    def _side_by_side_share(self, waiting: int, limit: int) -> int:
        """How many of the ``waiting`` requests the next of batches committed side by side
        takes, at most ``limit``: its share of every request waiting or in flight, so that
        they stay even. A batch taking all that waited while a small one was in flight
        left the two at a quarter and three quarters, and the loop idle while the large
        one committed."""
        sharing = waiting + self._in_flight
        if sharing < SPLIT_AT:
            return limit
        return min(limit, -(-sharing // self.concurrent_batches))

    async def _commit(self, batch: list[PersisterMessage]) -> None:
        started = time.perf_counter()
        # Most batches are runs' journal items alone: those are joined and answered
        # item by item, without a batch and a share of the results per request.
        journal = [request for request in batch if type(request) is Persist]
        parts: list[WriteBatch] = []
        if len(journal) == len(batch):
            writes = WriteBatch(items=tuple(request.item for request in journal))
        else:
            parts = [request.writes for request in batch]
            writes = WriteBatch.joined(parts)
        try:
            results = await self._store.commit(writes)
        except LeasewardError as exc:
            _fail_all(batch, exc, unanswered=_batch_failed(self._faults, exc, len(writes)))
            return
        except BaseException:
            # Never leave an asker waiting: a crash here answers "not persisted",
            # which fails writes closed, before the Supervisor restarts this actor.
            _fail_all(batch, StoreError("the persister crashed"), unanswered=False)
            raise
        if ARMED and carries_outcome(step for item in writes.items for step in item.steps):
            crash_point("before_reply")
        self._faults.answered(_BATCH_FAILED, _BATCH_UNANSWERED)
        self._committed(len(writes), time.perf_counter() - started)
        try:
            if parts:
                for request, share in zip(batch, results.shares(parts), strict=True):
                    request.answer(share)
            else:
                # Checked before anyone is answered: one asker told "stored" by results
                # that do not match the batch would be told what nobody knows.
                if len(results) != len(journal) or len(results.items) != len(journal):
                    raise ValueError(f"{len(results)} results for {len(journal)} journal items")
                for persist, outcome in zip(journal, results.items, strict=True):
                    persist.reply.answer(outcome)
        except BaseException:
            # The batch is committed, but results that do not match its requests are
            # a store's bug: whoever was not answered yet cannot know what was stored.
            _fail_all(batch, StoreError("the persister could not answer"), unanswered=True)
            raise

    def _committed(self, size: int, elapsed: float) -> None:
        self.stats.batches += 1
        self.stats.items += size
        self.stats.largest_batch = max(self.stats.largest_batch, size)
        self.stats.commit_seconds += elapsed
        self._metrics.batch_committed(size, elapsed)
        log.debug("persister.committed", items=size, seconds=round(elapsed, 6))


def _batch_failed(faults: StoreFaults, error: LeasewardError, items: int) -> bool:
    """Log a batch the store did not commit; whether its outcome is unknown (sent, and
    its answer lost) rather than refused."""
    unanswered = isinstance(error, CommitOutcomeUnknown)
    faults.failed(
        log,
        _BATCH_FAILED,
        error.message,
        kind=_BATCH_UNANSWERED if unanswered else _BATCH_FAILED,
        items=items,
        outcome_unknown=unanswered,
    )
    return unanswered


def _fail_all(batch: list[PersisterMessage], error: LeasewardError, *, unanswered: bool) -> None:
    """Answer every asker of ``batch`` not answered yet (a reply keeps its first answer)."""
    for request in batch:
        request.fail(error, unanswered=unanswered)
