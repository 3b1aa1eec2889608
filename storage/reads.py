"""Reading runs, their journals and their leases: nothing here writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leaseward.runtime.cursor import RunCursor
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import Reason, RunMode, RunState, StepStatus
from leaseward.runtime.runs import RunRecord
from leaseward.storage.concern import StoreConcern
from leaseward.storage.protocol import ExpiredRun, LeaseMark
from leaseward.storage.queries import Queries
from leaseward.storage.rows import optional, run_from_row, step_from_row

__all__ = ["RunReads", "run_listing"]


def run_listing(
    queries: Queries,
    *,
    state: RunState | None,
    agent: str | None,
    reason: Reason | None,
    mode: RunMode | None,
    created_after: float | None,
    created_before: float | None,
    search: str | None,
    after: RunCursor | None,
    limit: int,
    now: float,
) -> tuple[str, dict[str, Any]]:
    """The query of one page of runs, newest first, past ``after``, matching every filter
    given, and its parameters: created at or after ``created_after`` and before
    ``created_before``, with ``search`` as its id or its idempotency key.

    Only the conditions of the filters given are in it, so that each shape of filters
    has a plan of its own (which ``EXPLAIN`` of this text shows)."""
    params: dict[str, Any] = {
        "state": None if state is None else state.value,
        "agent": agent,
        "reason": None if reason is None else reason.value,
        "mode": None if mode is None else mode.value,
        "created_after": created_after,
        "created_before": created_before,
        "search": search,
    }
    conditions = [
        queries[f"run_where_{name}"] for name, value in params.items() if value is not None
    ]
    if after is not None:
        conditions.append(queries["run_where_after_cursor"])
        params.update(after_created_at=after.created_at, after_id=after.id)
    where = "WHERE (" + ")\n  AND (".join(conditions) + ")" if conditions else ""
    params.update(limit=limit, now=now)
    return queries["list_runs"].format(where=where), params


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
        mode: RunMode | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        search: str | None = None,
        after: RunCursor | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        sql, params = run_listing(
            self._queries,
            state=state,
            agent=agent,
            reason=reason,
            mode=mode,
            created_after=created_after,
            created_before=created_before,
            search=search,
            after=after,
            limit=limit,
            now=self._now(),
        )
        async with self._executor.reading():
            rows = await self._executor.fetch_all(sql, params)
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
