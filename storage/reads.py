"""Reading runs, their journals and their leases: nothing here writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import TERMINAL_STATES, RunState, StepStatus
from leaseward.runtime.listing import RunListing
from leaseward.runtime.runs import RunRecord, stored_run_id
from leaseward.storage.concern import StoreConcern
from leaseward.storage.protocol import ExpiredRun, LeaseMark
from leaseward.storage.queries import Queries
from leaseward.storage.rows import optional, run_from_row, step_from_row

__all__ = ["RUNS_PER_READ", "RunReads", "run_listing"]

RUNS_PER_READ = 1000
"""Runs read in one statement by ``get_runs``: a waiter for very many shares the reader."""


def run_listing(queries: Queries, listing: RunListing, now: float) -> tuple[str, dict[str, Any]]:
    """The query of the page of runs ``listing`` names, and its parameters.

    Only the conditions of the filters given are in it, so that each shape of filters
    has a plan of its own (which ``EXPLAIN`` of this text shows)."""
    params: dict[str, Any] = {
        "state": None if listing.state is None else listing.state.value,
        "agent": listing.agent,
        "reason": None if listing.reason is None else listing.reason.value,
        "mode": None if listing.mode is None else listing.mode.value,
        "created_after": listing.created_after,
        "created_before": listing.created_before,
        "search": listing.search,
    }
    conditions = [
        queries[f"run_where_{name}"] for name, value in params.items() if value is not None
    ]
    if listing.search is not None:
        params["search_id"] = stored_run_id(listing.search)
    after = listing.after
    if after is not None:
        conditions.append(queries["run_where_after_cursor"])
        params.update(after_created_at=after.created_at, after_id=after.id)
    where = "WHERE (" + ")\n  AND (".join(conditions) + ")" if conditions else ""
    params.update(limit=listing.limit, now=now)
    return queries["list_runs"].format(where=where), params


class RunReads(StoreConcern):
    """Runs, journals and lease marks as the store holds them now."""

    async def get_run(self, run_id: str) -> RunRecord | None:
        async with self._executor.reading():
            row = await self._executor.fetch_one(
                self._queries["read_run"], {"run_id": run_id, "now": self._now()}
            )
        return None if row is None else run_from_row(row)

    async def get_runs(
        self, run_ids: Sequence[str], *, finished_only: bool = False
    ) -> list[RunRecord]:
        states = [state.value for state in (TERMINAL_STATES if finished_only else RunState)]
        records: list[RunRecord] = []
        for start in range(0, len(run_ids), RUNS_PER_READ):
            chunk = list(run_ids[start : start + RUNS_PER_READ])
            async with self._executor.reading():
                rows = await self._executor.fetch_all(
                    self._queries["read_runs"],
                    {"run_ids": chunk, "states": states, "now": self._now()},
                )
            records.extend(run_from_row(row) for row in rows)
        return records

    async def list_runs(self, listing: RunListing | None = None) -> list[RunRecord]:
        sql, params = run_listing(self._queries, listing or RunListing(), self._now())
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
