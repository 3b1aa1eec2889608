"""The domain operations of a store, written once over an executor and its named queries."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anyio
import attrs

from leaseward.runtime.clock import Clock
from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.errors import (
    IdempotencyKeyConflict,
    IllegalTransition,
    InvalidInput,
    LeasewardError,
    RequestExpired,
    RequestNotFound,
    RunNotFound,
    RunPurged,
    StoreError,
)
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.lifecycle import (
    REDRIVABLE_REASONS,
    TRANSITIONS,
    Event,
    Reason,
    RunMode,
    RunState,
    StepKind,
    StepStatus,
    source_state,
)
from leaseward.runtime.model import (
    EXPIRED_REASON,
    Decision,
    ForgetKeysResult,
    HumanRequest,
    NewRequest,
    NewRun,
    PurgedRun,
    PurgeResult,
    RequestKind,
    RunRecord,
    Settlement,
    StepInfo,
    StepWrite,
    WorkerInfo,
    WorkerRegistration,
    load_json,
)
from leaseward.storage.crash_points import ARMED, carries_outcome, crash_point
from leaseward.storage.executor import Executor, Row
from leaseward.storage.migrations import MIGRATIONS
from leaseward.storage.protocol import (
    BatchItem,
    CancelOutcome,
    ClaimRequest,
    ExpiredRequest,
    ExpiredRun,
    LeaseMark,
    Reap,
    WriteBatch,
    WriteResults,
    unwrap,
)
from leaseward.storage.queries import load_queries

__all__ = ["PURGE_BATCH_RUNS", "WORK_CHANNEL", "SQLStore"]

WORK_CHANNEL = "leaseward_runs"
"""Where a store announces that a run became claimable (submitted, requeued, reopened)."""

PURGE_BATCH_RUNS = 500
"""Runs a purge deletes (or idempotency keys it forgets) per transaction: each batch
holds its locks only briefly."""

_CANCEL_EVENTS = {
    RunState.QUEUED: Event.CANCEL_QUEUED,
    RunState.WAITING_FOR_APPROVAL: Event.CANCEL_WAITING_APPROVAL,
    RunState.WAITING_FOR_INPUT: Event.CANCEL_WAITING_INPUT,
}


def _optional(kind: Any, value: Any) -> Any:
    return None if value is None else kind(value)


def run_from_row(row: Row) -> RunRecord:
    return RunRecord(
        id=row["id"],
        agent=row["agent"],
        mode=RunMode(row["mode"]),
        state=RunState(row["state"]),
        reason=_optional(Reason, row["reason"]),
        failure_class=_optional(FailureClass, row["failure_class"]),
        input=load_json(row["input_json"]),
        result=load_json(row["result_json"]),
        error=row["error"],
        epoch=row["epoch"],
        requeues=row["requeues"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        available_at=row["available_at"],
        cancel_requested=bool(row["cancel_requested"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
        idempotency_key=row["idempotency_key"],
    )


def step_from_row(row: Row) -> StepInfo:
    return StepInfo(
        run_id=row["run_id"],
        seq=row["seq"],
        epoch=row["epoch"],
        kind=StepKind(row["kind"]),
        tool=row["tool"],
        call_id=row["call_id"],
        effect=_optional(ToolEffect, row["effect"]),
        status=StepStatus(row["status"]),
        idempotency_key=row["idempotency_key"],
        arguments=load_json(row["arguments_json"]),
        output=load_json(row["output_json"]),
        error=row["error"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        resolved_by=row["resolved_by"],
        resolved_at=row["resolved_at"],
    )


def request_from_row(row: Row) -> HumanRequest:
    return HumanRequest(
        run_id=row["run_id"],
        agent=row["agent"],
        seq=row["seq"],
        position=row["position"],
        call_id=row["call_id"],
        kind=RequestKind(row["kind"]),
        tool=row["tool"],
        effect=ToolEffect(row["effect"]),
        arguments=load_json(row["arguments_json"]),
        arguments_digest=row["arguments_digest"],
        epoch=row["epoch"],
        requested_at=row["requested_at"],
        expires_at=row["expires_at"],
        decision=_optional(Decision, row["decision"]),
        operator=row["operator"],
        note=row["note"],
        value=load_json(row["value_json"]),
        decided_at=row["decided_at"],
        age_seconds=max(0.0, row["now"] - row["requested_at"]),
    )


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


def _same_step(row: Row, epoch: int, step: StepWrite) -> bool:
    """Whether the stored ``row`` is what ``step`` would have written under ``epoch``.

    Times are left out: the store sets them from its clock at each commit.
    """
    settled = (epoch, step.status.value, step.output_json, step.error)
    if settled != (row["epoch"], row["status"], row["output_json"], row["error"]):
        return False
    if step.settles:
        # Settling writes only those: the rest of the row is the intent's.
        return True
    return (
        step.kind.value,
        step.tool,
        step.call_id,
        None if step.effect is None else step.effect.value,
        step.idempotency_key,
        step.arguments_json,
    ) == (
        row["kind"],
        row["tool"],
        row["call_id"],
        row["effect"],
        row["idempotency_key"],
        row["arguments_json"],
    )


def worker_from_row(row: Row) -> WorkerInfo:
    return WorkerInfo(
        id=row["id"],
        host=row["host"],
        pid=row["pid"],
        agents=tuple(json.loads(row["agents_json"])),
        started_at=row["started_at"],
        heartbeat_at=row["heartbeat_at"],
        heartbeat_age_seconds=max(0.0, row["now"] - row["heartbeat_at"]),
        stale_after_seconds=row["stale_after_seconds"],
    )


def _makes_claimable(settlement: Settlement | None) -> bool:
    """Whether a settlement puts its run back in the queue now (not after a backoff)."""
    return (
        settlement is not None
        and settlement.target is RunState.QUEUED
        and settlement.delay_seconds <= 0
    )


def _check_same_request(key: Row, new: NewRun) -> None:
    """Refuse ``new`` if its key was used for another agent or input than it asks for."""
    if key["request_digest"] == new.request_digest:
        return
    what = (
        f"agent {key['agent']!r}, not {new.agent!r}"
        if key["agent"] != new.agent
        else f"a different input to {key['agent']!r}"
    )
    raise IdempotencyKeyConflict(
        f"the idempotency key {new.idempotency_key!r} was already used by run "
        f"{key['run_id']} for {what}"
    )


def _purged_from_row(key: Row) -> PurgedRun:
    return PurgedRun(
        run_id=key["run_id"],
        agent=key["agent"],
        idempotency_key=key["idempotency_key"],
        state=RunState(key["final_state"]),
        reason=_optional(Reason, key["final_reason"]),
        finished_at=key["finished_at"],
        purged_at=key["purged_at"],
    )


def _batches(count: int, batch_size: int) -> int:
    """How many batches the loop that deletes ``count`` rows, ``batch_size`` at a
    time, counts: each one that deleted something (not the empty one that may end it)."""
    return -(-count // batch_size)


_CANCELLED = TRANSITIONS[Event.CANCEL_QUEUED][1]


def _run_row(new: NewRun) -> dict[str, Any]:
    if new.mode is RunMode.INTERACTIVE:
        state, epoch = TRANSITIONS[Event.START_INTERACTIVE][1], 1
        lease_seconds: float | None = new.lease_seconds or 0.0
    else:
        # No lease: NULL seconds make a NULL expiry.
        state, epoch, lease_seconds = TRANSITIONS[Event.SUBMIT][1], 0, None
    return {
        "id": new.id,
        "agent": new.agent,
        "mode": new.mode.value,
        "state": state.value,
        "input_json": new.input_json,
        "epoch": epoch,
        "lease_owner": new.lease_owner,
        "lease_seconds": lease_seconds,
        "idempotency_key": new.idempotency_key,
        "request_digest": new.request_digest,
    }


def _singles(batch: WriteBatch) -> list[WriteBatch]:
    """The batch as one batch per request, in the order a batch applies them."""
    return [
        *(WriteBatch(new_runs=(new,)) for new in batch.new_runs),
        *(WriteBatch(cancels=(run_id,)) for run_id in batch.cancels),
        *(WriteBatch(items=(item,)) for item in batch.items),
        *(WriteBatch(reaps=(reap,)) for reap in batch.reaps),
        *(WriteBatch(claims=(claim,)) for claim in batch.claims),
    ]


def _failed(single: WriteBatch, exc: StoreError) -> WriteResults:
    """The result of a one-request batch that the store refused."""
    return WriteResults(
        new_runs=(exc,) * len(single.new_runs),
        cancels=(exc,) * len(single.cancels),
        items=(Refused(exc.message, data_error=exc.data_error),) * len(single.items),
        reaps=(exc,) * len(single.reaps),
        claims=(exc,) * len(single.claims),
    )


def _json_set(rows: Iterable[dict[str, Any] | list[Any]]) -> str:
    """A set of rows as the one JSON parameter a set statement reads them from.

    Not ASCII-escaped: text a database cannot store (a lone surrogate) stays
    as it is, so the driver refuses it as a data error instead of the database
    storing something else.
    """
    return json.dumps(list(rows), ensure_ascii=False, separators=(",", ":"))


_StepsByKey = dict[tuple[str, int], tuple[int, StepWrite]]
"""A batch's steps of one kind by (run id, seq), each with its item's position."""

_INTEGER_RANGE = range(-(2**63), 2**63)


def _check_integer(value: int) -> None:
    """Refuse an integer no database column here holds, before JSON carries it.

    In a set parameter it would arrive as a float (SQLite's JSON reader makes
    one of any integer past 64 bits), not as the error binding it would raise.
    """
    if value not in _INTEGER_RANGE:
        raise StoreError(f"the integer {value} is out of range", data_error=True)


class _ItemRefused(Exception):
    """One item of a batch cannot be written as sent; the others can."""

    def __init__(self, position: int, error: str, *, data_error: bool = False) -> None:
        super().__init__(error)
        self.position = position
        self.outcome = Refused(error, data_error=data_error)


def _state_text(run: RunRecord) -> str:
    return run.state.value if run.reason is None else f"{run.state.value} ({run.reason.value})"


async def _yield_to_writers(batch_started: float) -> None:
    """Wait as long as the batch took, with its lock released: SQLite's waiters (the
    daemon's Persister among them) get in between batches instead of timing out."""
    await anyio.sleep(anyio.current_time() - batch_started)


