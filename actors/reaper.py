"""The LeaseReaper: on a timer, settles runs whose lease expired, by the recovery rules.

No wall clock decides that a lease expired: not the reaper's, not the holder's, not
the database's, any of which NTP, a VM resume or a person may step. The reaper
watches every running lease's mark (its epoch and renewal count, changed by each
claim and renewal) and reaps a lease only once it has itself seen that mark
unchanged for as long as the lease was granted, measured on its own monotonic
clock from the moment it first read it. The holder's deadline is when it *sent*
that renewal plus the same seconds, on its own monotonic clock; the reaper read
the mark after the renewal committed, so its reap comes after that deadline on
any host, whatever the clocks say. The reap itself is fenced on the same mark: a
renewal that lands in between wins.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence

import anyio
import attrs
from anyio.abc import TaskStatus

from leaseward.actors.metrics import Metrics
from leaseward.actors.store_faults import StoreFaults
from leaseward.runtime.clock import Clock, SystemClock
from leaseward.runtime.errors import LeasewardError
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.lifecycle import Event, Reason, RecoveryPolicy, StepStatus, decide_recovery
from leaseward.runtime.logs import get_logger
from leaseward.runtime.settlements import Settlement, settlement_after
from leaseward.runtime.workers import WorkerRegistration
from leaseward.storage.crash_points import crash_point
from leaseward.storage.protocol import (
    ExpiredRequest,
    ExpiredRun,
    LeaseMark,
    Reap,
    Store,
    WriteBatch,
)

__all__ = ["REAP_BATCH", "LeaseReaper", "ReapWriter", "Reaped", "plan_reap"]

ReapWriter = Callable[[Sequence[Reap]], Awaitable[tuple[bool | LeasewardError, ...]]]
"""Writes reaps, one result each: the Persister's, in a worker; the store's own alone."""

REAP_BATCH = 100

log = get_logger("leaseward.reaper")


@attrs.frozen
class _Seen:
    mark: LeaseMark
    since: float
    """The reaper's monotonic time when it first read this mark."""

    @property
    def due(self) -> float:
        return self.since + self.mark.lease_seconds


@attrs.frozen
class Reaped:
    run_id: str
    epoch: int
    settlement: Settlement


def plan_reap(expired: ExpiredRun, policy: RecoveryPolicy) -> Settlement:
    recovery = decide_recovery(
        mode=expired.run.mode,
        requeues=expired.run.requeues,
        last_effect=expired.last_effect,
        last_status=expired.last_status,
        failure_class=FailureClass.CONNECTION,
        reaped=True,
        audit_failed=False,
        policy=policy,
    )
    error = f"the lease of worker {expired.run.lease_owner} expired"
    effect = expired.last_effect
    if (
        recovery.reason is Reason.INTERACTIVE_INTERRUPTED
        and expired.last_status is StepStatus.STARTED
        and effect is not None
        and effect.is_write
    ):
        # Nobody resumes an interactive run: whoever runs it again must know that its
        # last write may already have applied.
        error += (
            f" during a {effect.value} call, which may have applied: check before running it again"
        )
    return settlement_after(
        recovery,
        failure_class=FailureClass.CONNECTION,
        error=error,
        cancel_requested=expired.run.cancel_requested,
    )


