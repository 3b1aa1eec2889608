"""Reading runs, their journals and their leases: nothing here writes."""

from __future__ import annotations

from collections.abc import Sequence

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import Reason, RunState, StepStatus
from leaseward.runtime.runs import RunRecord
from leaseward.storage.concern import StoreConcern
from leaseward.storage.protocol import ExpiredRun, LeaseMark
from leaseward.storage.rows import optional, run_from_row, step_from_row

__all__ = ["RunReads"]


class RunReads(StoreConcern):
    """Runs, journals and lease marks as the store holds them now."""

    async def get_run(self, run_id: str) -> RunRecord | None:
        async with self._executor.reading():
            row = await self._executor.fetch_one(
                self._queries["read_run"], {"run_id": run_id, "now": self._now()}
            )
        return None if row is None else run_from_row(row)

    async def list_runs(
        self,
        *,
        state: RunState | None = None,
        agent: str | None = None,
        reason: Reason | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        async with self._executor.reading():
            rows = await self._executor.fetch_all(
                self._queries["list_runs"],
                {
                    "state": None if state is None else state.value,
                    "agent": agent,
                    "reason": None if reason is None else reason.value,
                    "limit": limit,
                },
            )
        return [run_from_row(r) for r in rows]

    async def count_runs(self) -> dict[RunState, int]:
        async with self._executor.reading():
            rows = await self._executor.fetch_all(self._queries["count_runs"])
        return {RunState(r["state"]): int(r["runs"]) for r in rows}

    async def list_steps(self, run_id: str) -> list[StepInfo]:
        async with self._executor.reading():
            rows = await self._executor.fetch_all(self._queries["list_steps"], {"run_id": run_id})
        return [step_from_row(r) for r in rows]

    async def running_leases(self) -> list[LeaseMark]:
        async with self._executor.reading():
            rows = await self._executor.fetch_all(
                self._queries["running_leases"], {"source": RunState.RUNNING.value}
            )
        return [
            LeaseMark(
                run_id=row["id"],
                epoch=row["epoch"],
                renewals=row["renewals"],
                lease_seconds=float(row["lease_seconds"] or 0.0),
            )
            for row in rows
        ]

    async def expired_runs(self, leases: Sequence[LeaseMark]) -> list[ExpiredRun]:
        if not leases:
            return []
        q = self._queries
        found: list[ExpiredRun] = []
        async with self._executor.reading():
            rows = await self._executor.fetch_all(
                q["leased_runs"],
                {"ids": [lease.run_id for lease in leases], "source": RunState.RUNNING.value},
            )
            by_id = {row["id"]: row for row in rows}
            for lease in leases:
                row = by_id.get(lease.run_id)
                if row is None or (row["epoch"], row["renewals"]) != (lease.epoch, lease.renewals):
                    continue
                last = await self._executor.fetch_one(q["last_step"], {"run_id": lease.run_id})
                found.append(
                    ExpiredRun(
                        run=run_from_row(row),
                        last_effect=None if last is None else optional(ToolEffect, last["effect"]),
                        last_status=None if last is None else StepStatus(last["status"]),
                        renewals=lease.renewals,
                    )
                )
        return found