class SQLStore:
    """A store over any executor: domain operations here, SQL in the dialect's query file.

    No absolute time is computed here. The queries get durations
    (``lease_seconds``, ``delay_seconds``) and flags (``terminal``, ``finished``)
    and add them to the dialect's "now": the injected clock's reading passed as
    ``:now`` (SQLite), or the database clock (PostgreSQL, whose queries ignore
    ``:now``). No reap depends on any of these clocks: a reaper goes by the lease
    marks it watched (``running_leases``) and fences its reap on them.
    """

    def __init__(self, executor: Executor, clock: Clock) -> None:
        self._executor = executor
        self._queries = load_queries(executor.dialect)
        self._clock = clock

    async def migrate(self) -> int:
        q = self._queries
        async with self._executor.transaction():
            # Two processes starting on a new database must not both migrate it.
            await self._executor.execute(q["lock_migrations"])
            present = await self._executor.fetch_one(q["schema_present"])
            if present is not None and present["present"]:
                # A current schema needs no write: a database this process may only
                # read would get through, and then fail at every claim.
                try:
                    await self._executor.execute(q["check_writable"])
                except StoreError as exc:
                    raise StoreError(f"cannot write to the store: {exc.message}") from exc
            await self._executor.execute(q["create_migrations_table"])
            applied = await self._applied_migrations()
            newest = MIGRATIONS[-1].version
            if applied and max(applied) > newest:
                raise StoreError(
                    f"the database schema is at version {max(applied)}, newer than this "
                    f"leaseward knows ({newest}); upgrade leaseward"
                )
            # Every version not applied yet, not only those above the newest applied:
            # a version numbered below one merged before it must still run.
            for migration in MIGRATIONS:
                if migration.version in applied:
                    continue
                for statement in migration.statements(self._executor.dialect):
                    await self._executor.execute(statement)
                await self._executor.execute(
                    q["record_migration"],
                    {"version": migration.version, "name": migration.name, "now": self._now()},
                )
        return newest

    async def schema_present(self) -> bool:
        """Whether this database has been migrated at least once (by any version)."""
        async with self._executor.reading():
            row = await self._executor.fetch_one(self._queries["schema_present"])
        return row is not None and bool(row["present"])

    async def schema_version(self) -> int:
        """The version this database's schema is complete up to: the newest migration
        applied with every one this leaseward knows before it (or a version newer than
        it knows); 0 if it has none. Changes nothing."""
        async with self._executor.reading():
            present = await self._executor.fetch_one(self._queries["schema_present"])
            if present is None or not present["present"]:
                return 0
            applied = await self._applied_migrations()
        if applied and max(applied) > MIGRATIONS[-1].version:
            return max(applied)
        complete = 0
        for migration in MIGRATIONS:
            if migration.version not in applied:
                break
            complete = migration.version
        return complete

    async def _applied_migrations(self) -> set[int]:
        rows = await self._executor.fetch_all(self._queries["applied_migrations"])
        return {int(row["version"]) for row in rows}

    def _now(self) -> float:
        return self._clock.now()

    # -- writes: every one goes through commit(), one transaction per batch ---------------

    async def create_run(self, new: NewRun) -> RunRecord:
        [result] = (await self.commit(WriteBatch(new_runs=(new,)))).new_runs
        return unwrap(result)

    async def claim_runs(
        self,
        worker_id: str,
        limit: int,
        lease_seconds: float,
        agents: Sequence[str],
        exclude: Sequence[str] = (),
    ) -> list[RunRecord]:
        claim = ClaimRequest(worker_id, limit, lease_seconds, tuple(agents), tuple(exclude))
        [result] = (await self.commit(WriteBatch(claims=(claim,)))).claims
        return list(unwrap(result))

    async def commit_batch(self, items: Sequence[BatchItem]) -> list[CommitOutcome]:
        return list((await self.commit(WriteBatch(items=tuple(items)))).items)

    async def request_cancel(self, run_id: str) -> CancelOutcome:
        [result] = (await self.commit(WriteBatch(cancels=(run_id,)))).cancels
        return unwrap(result)

    async def reap(self, expired: ExpiredRun, settlement: Settlement) -> bool:
        [result] = (await self.commit(WriteBatch(reaps=(Reap(expired, settlement),)))).reaps
        return unwrap(result)

    async def commit(self, batch: WriteBatch) -> WriteResults:
        if not len(batch):
            return WriteResults()
        try:
            async with self._executor.transaction():
                # Read once the transaction holds SQLite's write lock: a "now" taken
                # before waiting for it would date the renewed leases in the past.
                now = self._now()
                results = await self._write(batch, now)
                await self._after_write(batch, results)
            return results
        except _ItemRefused:
            pass
        except StoreError as exc:
            if not exc.data_error:
                raise
        # Some request's data was refused, and a set statement cannot say whose: the
        # batch is written again, each request alone, so that only that one fails.
        return await self._commit_each(batch)

    async def _commit_each(self, batch: WriteBatch) -> WriteResults:
        parts: list[WriteResults] = []
        async with self._executor.transaction():
            now = self._now()
            for single in _singles(batch):
                try:
                    async with self._executor.savepoint("request"):
                        parts.append(await self._write(single, now))
                except _ItemRefused as refused:
                    parts.append(WriteResults(items=(refused.outcome,)))
                except StoreError as exc:
                    parts.append(_failed(single, exc))
            results = WriteResults.joined(parts)
            await self._after_write(batch, results)
        return results

    async def _write(self, batch: WriteBatch, now: float) -> WriteResults:
        """Every request of ``batch``, with one statement per kind of change."""
        return WriteResults(
            new_runs=await self._insert_runs(batch.new_runs, now) if batch.new_runs else (),
            cancels=await self._cancel_runs(batch.cancels, now) if batch.cancels else (),
            items=tuple(await self._write_items(batch.items, now)) if batch.items else (),
            reaps=await self._reap_runs(batch.reaps, now) if batch.reaps else (),
            claims=tuple([await self._claim(claim, now) for claim in batch.claims]),
        )

    async def _after_write(self, batch: WriteBatch, results: WriteResults) -> None:
        """What a batch does last, inside its transaction."""
        claimable = (
            any(
                isinstance(run, RunRecord) and run.state is RunState.QUEUED and run.id == new.id
                for new, run in zip(batch.new_runs, results.new_runs, strict=True)
            )
            or any(
                isinstance(outcome, Stored) and _makes_claimable(item.settlement)
                for item, outcome in zip(batch.items, results.items, strict=True)
            )
            or any(
                reaped is True and _makes_claimable(reap.settlement)
                for reap, reaped in zip(batch.reaps, results.reaps, strict=True)
            )
        )
        if claimable:
            await self._executor.notify(WORK_CHANNEL)
        if ARMED and carries_outcome(step for item in batch.items for step in item.steps):
            crash_point("outcome_commit")

    async def _insert_runs(
        self, runs: Sequence[NewRun], now: float
    ) -> tuple[RunRecord | LeasewardError, ...]:
        q = self._queries
        keyed = sorted(
            (new for new in runs if new.idempotency_key is not None),
            # One order for every batch: two batches taking the same keys cannot deadlock.
            key=lambda new: str(new.idempotency_key),
        )
        taken: set[str] = set()
        if keyed:
            rows = await self._executor.fetch_all(
                q["insert_keys"],
                {
                    "keys": _json_set(
                        {
                            "idempotency_key": new.idempotency_key,
                            "id": new.id,
                            "agent": new.agent,
                            "request_digest": new.request_digest,
                        }
                        for new in keyed
                    ),
                    "now": now,
                },
            )
            taken = {row["run_id"] for row in rows}
        fresh = [new for new in runs if new.idempotency_key is None or new.id in taken]
        inserted: dict[str, RunRecord] = {}
        if fresh:
            rows = await self._executor.fetch_all(
                q["insert_runs"], {"runs": _json_set(_run_row(new) for new in fresh), "now": now}
            )
            inserted = {row["id"]: run_from_row(row) for row in rows}
        results: list[RunRecord | LeasewardError] = []
        for new in runs:
            run = inserted.get(new.id)
            if run is not None:
                results.append(run)
            elif new.idempotency_key is None or new.id in taken:
                raise StoreError("the new run was not returned by the store")
            else:
                results.append(await self._keyed_run(new))
        return tuple(results)

    async def _keyed_run(self, new: NewRun) -> RunRecord | LeasewardError:
        """The run that holds ``new``'s key, stored or purged: the insert of the key
        itself decided which of two racing submits creates it (never check, then insert)."""
        q = self._queries
        key = await self._executor.fetch_one(q["get_key"], {"idempotency_key": new.idempotency_key})
        if key is None:
            raise StoreError(
                f"the idempotency key {new.idempotency_key!r} was not returned by the store"
            )
        try:
            _check_same_request(key, new)
        except IdempotencyKeyConflict as conflict:
            return conflict
        row = await self._executor.fetch_one(q["get_run"], {"run_id": key["run_id"]})
        if row is not None:
            return run_from_row(row)
        # Read again, after the run: the purge that deleted the run marked its key in
        # the same transaction, which the first read may have come before.
        key = await self._executor.fetch_one(q["get_key"], {"idempotency_key": new.idempotency_key})
        if key is None or key["purged_at"] is None:
            raise StoreError(
                f"the run of idempotency key {new.idempotency_key!r} was purged and its key "
                "forgotten while the submit read it"
            )
        return RunPurged(_purged_from_row(key))

    async def _cancel_runs(
        self, run_ids: Sequence[str], now: float
    ) -> tuple[CancelOutcome | LeasewardError, ...]:
        q = self._queries
        states = {
            row["id"]: RunState(row["state"])
            for row in await self._executor.fetch_all(q["lock_runs"], {"ids": list(run_ids)})
        }
        running = [run_id for run_id, state in states.items() if state is RunState.RUNNING]
        waiting = [run_id for run_id, state in states.items() if state in _CANCEL_EVENTS]
        if running:
            await self._executor.execute(
                q["request_cancels"],
                {"ids": running, "source": RunState.RUNNING.value, "now": now},
            )
        if waiting:
            await self._executor.execute(
                q["cancel_runs"],
                {
                    "ids": waiting,
                    "sources": [source_state(event).value for event in _CANCEL_EVENTS.values()],
                    "target": _CANCELLED.value,
                    "reason": Reason.CANCELLED.value,
                    "now": now,
                },
            )
        results: list[CancelOutcome | LeasewardError] = []
        for run_id in run_ids:
            state = states.get(run_id)
            if state is None:
                results.append(RunNotFound(f"no run with id {run_id!r}"))
            elif state.terminal:
                results.append(CancelOutcome.ALREADY_FINISHED)
            elif state is RunState.RUNNING:
                results.append(CancelOutcome.REQUESTED)
            else:
                results.append(CancelOutcome.CANCELLED)
        return tuple(results)

    async def _reap_runs(self, reaps: Sequence[Reap], now: float) -> tuple[bool, ...]:
        settled = await self._settle_runs(
            [(r.expired.run.id, r.expired.run.epoch, r.settlement) for r in reaps],
            now,
            renewals={r.expired.run.id: r.expired.renewals for r in reaps},
        )
        return tuple((r.expired.run.id, r.expired.run.epoch) in settled for r in reaps)

    async def _claim(self, claim: ClaimRequest, now: float) -> tuple[RunRecord, ...]:
        source, target = TRANSITIONS[Event.CLAIM]
        assert source is not None
        rows = await self._executor.fetch_all(
            self._queries["claim_runs"],
            {
                "source": source.value,
                "target": target.value,
                "worker_id": claim.worker_id,
                "lease_seconds": claim.lease_seconds,
                "limit": claim.limit,
                "agents": list(claim.agents),
                "exclude": list(claim.exclude),
                "now": now,
            },
        )
        return tuple(
            sorted((run_from_row(r) for r in rows), key=lambda r: (r.available_at, r.created_at))
        )

    async def _write_items(self, items: Sequence[BatchItem], now: float) -> list[CommitOutcome]:
        """Write the items with one statement per kind of change, whatever their number.

        The fence comes first: an item whose run is no longer ``running`` under its
        epoch writes nothing. Raises _ItemRefused for an item that cannot be
        written as sent (the transaction must then be rolled back).
        """
        q = self._queries
        for item in items:
            _check_integer(item.epoch)
        fences = await self._executor.fetch_all(
            q["renew_leases"],
            {
                "items": _json_set(
                    {
                        "run_id": item.run_id,
                        "epoch": item.epoch,
                        "lease_seconds": item.lease_seconds,
                    }
                    for item in items
                ),
                "source": RunState.RUNNING.value,
                "now": now,
            },
        )
        held = {(row["run_id"], row["epoch"]): row for row in fences}
        inserts: _StepsByKey = {}
        settles: _StepsByKey = {}
        withdrawals: _StepsByKey = {}
        settlements: dict[tuple[str, int], tuple[int, Settlement]] = {}
        requests: list[tuple[BatchItem, NewRequest]] = []
        for position, item in enumerate(items):
            if (item.run_id, item.epoch) not in held:
                continue
            for step in item.steps:
                _check_integer(step.seq)
                kind = withdrawals if step.withdraws else settles if step.settles else inserts
                kind[(item.run_id, step.seq)] = (position, step)
            if item.settlement is not None:
                settlements[(item.run_id, item.epoch)] = (position, item.settlement)
                requests.extend((item, request) for request in item.settlement.requests)
        if inserts:
            await self._insert_steps(items, inserts, now)
        if settles:
            await self._settle_steps(items, settles, now)
        if withdrawals:
            await self._withdraw_steps(items, withdrawals)
        if requests:
            await self._insert_requests(requests, now)
        if settlements:
            settled = await self._settle_runs(
                [(key[0], key[1], settlement) for key, (_, settlement) in settlements.items()], now
            )
            for key, (position, _) in settlements.items():
                if key not in settled:
                    raise _ItemRefused(position, "the run changed under its own lease")
        return [
            Fenced() if fence is None else Stored(cancel_requested=bool(fence["cancel_requested"]))
            for fence in (held.get((item.run_id, item.epoch)) for item in items)
        ]

    async def _insert_steps(
        self,
        items: Sequence[BatchItem],
        steps: _StepsByKey,
        now: float,
    ) -> None:
        rows = await self._executor.fetch_all(
            self._queries["insert_steps"],
            {
                # In the positions insert_steps reads them from.
                "steps": _json_set(
                    [
                        items[position].run_id,
                        step.seq,
                        items[position].epoch,
                        step.kind.value,
                        step.tool,
                        step.call_id,
                        None if step.effect is None else step.effect.value,
                        step.status.value,
                        step.idempotency_key,
                        step.arguments_json,
                        step.output_json,
                        step.error,
                        step.started_at,
                        step.status is not StepStatus.STARTED,
                    ]
                    for position, step in steps.values()
                ),
                "now": now,
            },
        )
        await self._check_unwritten(items, steps, rows, "is already recorded differently")

    async def _settle_steps(
        self,
        items: Sequence[BatchItem],
        steps: _StepsByKey,
        now: float,
    ) -> None:
        rows = await self._executor.fetch_all(
            self._queries["settle_steps"],
            {
                "steps": _json_set(
                    {
                        "run_id": items[position].run_id,
                        "seq": step.seq,
                        "epoch": items[position].epoch,
                        "status": step.status.value,
                        "output_json": step.output_json,
                        "error": step.error,
                    }
                    for position, step in steps.values()
                ),
                "started": StepStatus.STARTED.value,
                "now": now,
            },
        )
        await self._check_unwritten(items, steps, rows, "has no open intent")

    async def _insert_requests(
        self, requests: Sequence[tuple[BatchItem, NewRequest]], now: float
    ) -> None:
        await self._executor.execute(
            self._queries["insert_requests"],
            {
                "requests": _json_set(
                    {
                        "run_id": item.run_id,
                        "epoch": item.epoch,
                        "seq": request.seq,
                        "position": request.position,
                        "call_id": request.call_id,
                        "kind": request.kind.value,
                        "tool": request.tool,
                        "effect": request.effect.value,
                        "arguments_json": request.arguments_json,
                        "arguments_digest": request.arguments_digest,
                        "timeout_seconds": request.timeout_seconds,
                    }
                    for item, request in requests
                ),
                "now": now,
            },
        )

    async def _withdraw_steps(self, items: Sequence[BatchItem], steps: _StepsByKey) -> None:
        rows = await self._executor.fetch_all(
            self._queries["withdraw_steps"],
            {
                "steps": _json_set(
                    {
                        "run_id": items[position].run_id,
                        "seq": step.seq,
                        "epoch": items[position].epoch,
                    }
                    for position, step in steps.values()
                ),
                "started": StepStatus.STARTED.value,
            },
        )
        written = {(row["run_id"], row["seq"]) for row in rows}
        for key, (position, step) in steps.items():
            if key in written:
                continue
            # A withdrawal leaves no open intent behind. An intent whose commit went
            # unanswered may never have been stored: nothing is left to withdraw. A row
            # that is there but settled, or another epoch's, is not this attempt's.
            row = await self._executor.fetch_one(
                self._queries["get_step"], {"run_id": key[0], "seq": step.seq}
            )
            if row is not None:
                raise _ItemRefused(position, f"step {step.seq} of run {key[0]} has no open intent")

    async def _check_unwritten(
        self,
        items: Sequence[BatchItem],
        steps: _StepsByKey,
        written_rows: Sequence[Row],
        problem: str,
    ) -> None:
        """Accept a step the statement did not write if its row is stored exactly as sent.

        A record is sent again when the answer to the commit that stored it was
        lost: storing it twice changes nothing and is no error, or the run would
        fail the write that follows it. A different row under the same seq is a
        contradiction that no retry resolves.
        """
        if len(written_rows) == len(steps):
            return
        written = {(row["run_id"], row["seq"]) for row in written_rows}
        for key, (position, step) in steps.items():
            if key in written:
                continue
            row = await self._executor.fetch_one(
                self._queries["get_step"], {"run_id": key[0], "seq": step.seq}
            )
            if row is None or not _same_step(row, items[position].epoch, step):
                raise _ItemRefused(
                    position, f"step {step.seq} of run {key[0]} {problem}", data_error=True
                )

    async def _settle_runs(
        self,
        settlements: Sequence[tuple[str, int, Settlement]],
        now: float,
        *,
        renewals: Mapping[str, int] | None = None,
    ) -> set[tuple[str, int]]:
        """Settle runs, each fenced on its epoch (a reaped one also on its ``renewals``);
        returns the (run id, epoch) settled."""
        rows = await self._executor.fetch_all(
            self._queries["settle_runs"],
            {
                "settlements": _json_set(
                    {
                        "run_id": run_id,
                        "epoch": epoch,
                        "source": source_state(settlement.event).value,
                        "target": settlement.target.value,
                        "reason": None if settlement.reason is None else settlement.reason.value,
                        "failure_class": (
                            None
                            if settlement.failure_class is None
                            else settlement.failure_class.value
                        ),
                        "result_json": settlement.result_json,
                        "error": settlement.error,
                        "spent_retries": 1 if settlement.spends_retry else 0,
                        "delay_seconds": settlement.delay_seconds,
                        "terminal": settlement.target.terminal,
                        "renewals": None if renewals is None else renewals[run_id],
                    }
                    for run_id, epoch, settlement in settlements
                ),
                "now": now,
            },
        )
        return {(row["run_id"], row["epoch"]) for row in rows}

    async def get_run(self, run_id: str) -> RunRecord | None:
        async with self._executor.reading():
            row = await self._executor.fetch_one(
                self._queries["read_run"], {"run_id": run_id, "now": self._now()}
            )
        return None if row is None else attrs.evolve(run_from_row(row), read_at=row["read_at"])

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
                        last_effect=None if last is None else _optional(ToolEffect, last["effect"]),
                        last_status=None if last is None else StepStatus(last["status"]),
                        renewals=lease.renewals,
                    )
                )
        return found

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

    async def _lock_run(self, run_id: str) -> RunRecord:
        row = await self._executor.fetch_one(self._queries["lock_run"], {"run_id": run_id})
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        return run_from_row(row)

    async def _reopen(self, run: RunRecord, event: Event, *, reset_requeues: bool) -> RunRecord:
        row = await self._executor.fetch_one(
            self._queries["reopen_run"],
            {
                "run_id": run.id,
                "epoch": run.epoch,
                "source": source_state(event).value,
                "target": TRANSITIONS[event][1].value,
                "reset_requeues": reset_requeues,
                "now": self._now(),
            },
        )
        if row is None:
            raise StoreError(f"run {run.id} changed while it was being reopened")
        await self._executor.notify(WORK_CHANNEL)
        return run_from_row(row)

    async def _open_call(self, run_id: str) -> Row | None:
        """The newest journal row if it is a call started and never settled, else None."""
        last = await self._executor.fetch_one(self._queries["last_step"], {"run_id": run_id})
        if last is None or StepStatus(last["status"]) is not StepStatus.STARTED:
            return None
        return last

    async def redrive(self, run_id: str) -> RunRecord:
        async with self._executor.transaction():
            run = await self._lock_run(run_id)
            redrivable = run.state is RunState.DEAD_LETTERED and (
                run.reason in REDRIVABLE_REASONS
                # Dead-lettered over a call whose outcome did get stored (its commit's
                # answer was lost): the journal leaves nothing for an operator to decide.
                or (
                    run.reason is Reason.INTERRUPTED_WRITE and await self._open_call(run_id) is None
                )
            )
            if not redrivable:
                hint = (
                    "; an interrupted write needs `resolve` (did the call apply?)"
                    if run.reason is Reason.INTERRUPTED_WRITE
                    else ""
                )
                raise IllegalTransition(
                    f"run {run_id} is {_state_text(run)}: only a run dead-lettered "
                    "not_retryable or retries_exhausted, or interrupted_write with its "
                    f"call's outcome recorded, can be redriven{hint}"
                )
            return await self._reopen(run, Event.REDRIVE, reset_requeues=True)

    async def resolve(
        self, run_id: str, *, applied: bool, operator: str, note: str | None = None
    ) -> RunRecord:
        q = self._queries
        async with self._executor.transaction():
            run = await self._lock_run(run_id)
            if (
                run.state is not RunState.DEAD_LETTERED
                or run.reason is not Reason.INTERRUPTED_WRITE
            ):
                raise IllegalTransition(
                    f"run {run_id} is {_state_text(run)}: only a run dead-lettered "
                    "interrupted_write waits for a resolution"
                )
            last = await self._open_call(run_id)
            if last is None:
                raise IllegalTransition(
                    f"run {run_id} has no interrupted call to resolve: its journal records "
                    "the outcome of its last call; `redrive` puts it back in the queue"
                )
            output = {
                "resolution": "applied" if applied else "not_applied",
                "resolved_by": operator,
                "note": note,
            }
            resolved = await self._executor.fetch_all(
                q["resolve_step"],
                {
                    "run_id": run_id,
                    "seq": last["seq"],
                    "status": (StepStatus.SUCCEEDED if applied else StepStatus.FAILED).value,
                    "output_json": json.dumps(output, separators=(",", ":")),
                    "error": None
                    if applied
                    else "the operator recorded that the call did not apply",
                    "resolved_by": operator,
                    "started": StepStatus.STARTED.value,
                    "now": self._now(),
                },
            )
            if len(resolved) != 1:
                raise StoreError(f"the interrupted call of run {run_id} changed meanwhile")
            return await self._reopen(run, Event.RESOLVE, reset_requeues=False)

    async def register_worker(self, worker: WorkerRegistration) -> None:
        await self._beat(worker, starting=True)

    async def heartbeat_worker(self, worker: WorkerRegistration) -> None:
        await self._beat(worker, starting=False)

    async def _beat(self, worker: WorkerRegistration, *, starting: bool) -> None:
        async with self._executor.transaction():
            await self._executor.execute(
                self._queries["beat_worker"],
                {
                    "id": worker.id,
                    "host": worker.host,
                    "pid": worker.pid,
                    "agents_json": json.dumps(list(worker.agents)),
                    "stale_after_seconds": worker.stale_after_seconds,
                    "starting": starting,
                    "now": self._now(),
                },
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

    async def purge_finished(
        self,
        states: Sequence[RunState],
        older_than_seconds: float,
        *,
        dry_run: bool = False,
        batch_runs: int = PURGE_BATCH_RUNS,
    ) -> PurgeResult:
        unfinished = [state.value for state in states if not state.terminal]
        if unfinished:
            raise InvalidInput(
                f"only finished runs can be purged, not {', '.join(unfinished)} ones"
            )
        if not older_than_seconds > 0 or batch_runs < 1:
            raise InvalidInput("a purge needs a positive age and batch size")
        # Fixed once: runs that finish while the purge goes on never qualify, so it ends.
        cutoff = await self._cutoff(older_than_seconds)
        if dry_run:
            return await self._count_purgeable(states, cutoff, batch_runs)
        runs = steps = batches = 0
        for state in states:
            while True:
                started = anyio.current_time()
                picked, gone_runs, gone_steps = await self._purge_batch(state, cutoff, batch_runs)
                if picked:
                    runs, steps, batches = runs + gone_runs, steps + gone_steps, batches + 1
                if picked < batch_runs:
                    break
                await _yield_to_writers(started)
        return PurgeResult(
            runs=runs, steps=steps, batches=batches, finished_before=cutoff, dry_run=False
        )

    async def _cutoff(self, older_than_seconds: float) -> float:
        """The store's "now" less ``older_than_seconds``."""
        async with self._executor.reading():
            row = await self._executor.fetch_one(
                self._queries["purge_cutoff"],
                {"older_than_seconds": older_than_seconds, "now": self._now()},
            )
        if row is None:
            raise StoreError("the store returned no time for the cutoff")
        return float(row["cutoff"])

    async def _purge_batch(
        self, state: RunState, cutoff: float, batch_runs: int
    ) -> tuple[int, int, int]:
        """One transaction: (runs picked, runs deleted, journal rows deleted)."""
        q = self._queries
        async with self._executor.transaction():
            picked = await self._executor.fetch_all(
                q["purge_pick"], {"state": state.value, "cutoff": cutoff, "limit": batch_runs}
            )
            if not picked:
                return 0, 0, 0
            ids = [r["id"] for r in picked]
            steps = await self._executor.fetch_all(q["purge_steps"], {"ids": ids})
            await self._executor.execute(q["purge_approvals"], {"ids": ids})
            await self._executor.execute(
                q["purge_keys"], {"ids": ids, "state": state.value, "now": self._now()}
            )
            runs = await self._executor.fetch_all(
                q["purge_runs"], {"ids": ids, "state": state.value}
            )
        return len(ids), len(runs), len(steps)

    async def _count_purgeable(
        self, states: Sequence[RunState], cutoff: float, batch_runs: int
    ) -> PurgeResult:
        runs = steps = batches = 0
        async with self._executor.reading():
            for state in states:
                row = await self._executor.fetch_one(
                    self._queries["purge_count"], {"state": state.value, "cutoff": cutoff}
                )
                if row is None:
                    raise StoreError("the store returned no count for the purge")
                runs += int(row["runs"])
                steps += int(row["steps"])
                batches += _batches(int(row["runs"]), batch_runs)
        return PurgeResult(
            runs=runs, steps=steps, batches=batches, finished_before=cutoff, dry_run=True
        )

    async def purged_run(self, run_id: str) -> PurgedRun | None:
        async with self._executor.reading():
            key = await self._executor.fetch_one(self._queries["purged_key"], {"run_id": run_id})
        return None if key is None else _purged_from_row(key)

    async def forget_keys(
        self,
        older_than_seconds: float,
        *,
        dry_run: bool = False,
        batch_keys: int = PURGE_BATCH_RUNS,
    ) -> ForgetKeysResult:
        if not older_than_seconds > 0 or batch_keys < 1:
            raise InvalidInput("forgetting keys needs a positive age and batch size")
        cutoff = await self._cutoff(older_than_seconds)
        q = self._queries
        if dry_run:
            async with self._executor.reading():
                row = await self._executor.fetch_one(q["forget_count"], {"cutoff": cutoff})
            if row is None:
                raise StoreError("the store returned no count of keys to forget")
            keys = int(row["keys"])
            return ForgetKeysResult(
                keys=keys,
                batches=_batches(keys, batch_keys),
                created_before=cutoff,
                dry_run=True,
            )
        keys = batches = 0
        while True:
            started = anyio.current_time()
            async with self._executor.transaction():
                gone = await self._executor.fetch_all(
                    q["forget_keys"], {"cutoff": cutoff, "limit": batch_keys}
                )
            if gone:
                keys, batches = keys + len(gone), batches + 1
            if len(gone) < batch_keys:
                break
            await _yield_to_writers(started)
        return ForgetKeysResult(keys=keys, batches=batches, created_before=cutoff, dry_run=False)

    async def wait_for_work(self, timeout: float) -> None:
        await self._executor.wait_for_notification(WORK_CHANNEL, timeout)

    async def aclose(self) -> None:
        await self._executor.aclose()
