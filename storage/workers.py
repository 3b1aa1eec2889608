"""The worker registry: who is serving, and since when their last heartbeat."""

from __future__ import annotations

import json

from leaseward.runtime.workers import WorkerInfo, WorkerRegistration
from leaseward.storage.concern import StoreConcern
from leaseward.storage.rows import worker_from_row

__all__ = ["GONE_WORKERS_KEPT_SECONDS", "WorkerRegistry"]

GONE_WORKERS_KEPT_SECONDS = 24 * 3600.0
"""How long a worker that stopped beating without removing itself (killed, its host
lost) stays listed as gone before a live worker's beat removes its row: an id of the
default host:pid kind is seldom taken again, and the rows of a fleet's killed workers
would pile up for good."""


class WorkerRegistry(StoreConcern):
    """Workers register, beat and leave; a stale one is only listed, never reaped here,
    and forgotten once it has been gone for GONE_WORKERS_KEPT_SECONDS."""

    async def register_worker(self, worker: WorkerRegistration) -> None:
        await self._beat(worker, starting=True)

    async def heartbeat_worker(self, worker: WorkerRegistration) -> None:
        await self._beat(worker, starting=False)

    async def _beat(self, worker: WorkerRegistration, *, starting: bool) -> None:
        async with self._executor.transaction():
            now = self._now()
            await self._executor.execute(
                self._queries["beat_worker"],
                {
                    "id": worker.id,
                    "host": worker.host,
                    "pid": worker.pid,
                    "agents_json": json.dumps(list(worker.agents)),
                    "stale_after_seconds": worker.stale_after_seconds,
                    "starting": starting,
                    "draining": worker.draining,
                    "now": now,
                },
            )
            await self._executor.execute(
                self._queries["forget_gone_workers"],
                {"kept_seconds": GONE_WORKERS_KEPT_SECONDS, "now": now},
            )

    async def remove_worker(self, worker_id: str) -> None:
        async with self._executor.transaction():
            await self._executor.execute(self._queries["remove_worker"], {"id": worker_id})

    async def list_workers(self) -> list[WorkerInfo]:
        async with self._executor.reading():
            rows = await self._executor.fetch_all(
                self._queries["list_workers"], {"now": self._now()}
            )
        return [worker_from_row(r) for r in rows]
