"""What every concern of the SQL store shares: one executor, its dialect's queries, one clock."""

from __future__ import annotations

from leaseward.runtime.clock import Clock
from leaseward.runtime.errors import RunNotFound
from leaseward.runtime.runs import RunRecord
from leaseward.storage.executor import Executor
from leaseward.storage.queries import Queries
from leaseward.storage.rows import run_from_row

__all__ = ["WORK_CHANNEL", "StoreConcern"]

WORK_CHANNEL = "leaseward_runs"
"""Where a store announces that a run became claimable (submitted, requeued, reopened)."""


class StoreConcern:
    """A part of the store over the executor that every other part uses too: each
    concern's transactions are the executor's, so they serialise as one store's."""

    def __init__(self, executor: Executor, queries: Queries, clock: Clock) -> None:
        self._executor = executor
        self._queries = queries
        self._clock = clock

    def _now(self) -> float:
        return self._clock.now()

    async def _lock_run(self, run_id: str) -> RunRecord:
        """The run, locked for this transaction as every writer locks it first."""
        row = await self._executor.fetch_one(self._queries["lock_run"], {"run_id": run_id})
        if row is None:
            raise RunNotFound(run_id=run_id)
        return run_from_row(row)
