"""The LeaseReaper: on a timer, settles runs whose lease expired, by the recovery rules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio
import attrs
from anyio.abc import TaskStatus

from leaseward.actors.metrics import Metrics
from leaseward.runtime.errors import LeasewardError
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.lifecycle import Event, RecoveryPolicy, decide_recovery
from leaseward.runtime.logs import get_logger
from leaseward.runtime.model import Settlement, WorkerRegistration, settlement_after
from leaseward.storage.crash_points import crash_point
from leaseward.storage.protocol import ExpiredRequest, ExpiredRun, Reap, Store, WriteBatch

__all__ = ["REAP_BATCH", "LeaseReaper", "ReapWriter", "Reaped", "plan_reap"]

ReapWriter = Callable[[Sequence[Reap]], Awaitable[tuple[bool | LeasewardError, ...]]]
"""Writes reaps, one result each: the Persister's, in a worker; the store's own alone."""

REAP_BATCH = 100

log = get_logger("leaseward.reaper")


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
    return settlement_after(
        recovery,
        failure_class=FailureClass.CONNECTION,
        error=f"the lease of {expired.run.lease_owner} expired",
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
    ) -> None:
        self._store = store
        self._reap = reap or self._reap_alone
        self._metrics = metrics if metrics is not None else Metrics()
        self._interval = interval_seconds
        self._policy = policy
        self._on_reaped = on_reaped
        self._batch = batch
        self._worker = worker

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Reap on every tick; a worker's heartbeat rides on the same timer."""
        task_status.started()
        while True:
            try:
                reaped = await self.reap_once()
            except LeasewardError as exc:
                log.warning("reaper.pass_failed", error=exc.message)
            else:
                if reaped and self._on_reaped is not None:
                    await self._on_reaped(reaped)
            try:
                await self.expire_once()
            except LeasewardError as exc:
                log.warning("reaper.expiry_failed", error=exc.message)
            await anyio.sleep(self._interval)
            await self._beat()

    async def _beat(self) -> None:
        if self._worker is None:
            return
        try:
            await self._store.heartbeat_worker(self._worker)
        except LeasewardError as exc:
            # A missed beat costs nothing but a while shown as gone; reaping goes on.
            log.warning("worker.heartbeat_failed", error=exc.message)

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

    async def reap_once(self) -> tuple[Reaped, ...]:
        """One pass: every expired lease found (oldest first, one batch) is settled,
        all of them in one write."""
        expired_runs = await self._store.expired_runs(self._batch)
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
            log.warning("lease.reaped", **fields)
            self._metrics.lease_reaped()
            self._metrics.run_settled(settlement.target)
            if settlement.event is Event.DEAD_LETTER and settlement.reason is not None:
                log.error("run.dead_lettered", reason=settlement.reason.value, **fields)
                self._metrics.dead_lettered(settlement.reason)
            done.append(Reaped(run.id, run.epoch, settlement))
        return tuple(done)
