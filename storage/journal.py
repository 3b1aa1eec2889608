"""The one write path: every batch (submits, cancels, journal items, reaps, claims) is one
transaction, and a batch with refused data is written again request by request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leaseward.runtime.clock import Clock
from leaseward.runtime.commits import CommitOutcome, Refused, Stored
from leaseward.runtime.errors import (
    IdempotencyKeyConflict,
    LeasewardError,
    RunNotFound,
    RunPurged,
    StoreError,
)
from leaseward.runtime.lifecycle import (
    TRANSITIONS,
    Event,
    Reason,
    RunMode,
    RunState,
    StepStatus,
    source_state,
)
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.storage.concern import WORK_CHANNEL, StoreConcern
from leaseward.storage.crash_points import ARMED, carries_outcome, crash_point
from leaseward.storage.executor import Executor, Row, WouldWait
from leaseward.storage.journal_items import ItemRefused, ItemWriter
from leaseward.storage.protocol import (
    BatchItem,
    CancelOutcome,
    ClaimRequest,
    ExpiredRun,
    Reap,
    WriteBatch,
    WriteResults,
    unwrap,
)
from leaseward.storage.queries import Queries
from leaseward.storage.rows import json_set, purged_from_row, run_from_row

__all__ = ["JournalWriter"]

# A batch's statements, in one statement or in a transaction, a settlement's and a
# submit's: what a worker writes all the time.
_REHEARSED = (
    "write_journal",
    "renew_leases",
    "renew_leases_passing_held_rows",
    "insert_steps",
    "settle_steps",
    "settle_runs",
    "insert_keys",
    "insert_runs",
)

_CANCEL_EVENTS = {
    RunState.QUEUED: Event.CANCEL_QUEUED,
    RunState.WAITING_FOR_APPROVAL: Event.CANCEL_WAITING_APPROVAL,
    RunState.WAITING_FOR_INPUT: Event.CANCEL_WAITING_INPUT,
}


def _check_same_request(key: Row, new: NewRun) -> None:
    """Refuse ``new`` if its key was used for another agent or input than it asks for."""
    if key["request_digest"] == new.request_digest:
        return
    raise IdempotencyKeyConflict(
        key=new.idempotency_key,
        run_id=key["run_id"],
        stored_agent=key["agent"],
        agent=new.agent,
    )


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
        "traceparent": new.traceparent,
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


class JournalWriter(StoreConcern):
    """Group commit: the Persister's batch, a submit or a claim, each one transaction."""

    def __init__(self, executor: Executor, queries: Queries, clock: Clock) -> None:
        super().__init__(executor, queries, clock)
        self._items = ItemWriter(executor, queries, clock)

    @property
    def renews_apart(self) -> bool:
        return self._executor.writes_alone and "renew_leases_passing_held_rows" in self._queries

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
        if len(batch.items) == len(batch) and all(
            item.passes_a_held_row and not item.steps and item.settlement is None
            for item in batch.items
        ):
            renewed = await self._items.renew_passing_held_rows(batch.items)
            if renewed is not None:
                return WriteResults(items=tuple(renewed))
        if len(batch.items) == len(batch):
            try:
                alone = await self._items.write_alone(batch.items)
            except StoreError as exc:
                if not exc.data_error:
                    raise
                alone = None
            if alone is not None:
                return WriteResults(items=tuple(alone))
        if len(batch.claims) == len(batch) == 1 and self._executor.writes_alone:
            # The claim is one statement: committed by itself, it is one round trip
            # where a transaction around it takes three.
            try:
                return WriteResults(
                    claims=(await self._claim(batch.claims[0], self._now(), alone=True),)
                )
            except StoreError as exc:
                if not exc.data_error:
                    raise
        try:
            return await self._executor.run_transaction(lambda: self._write_all(batch))
        except ItemRefused:
            pass
        except StoreError as exc:
            if not exc.data_error:
                raise
        # Some request's data was refused, and a set statement cannot say whose: the
        # batch is written again, each request alone, so that only that one fails.
        return await self._commit_each(batch)

    async def rehearsal(self) -> None:
        """The statements of a worker's writes, each given empty sets: they change
        nothing, yet the database parses and plans them (``Executor.rehearse``)."""
        nothing: dict[str, Any] = {
            "items": "[]",
            "steps": "[]",
            "outcomes": "[]",
            "settlements": "[]",
            "keys": "[]",
            "runs": "[]",
            "source": RunState.RUNNING.value,
            "started": StepStatus.STARTED.value,
            "now": 0.0,
        }
        claim_source, claim_target = TRANSITIONS[Event.CLAIM]
        assert claim_source is not None
        nobody: dict[str, Any] = {
            "source": claim_source.value,
            "target": claim_target.value,
            "worker_id": "",
            "lease_seconds": 0.0,
            "limit": 0,
            "agents": [],
            "exclude": [],
            "now": 0.0,
        }
        for name, params in (*((name, nothing) for name in _REHEARSED), ("claim_runs", nobody)):
            if name in self._queries:
                await self._executor.fetch_all(self._queries[name], params)

    def commit_at_once(
        self, batch: WriteBatch, *, wait_seconds: float = 0.0
    ) -> WriteResults | None:
        """``batch`` committed before this returns, or None where that would wait (see
        ``Store.commit_at_once``); a request whose data is refused, or a store unwell, is
        left to ``commit``, which says which request failed and how."""
        try:
            return self._executor.run_transaction_at_once(
                lambda: self._write_all(batch), wait_seconds=wait_seconds
            )
        except (WouldWait, ItemRefused, StoreError):
            return None

    async def _write_all(self, batch: WriteBatch) -> WriteResults:
        # Read once the transaction holds SQLite's write lock: a "now" taken
        # before waiting for it would date the renewed leases in the past.
        now = self._now()
        results = await self._write(batch, now)
        await self._after_write(batch, results)
        return results

    async def _commit_each(self, batch: WriteBatch) -> WriteResults:
        parts: list[WriteResults] = []
        async with self._executor.transaction():
            now = self._now()
            for single in _singles(batch):
                try:
                    async with self._executor.savepoint("request"):
                        parts.append(await self._write(single, now))
                except ItemRefused as refused:
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
            items=tuple(await self._items.write_items(batch.items, now)) if batch.items else (),
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
                isinstance(outcome, Stored)
                and item.settlement is not None
                and item.settlement.queues_now
                for item, outcome in zip(batch.items, results.items, strict=True)
            )
            or any(
                reaped is True and reap.settlement.queues_now
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
                    "keys": json_set(
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
                q["insert_runs"], {"runs": json_set(_run_row(new) for new in fresh), "now": now}
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
        return RunPurged(purged_from_row(key))

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
                results.append(RunNotFound(run_id=run_id))
            elif state.terminal:
                results.append(CancelOutcome.ALREADY_FINISHED)
            elif state is RunState.RUNNING:
                results.append(CancelOutcome.REQUESTED)
            else:
                results.append(CancelOutcome.CANCELLED)
        return tuple(results)

    async def _reap_runs(self, reaps: Sequence[Reap], now: float) -> tuple[bool, ...]:
        settled = await self._items.settle_runs(
            [(r.expired.run.id, r.expired.run.epoch, r.settlement) for r in reaps],
            now,
            renewals={r.expired.run.id: r.expired.renewals for r in reaps},
        )
        return tuple((r.expired.run.id, r.expired.run.epoch) in settled for r in reaps)

    async def _claim(
        self, claim: ClaimRequest, now: float, *, alone: bool = False
    ) -> tuple[RunRecord, ...]:
        source, target = TRANSITIONS[Event.CLAIM]
        assert source is not None
        fetch = self._executor.write_alone if alone else self._executor.fetch_all
        rows = await fetch(
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