class LeaseReaper:
    def __init__(
        self,
        store: Store,
        *,
        interval_seconds: float,
        policy: RecoveryPolicy,
        on_reaped: Callable[[tuple[Reaped, ...]], Awaitable[None]] | None = None,
        batch: int = REAP_BATCH,
        metrics: Metrics | None = None,
        worker: WorkerRegistration | None = None,
        reap: ReapWriter | None = None,
        clock: Clock | None = None,
        logs_settled: bool = True,
        faults: StoreFaults | None = None,
    ) -> None:
        self._store = store
        # A worker's log tells of every run it reaped; a command that prints each one
        # itself would say it twice, once as a log record.
        self._logs_settled = logs_settled
        self._clock = clock or SystemClock()
        self._faults = faults if faults is not None else StoreFaults(self._clock)
        self._seen: dict[str, _Seen] = {}
        self._reap = reap or self._reap_alone
        self._metrics = metrics if metrics is not None else Metrics()
        self._interval = interval_seconds
        self._policy = policy
        self._on_reaped = on_reaped
        self._batch = batch
        self.worker = worker
        """What each heartbeat registers, if anything: the worker as it is now."""

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Reap on every tick, and as soon as a lease it watches comes due between
        ticks; approval expiry and a worker's heartbeat ride on the tick."""
        task_status.started()
        tick: float | None = None
        while True:
            try:
                reaped = await self.reap_once()
            except LeasewardError as exc:
                self._faults.failed(log, "reaper.pass_failed", exc.message)
            else:
                self._faults.answered("reaper.pass_failed")
                if reaped and self._on_reaped is not None:
                    await self._on_reaped(reaped)
            now = self._clock.monotonic()
            if tick is None or now >= tick:
                if tick is not None:
                    # Not at the start: registering the worker was its first beat.
                    await self._beat()
                try:
                    await self.expire_once()
                except LeasewardError as exc:
                    self._faults.failed(log, "reaper.expiry_failed", exc.message)
                else:
                    self._faults.answered("reaper.expiry_failed")
                tick = now + self._interval
            await anyio.sleep(max(0.0, min(tick, self._next_due(now)) - now))

    def _next_due(self, now: float) -> float:
        """When the next lease it watches comes due, if that is still ahead: one already
        due but not reaped (beyond the batch, or refused) waits for the tick."""
        ahead = (seen.due for seen in self._seen.values() if seen.due > now)
        return min(ahead, default=now + self._interval)

    async def _beat(self) -> None:
        if self.worker is None:
            return
        try:
            await self._store.heartbeat_worker(self.worker)
        except LeasewardError as exc:
            # A missed beat costs nothing but a while shown as gone; reaping goes on.
            self._faults.failed(log, "worker.heartbeat_failed", exc.message)
        else:
            self._faults.answered("worker.heartbeat_failed")

    async def _reap_alone(self, reaps: Sequence[Reap]) -> tuple[bool | LeasewardError, ...]:
        return (await self._store.commit(WriteBatch(reaps=tuple(reaps)))).reaps

    async def expire_once(self) -> tuple[ExpiredRequest, ...]:
        """Reject as expired the approval requests nobody decided in time (one batch),
        requeueing the runs left with nothing to wait for."""
        expired = tuple(await self._store.expire_requests(self._batch))
        for request in expired:
            log.warning(
                "approval.expired",
                run_id=request.run_id,
                call_id=request.call_id,
                tool=request.tool,
                requeued=request.requeued,
            )
        return expired

    def _watch(self, marks: Iterable[LeaseMark], now: float) -> list[LeaseMark]:
        """Remember when each mark was first read; the marks seen unchanged for their
        lease, longest overdue first, one batch of them."""
        seen: dict[str, _Seen] = {}
        for mark in marks:
            before = self._seen.get(mark.run_id)
            if before is None or before.mark != mark:
                before = _Seen(mark, now)
            seen[mark.run_id] = before
        self._seen = seen
        due = sorted((s for s in seen.values() if s.due <= now), key=lambda s: s.due)
        return [s.mark for s in due[: self._batch]]

    @property
    def longest_wait(self) -> float:
        """How long until every lease watched now could come due unrenewed."""
        now = self._clock.monotonic()
        return max((seen.due - now for seen in self._seen.values()), default=0.0)

    async def reap_once(self) -> tuple[Reaped, ...]:
        """One pass: read every running lease, and settle those this reaper has seen
        unrenewed for as long as they were granted (longest overdue first, one batch),
        all of them in one write. A reaper that just started has seen none for long:
        its first pass only starts watching."""
        marks = await self._store.running_leases()
        # Read after the scan returned: a mark read was committed before this moment.
        due = self._watch(marks, self._clock.monotonic())
        if not due:
            return ()
        expired_runs = await self._store.expired_runs(due)
        if not expired_runs:
            return ()
        reaps = [Reap(expired, plan_reap(expired, self._policy)) for expired in expired_runs]
        done: list[Reaped] = []
        for reap, result in zip(reaps, await self._reap(reaps), strict=True):
            if isinstance(result, LeasewardError):
                log.warning("reaper.reap_failed", run_id=reap.expired.run.id, error=result.message)
                continue
            if not result:
                # Renewed or settled since the scan: the holder is alive after all.
                continue
            crash_point("reap")
            run, settlement = reap.expired.run, reap.settlement
            fields = {
                "run_id": run.id,
                "epoch": run.epoch,
                "lease_owner": run.lease_owner,
                "state": settlement.target.value,
            }
            if self._logs_settled:
                log.warning("lease.reaped", **fields)
            self._metrics.lease_reaped()
            self._metrics.run_settled(settlement.target)
            if settlement.event is Event.DEAD_LETTER and settlement.reason is not None:
                if self._logs_settled:
                    log.error("run.dead_lettered", reason=settlement.reason.value, **fields)
                self._metrics.dead_lettered(settlement.reason)
            done.append(Reaped(run.id, run.epoch, settlement))
        return tuple(done)

    async def reap_watching(self) -> tuple[Reaped, ...]:
        """Reap as a reaper that runs once must: read every running lease, wait until
        each could have come due unrenewed (as long as the longest was granted), then
        reap those not renewed meanwhile."""
        reaped = await self.reap_once()
        await anyio.sleep(self.longest_wait)
        return reaped + await self.reap_once()
