"""The Persister: the single writer of a worker process, committing every write in groups."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

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
from leaseward.runtime.errors import CommitOutcomeUnknown, LeasewardError, StoreError
from leaseward.runtime.logs import get_logger
from leaseward.runtime.model import NewRun, RunRecord
from leaseward.storage.crash_points import ARMED, carries_outcome, crash_point
from leaseward.storage.protocol import (
    BatchItem,
    BatchOutcome,
    CancelOutcome,
    ClaimRequest,
    Reap,
    Store,
    WriteBatch,
    WriteResults,
    unwrap,
)

__all__ = ["MAX_BATCH_ITEMS", "Persister", "PersisterStats"]

MAX_BATCH_ITEMS = 512
"""Requests after which a batch takes no more (a submit of many runs counts each run,
and is never split: one larger than this is a batch of its own, or ends one)."""

log = get_logger("leaseward.persister")


@attrs.define
class PersisterStats:
    batches: int = 0
    items: int = 0
    largest_batch: int = 0
    commit_seconds: float = 0.0


def _size(message: PersisterMessage) -> int:
    if isinstance(message, Submit):
        return len(message.runs)
    if isinstance(message, ReapRuns):
        return len(message.reaps)
    if isinstance(message, Renew):
        return len(message.items)
    return 1


class Persister:
    """Drains its mailbox and commits what it found in one transaction (group commit).

    Every write of the process comes here: journal items, lease renewals,
    submits, claims, cancels and reaps. While one batch commits, new requests queue in the
    mailbox and form the next batch, so the cost of an fsync is shared by
    every request that waited on it. ``group_commit=False`` commits one
    request a transaction (for comparison).
    """

    def __init__(
        self,
        store: Store,
        *,
        group_commit: bool = True,
        max_batch: int = MAX_BATCH_ITEMS,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics if metrics is not None else Metrics()
        self._max_batch = max_batch if group_commit else 1
        self.mailbox: Mailbox[PersisterMessage] = Mailbox()
        self.stats = PersisterStats()

    # -- requests ---------------------------------------------------------------------

    async def persist(self, item: BatchItem) -> BatchOutcome:
        reply: Reply[BatchOutcome] = Reply()
        self.mailbox.send_nowait(Persist(item, reply))
        return await reply.wait()

    async def renew(self, items: Sequence[BatchItem]) -> tuple[BatchOutcome, ...]:
        reply: Reply[tuple[BatchOutcome, ...]] = Reply()
        self.mailbox.send_nowait(Renew(tuple(items), reply))
        return await reply.wait()

    async def submit(self, runs: Sequence[NewRun]) -> tuple[RunRecord | LeasewardError, ...]:
        reply: Reply[tuple[RunRecord | LeasewardError, ...]] = Reply()
        self.mailbox.send_nowait(Submit(tuple(runs), reply))
        return await reply.wait()

    async def claim(self, request: ClaimRequest) -> tuple[RunRecord, ...]:
        reply: Reply[tuple[RunRecord, ...] | LeasewardError] = Reply()
        self.mailbox.send_nowait(Claim(request, reply))
        return unwrap(await reply.wait())

    async def cancel(self, run_id: str) -> CancelOutcome:
        reply: Reply[CancelOutcome | LeasewardError] = Reply()
        self.mailbox.send_nowait(Cancel(run_id, reply))
        return unwrap(await reply.wait())

    async def reap(self, reaps: Sequence[Reap]) -> tuple[bool | LeasewardError, ...]:
        reply: Reply[tuple[bool | LeasewardError, ...]] = Reply()
        self.mailbox.send_nowait(ReapRuns(tuple(reaps), reply))
        return await reply.wait()

    # -- the actor --------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            first = await self.mailbox.receive()
            batch, size = [first], _size(first)
            # One turn of the event loop lets the runs answered by the last batch
            # send their next request, so they join this batch instead of the next.
            await anyio.lowlevel.checkpoint()
            while size < self._max_batch:
                more = self.mailbox.receive_nowait()
                if more is None:
                    break
                batch.append(more)
                size += _size(more)
            await self._commit(batch, size)

    async def _commit(self, batch: list[PersisterMessage], size: int) -> None:
        started = time.perf_counter()
        writes = WriteBatch(
            new_runs=tuple(run for m in batch if isinstance(m, Submit) for run in m.runs),
            cancels=tuple(m.run_id for m in batch if isinstance(m, Cancel)),
            items=tuple(_items(batch)),
            reaps=tuple(reap for m in batch if isinstance(m, ReapRuns) for reap in m.reaps),
            claims=tuple(m.request for m in batch if isinstance(m, Claim)),
        )
        try:
            results = await self._store.commit(writes)
        except LeasewardError as exc:
            unknown = isinstance(exc, CommitOutcomeUnknown)
            log.warning(
                "persister.batch_failed", items=size, error=exc.message, outcome_unknown=unknown
            )
            _answer_all(batch, exc, unknown=unknown)
            return
        except BaseException:
            # Never leave an asker waiting: a crash here answers "not persisted",
            # which fails writes closed, before the Supervisor restarts this actor.
            _answer_all(batch, StoreError("the persister crashed"), unknown=False)
            raise
        if ARMED and carries_outcome(step for item in writes.items for step in item.steps):
            crash_point("before_reply")
        elapsed = time.perf_counter() - started
        self.stats.batches += 1
        self.stats.items += size
        self.stats.largest_batch = max(self.stats.largest_batch, size)
        self.stats.commit_seconds += elapsed
        self._metrics.batch_committed(size, elapsed)
        log.debug("persister.committed", items=size, seconds=round(elapsed, 6))
        _answer(batch, results)


def _items(batch: list[PersisterMessage]) -> Iterator[BatchItem]:
    for message in batch:
        if isinstance(message, Persist):
            yield message.item
        elif isinstance(message, Renew):
            yield from message.items


def _answer(batch: list[PersisterMessage], results: WriteResults) -> None:
    """Hand each asker its share of the results, which come kind by kind, in order."""
    new_runs, cancels = iter(results.new_runs), iter(results.cancels)
    items, reaps, claims = iter(results.items), iter(results.reaps), iter(results.claims)
    for message in batch:
        if isinstance(message, Persist):
            message.reply.answer(next(items))
        elif isinstance(message, Renew):
            message.reply.answer(tuple(next(items) for _ in message.items))
        elif isinstance(message, Submit):
            message.reply.answer(tuple(next(new_runs) for _ in message.runs))
        elif isinstance(message, Claim):
            message.reply.answer(next(claims))
        elif isinstance(message, Cancel):
            message.reply.answer(next(cancels))
        else:
            message.reply.answer(tuple(next(reaps) for _ in message.reaps))


def _answer_all(batch: list[PersisterMessage], error: LeasewardError, *, unknown: bool) -> None:
    """Answer every asker of a batch whose transaction failed as a whole."""
    failed = BatchOutcome(
        persisted=False, lease_held=True, error=error.message, outcome_unknown=unknown
    )
    for message in batch:
        if isinstance(message, Persist):
            message.reply.answer(failed)
        elif isinstance(message, Renew):
            message.reply.answer((failed,) * len(message.items))
        elif isinstance(message, Submit):
            message.reply.answer((error,) * len(message.runs))
        elif isinstance(message, Claim | Cancel):
            message.reply.answer(error)
        else:
            message.reply.answer((error,) * len(message.reaps))
