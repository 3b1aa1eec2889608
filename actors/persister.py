"""The Persister: the single writer of journal steps, committing them in groups."""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel
import attrs
from anyio.abc import TaskStatus

from leaseward.actors.mailbox import Mailbox, Reply
from leaseward.actors.messages import Persist
from leaseward.actors.metrics import Metrics
from leaseward.runtime.errors import CommitOutcomeUnknown, LeasewardError
from leaseward.runtime.logs import get_logger
from leaseward.storage.crash_points import ARMED, carries_outcome, crash_point
from leaseward.storage.protocol import BatchItem, BatchOutcome, Store

__all__ = ["MAX_BATCH_ITEMS", "Persister", "PersisterStats"]

MAX_BATCH_ITEMS = 512

log = get_logger("leaseward.persister")


@attrs.define
class PersisterStats:
    batches: int = 0
    items: int = 0
    largest_batch: int = 0
    commit_seconds: float = 0.0


class Persister:
    """Drains its mailbox and commits what it found in one transaction (group commit).

    While one batch commits, new requests queue in the mailbox and form the
    next batch, so the cost of an fsync is shared by every run that waited on
    it. ``group_commit=False`` commits one request a transaction (for comparison).
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
        self.mailbox: Mailbox[Persist] = Mailbox()
        self.stats = PersisterStats()

    async def persist(self, item: BatchItem) -> BatchOutcome:
        reply: Reply[BatchOutcome] = Reply()
        await self.mailbox.send(Persist(item, reply))
        return await reply.wait()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            batch = [await self.mailbox.receive()]
            # One turn of the event loop lets the runs answered by the last batch
            # send their next request, so they join this batch instead of the next.
            await anyio.lowlevel.checkpoint()
            while len(batch) < self._max_batch:
                more = self.mailbox.receive_nowait()
                if more is None:
                    break
                batch.append(more)
            await self._commit(batch)

    async def _commit(self, batch: list[Persist]) -> None:
        started = time.perf_counter()
        try:
            outcomes = await self._store.commit_batch([request.item for request in batch])
        except LeasewardError as exc:
            unknown = isinstance(exc, CommitOutcomeUnknown)
            log.warning(
                "persister.batch_failed",
                items=len(batch),
                error=exc.message,
                outcome_unknown=unknown,
            )
            failed = BatchOutcome(
                persisted=False, lease_held=True, error=exc.message, outcome_unknown=unknown
            )
            outcomes = [failed] * len(batch)
        except BaseException:
            # Never leave an asker waiting: a crash here answers "not persisted",
            # which fails writes closed, before the Supervisor restarts this actor.
            for request in batch:
                request.reply.answer(
                    BatchOutcome(persisted=False, lease_held=True, error="the persister crashed")
                )
            raise
        if ARMED and carries_outcome(step for r in batch for step in r.item.steps):
            crash_point("before_reply")
        elapsed = time.perf_counter() - started
        self.stats.batches += 1
        self.stats.items += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        self.stats.commit_seconds += elapsed
        self._metrics.batch_committed(len(batch), elapsed)
        log.debug("persister.committed", items=len(batch), seconds=round(elapsed, 6))
        for request, outcome in zip(batch, outcomes, strict=True):
            request.reply.answer(outcome)
