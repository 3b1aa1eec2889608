"""Requests for a person: listing them, deciding one, expiring those past their time."""

from __future__ import annotations

from collections.abc import Sequence

from leaseward.runtime.decisions import WAITING_STATES, kind_decided, request_to_decide
from leaseward.runtime.errors import (
    RequestExpired,
    StoreError,
)
from leaseward.runtime.human_requests import EXPIRED_REASON, Decision, HumanRequest, RequestKind
from leaseward.runtime.lifecycle import TRANSITIONS, RunState, source_state
from leaseward.runtime.runs import RunRecord
from leaseward.storage.concern import WORK_CHANNEL, StoreConcern
from leaseward.storage.protocol import ExpiredRequest
from leaseward.storage.rows import request_from_row, run_from_row

__all__ = ["HumanRequests"]


class HumanRequests(StoreConcern):
    """Approvals and input requests: each decision locks its run first."""

    async def list_requests(self, run_id: str) -> list[HumanRequest]:
        async with self._executor.reading():
            rows = await self._executor.fetch_all(
                self._queries["run_requests"], {"run_id": run_id, "now": self._now()}
            )
        return [request_from_row(r) for r in rows]

    async def pending_requests(self, limit: int = 100) -> list[HumanRequest]:
        async with self._executor.reading():
            rows = await self._executor.fetch_all(
                self._queries["pending_requests"],
                {
                    "states": [state.value for state in WAITING_STATES],
                    "limit": limit,
                    "now": self._now(),
                },
            )
        return [request_from_row(r) for r in rows]

    async def decide(
        self,
        run_id: str,
        call_id: str | None,
        decision: Decision,
        *,
        operator: str,
        note: str | None = None,
        value_json: str | None = None,
        digest: str | None = None,
    ) -> tuple[HumanRequest, RunRecord]:
        q = self._queries
        kind = kind_decided(decision)
        async with self._executor.transaction():
            # The run first, as every writer locks it: a cancel, a claim or another
            # decision on it waits here, and what is decided below stays true.
            run = await self._lock_run(run_id)
            now = self._now()
            requests = [
                request_from_row(r)
                for r in await self._executor.fetch_all(
                    q["run_requests"], {"run_id": run_id, "now": now}
                )
            ]
            request = request_to_decide(run, requests, call_id, kind, digest)
            decided = await self._executor.fetch_all(
                q["decide_request"],
                {
                    "run_id": run_id,
                    "seq": request.seq,
                    "call_id": request.call_id,
                    "decision": decision.value,
                    "operator": operator,
                    "note": note,
                    "value_json": value_json,
                    "now": now,
                },
            )
            if decided:
                await self._requeue_decided([run_id], kind, now)
                rows = await self._executor.fetch_all(
                    q["run_requests"], {"run_id": run_id, "now": now}
                )
                after = await self._executor.fetch_one(q["get_run"], {"run_id": run_id})
            else:
                # Too late: the request expired before this decision. It is expired now,
                # in this transaction, as the reaper's next pass would have done it; the
                # refusal is raised once that is committed.
                expired = await self._expire_waiting([run_id], now)
                if not any((r.seq, r.call_id) == (request.seq, request.call_id) for r in expired):
                    raise StoreError(f"the request of call {request.call_id} changed meanwhile")
        if not decided:
            assert request.expires_at is not None, "a request with no expiry never expires"
            raise RequestExpired(run_id, request.call_id, request.expires_at)
        if after is None:
            raise StoreError(f"run {run_id} vanished while it was being decided")
        stored = next(
            request_from_row(r)
            for r in rows
            if r["seq"] == request.seq and r["call_id"] == request.call_id
        )
        return stored, run_from_row(after)

    async def _requeue_decided(
        self, run_ids: Sequence[str], kind: RequestKind, now: float
    ) -> set[str]:
        """Requeue the runs that have no undecided request left; NOTIFY idle workers."""
        event = kind.resume_event
        rows = await self._executor.fetch_all(
            self._queries["requeue_decided"],
            {
                "ids": list(run_ids),
                "source": source_state(event).value,
                "target": TRANSITIONS[event][1].value,
                "now": now,
            },
        )
        if rows:
            await self._executor.notify(WORK_CHANNEL)
        return {row["id"] for row in rows}

    async def expire_requests(self, limit: int) -> list[ExpiredRequest]:
        q = self._queries
        # Scanned outside a write transaction: a pass that finds nothing (nearly every
        # one) never takes SQLite's write lock from the Persister.
        async with self._executor.reading():
            candidates = await self._executor.fetch_all(
                q["expiring_runs"],
                {
                    "source": RequestKind.APPROVAL.waiting_state.value,
                    "limit": limit,
                    "now": self._now(),
                },
            )
        if not candidates:
            return []
        async with self._executor.transaction():
            now = self._now()
            locked = await self._executor.fetch_all(
                q["lock_runs"], {"ids": [row["run_id"] for row in candidates]}
            )
            waiting = [
                row["id"]
                for row in locked
                if RunState(row["state"]) is RequestKind.APPROVAL.waiting_state
            ]
            if not waiting:
                return []
            return await self._expire_waiting(waiting, now)

    async def _expire_waiting(self, run_ids: Sequence[str], now: float) -> list[ExpiredRequest]:
        """Expire the requests of ``run_ids`` (locked, waiting for approval) whose expiry
        passed, and requeue the runs that leave with nothing undecided."""
        expired = await self._executor.fetch_all(
            self._queries["expire_requests"],
            {
                "ids": list(run_ids),
                "decision": Decision.EXPIRED.value,
                "note": EXPIRED_REASON,
                "now": now,
            },
        )
        requeued = await self._requeue_decided(run_ids, RequestKind.APPROVAL, now)
        return [
            ExpiredRequest(
                run_id=row["run_id"],
                seq=row["seq"],
                call_id=row["call_id"],
                tool=row["tool"],
                requeued=row["run_id"] in requeued,
            )
            for row in expired
        ]
