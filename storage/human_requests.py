"""Requests for a person: listing them, deciding one, expiring those past their time."""

from __future__ import annotations

from collections.abc import Sequence

from leaseward.runtime.errors import (
    IllegalTransition,
    RequestExpired,
    RequestNotFound,
    StoreError,
)
from leaseward.runtime.lifecycle import TRANSITIONS, RunState, source_state
from leaseward.runtime.model import (
    EXPIRED_REASON,
    Decision,
    HumanRequest,
    RequestKind,
    RunRecord,
)
from leaseward.storage.concern import WORK_CHANNEL, StoreConcern
from leaseward.storage.protocol import ExpiredRequest
from leaseward.storage.rows import request_from_row, run_from_row

__all__ = ["HumanRequests"]

_WAITING_STATES = [kind.waiting_state.value for kind in RequestKind]


def _kind_of(decision: Decision) -> RequestKind:
    return RequestKind.INPUT if decision is Decision.ANSWERED else RequestKind.APPROVAL


def _decided_text(request: HumanRequest) -> str:
    by = f" by {request.operator}" if request.operator else ""
    return f"call {request.call_id} of run {request.run_id} was already {request.decision}{by}"


def _refuse_expired(request: HumanRequest) -> None:
    """A decision on an expired request is refused with when it expired, however late."""
    if request.decision is Decision.EXPIRED and request.expires_at is not None:
        raise RequestExpired(request.run_id, request.call_id, request.expires_at)


def _calls(requests: Sequence[HumanRequest]) -> str:
    return ", ".join(r.call_id for r in requests) or "none"


def _state_text(run: RunRecord) -> str:
    return run.state.value if run.reason is None else f"{run.state.value} ({run.reason.value})"


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
                {"states": _WAITING_STATES, "limit": limit, "now": self._now()},
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
    ) -> tuple[HumanRequest, RunRecord]:
        q = self._queries
        kind = _kind_of(decision)
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
            request = self._request_to_decide(run, requests, call_id, kind)
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

    def _request_to_decide(
        self,
        run: RunRecord,
        requests: Sequence[HumanRequest],
        call_id: str | None,
        kind: RequestKind,
    ) -> HumanRequest:
        """The one request a decision names, or the error saying why there is none."""
        waiting = run.state is kind.waiting_state
        pending = [r for r in requests if r.pending and r.kind is kind] if waiting else []
        if call_id is None:
            if len(pending) == 1:
                return pending[0]
            if not pending:
                decided = [r for r in requests if r.kind is kind and not r.pending]
                newest = max(decided, key=lambda r: (r.seq, r.position), default=None)
                if newest is None:
                    last = ""
                else:
                    if run.state.value not in _WAITING_STATES:
                        # Not waiting for anything else: the expired request is the one meant.
                        _refuse_expired(newest)
                    last = f" ({_decided_text(newest)})"
                raise IllegalTransition(
                    f"run {run.id} is {_state_text(run)}: it waits for no {kind.value}{last}"
                )
            raise RequestNotFound(
                f"run {run.id} waits for {len(pending)} {kind.value}s; name the call "
                f"({_calls(pending)})"
            )
        named = [r for r in requests if r.call_id == call_id]
        if not named:
            raise RequestNotFound(
                f"run {run.id} has no request for call {call_id!r} (pending: {_calls(pending)})"
            )
        # A call id may come back in a later turn: the newest request is the live one.
        request = max(named, key=lambda r: r.seq)
        if request.kind is not kind:
            how = (
                "send_input (leaseward reply)"
                if request.kind is RequestKind.INPUT
                else ("approve or reject")
            )
            raise IllegalTransition(
                f"call {call_id} of run {run.id} asks for {request.kind.value}, not "
                f"{kind.value}: {how} decides it"
            )
        _refuse_expired(request)
        if not request.pending:
            raise IllegalTransition(f"{_decided_text(request)}; nothing changed")
        if not waiting:
            raise IllegalTransition(
                f"run {run.id} is {_state_text(run)}: its requests can no longer be decided"
            )
        return request

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
