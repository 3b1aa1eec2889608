"""Writing journal items: fenced lease renewals, steps, requests and run settlements."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored
from leaseward.runtime.errors import StoreError
from leaseward.runtime.human_requests import NewRequest
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import RunState, StepStatus, source_state
from leaseward.runtime.settlements import Settlement
from leaseward.storage.concern import StoreConcern
from leaseward.storage.crash_points import ARMED, carries_outcome, crash_point
from leaseward.storage.executor import Row
from leaseward.storage.protocol import BatchItem
from leaseward.storage.rows import json_set, step_from_row

__all__ = ["SET_STATEMENTS_AT", "ItemRefused", "ItemWriter"]


_StepsByKey = dict[tuple[str, int], tuple[int, StepWrite]]
"""A batch's steps of one kind by (run id, seq), each with its item's position."""

_INTEGER_RANGE = range(-(2**63), 2**63)

# Outcomes are immutable: one of each kind serves every item, so that a batch's answers
# (a hundred thousand lease renewals in one) are not as many objects for the cyclic
# garbage collector to carry into its oldest generation.
_STORED = Stored()
_STORED_CANCEL_REQUESTED = Stored(cancel_requested=True)
_FENCED = Fenced()
_HELD_ELSEWHERE = Refused("the run's row is held by another transaction")


def _check_integer(value: int) -> None:
    """Refuse an integer no database column here holds, before JSON carries it.

    In a set parameter it would arrive as a float (SQLite's JSON reader makes
    one of any integer past 64 bits), not as the error binding it would raise.
    """
    if value not in _INTEGER_RANGE:
        raise StoreError(f"the integer {value} is out of range", data_error=True)


SET_STATEMENTS_AT = 16
"""Items in a batch from which a dialect that binds rows one by one faster (SQLite) writes
them with one statement a kind of change instead, as PostgreSQL always does. Each row
bound or returned on the connection's thread needs the interpreter's lock back, which
the event loop holds while it runs Python. A batch this large is most likely one the
Persister commits while the runs of another take their steps (its COHORT_AT), which a
statement a row would hold up; a smaller one commits while they wait, and binds its
rows in half the time."""


class ItemRefused(Exception):
    """One item of a batch cannot be written as sent; the others can."""

    def __init__(self, position: int, error: str, *, data_error: bool = False) -> None:
        super().__init__(error)
        self.position = position
        self.outcome = Refused(error, data_error=data_error)


def _fence_set(items: Sequence[BatchItem]) -> str:
    """The items' fences, as renew_leases reads them."""
    return json_set(
        {"run_id": item.run_id, "epoch": item.epoch, "lease_seconds": item.lease_seconds}
        for item in items
    )


def _new_step_set(items: Sequence[BatchItem], steps: _StepsByKey) -> str:
    """New journal rows, in the positions insert_steps reads them from."""
    return json_set(
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
            step.source_json,
        ]
        for position, step in steps.values()
    )


def _outcome_row(item: BatchItem, step: StepWrite, **extra: object) -> dict[str, object]:
    """The outcome of an open intent, as settle_steps and settle_step read it (the
    latter with its ``extra`` parameters)."""
    return {
        "run_id": item.run_id,
        "seq": step.seq,
        "epoch": item.epoch,
        "status": step.status.value,
        "output_json": step.output_json,
        "error": step.error,
        **extra,
    }


def _outcome_set(items: Sequence[BatchItem], steps: _StepsByKey) -> str:
    """Outcomes of open intents, as settle_steps reads them."""
    return json_set(_outcome_row(items[position], step) for position, step in steps.values())


def _settlement_set(
    settlements: Sequence[tuple[str, int, Settlement]],
    renewals: Mapping[str, int] | None = None,
) -> str:
    """Run settlements, each fenced on its epoch (a reap's also on its ``renewals``), as
    settle_runs and write_journal read them."""
    return json_set(
        {
            "run_id": run_id,
            "epoch": epoch,
            "source": source_state(settlement.event).value,
            "target": settlement.target.value,
            "reason": None if settlement.reason is None else settlement.reason.value,
            "failure_class": (
                None if settlement.failure_class is None else settlement.failure_class.value
            ),
            "result_json": settlement.result_json,
            "error": settlement.error,
            "spent_retries": 1 if settlement.spends_retry else 0,
            "delay_seconds": settlement.delay_seconds,
            "terminal": settlement.target.terminal,
            "renewals": None if renewals is None else renewals[run_id],
        }
        for run_id, epoch, settlement in settlements
    )


def _answer(cancel_requested: bool | None) -> CommitOutcome:
    """An item's outcome, from its run's cancel_requested where the fence held it (None
    where it did not)."""
    if cancel_requested is None:
        return _FENCED
    return _STORED_CANCEL_REQUESTED if cancel_requested else _STORED


class ItemWriter(StoreConcern):
    """The items of one batch, with one statement per kind of change."""

    async def renew_passing_held_rows(
        self, items: Sequence[BatchItem]
    ) -> list[CommitOutcome] | None:
        """Renewals alone (``BatchItem.passes_a_held_row``) in one statement committed on
        its own, a run whose row another transaction holds refused as a passing fault.
        None where the dialect has no such statement: the caller writes them as any."""
        q = self._queries
        if "renew_leases_passing_held_rows" not in q or not self._executor.writes_alone:
            return None
        for item in items:
            _check_integer(item.epoch)
        rows = await self._executor.write_alone(
            q["renew_leases_passing_held_rows"],
            {"items": _fence_set(items), "source": RunState.RUNNING.value, "now": self._now()},
        )
        held: dict[tuple[str, int], bool] = {}
        busy: set[tuple[str, int]] = set()
        for row in rows:
            key = (row["run_id"], row["epoch"])
            if row["busy"]:
                busy.add(key)
            else:
                held[key] = bool(row["cancel_requested"])
        return [
            _HELD_ELSEWHERE
            if (item.run_id, item.epoch) in busy
            else _answer(held.get((item.run_id, item.epoch)))
            for item in items
        ]

    async def write_alone(self, items: Sequence[BatchItem]) -> list[CommitOutcome] | None:
        """The items in one statement committed on its own (``write_journal``), where
        the executor gains by it and the items renew leases, write steps and settle runs.

        None where that does not apply: an item with requests or a withdrawal, a step
        written twice in the batch, a settlement that queues its run at once (the
        transaction tells the workers there is work), renews its lease or shares its
        run with another item; and where a record or a settlement was not written as
        sent (one sent again after its commit's answer was lost, one recorded
        differently, a run changed under its own lease), which the statement tells by
        keeping nothing. The caller then writes the items in a transaction, which tells
        those apart.
        """
        q = self._queries
        if not self._executor.writes_alone:
            return None
        inserts: _StepsByKey = {}
        settles: _StepsByKey = {}
        settlements: list[tuple[str, int, Settlement]] = []
        for position, item in enumerate(items):
            _check_integer(item.epoch)
            settlement = item.settlement
            if settlement is not None:
                # One statement updates a run's row once: a settling item only fences.
                if settlement.requests or settlement.queues_now or item.lease_seconds:
                    return None
                settlements.append((item.run_id, item.epoch, settlement))
            for step in item.steps:
                key = (item.run_id, step.seq)
                if step.withdraws or key in inserts or key in settles:
                    return None
                _check_integer(step.seq)
                (settles if step.settles else inserts)[key] = (position, step)
        if settlements and len({item.run_id for item in items}) < len(items):
            return None
        if ARMED and carries_outcome(step for item in items for step in item.steps):
            # Where a transaction would have written the outcome and not committed it.
            crash_point("outcome_commit")
        try:
            [row] = await self._executor.write_alone(
                q["write_journal"],
                {
                    "items": _fence_set(items),
                    "steps": _new_step_set(items, inserts),
                    "outcomes": _outcome_set(items, settles),
                    "settlements": _settlement_set(settlements),
                    "source": RunState.RUNNING.value,
                    "started": StepStatus.STARTED.value,
                },
            )
        except StoreError as exc:
            if exc.data_error:
                return None
            raise
        held = {(run_id, epoch): cancel for run_id, epoch, cancel in json.loads(row["held"])}
        return [_answer(held.get((item.run_id, item.epoch))) for item in items]

    async def write_items(self, items: Sequence[BatchItem], now: float) -> list[CommitOutcome]:
        """Write the items with one statement per kind of change, whatever their number
        (a dialect's one-row form of a statement is run once for each row).

        The fence comes first: an item whose run is no longer ``running`` under its
        epoch writes nothing. Raises ItemRefused for an item that cannot be
        written as sent (the transaction must then be rolled back).
        """
        q = self._queries
        for item in items:
            _check_integer(item.epoch)
        in_sets = "insert_step" not in q or len(items) >= SET_STATEMENTS_AT
        held = await self._renew_leases(items, now)
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
            await self._insert_steps(items, inserts, now, in_sets)
        if settles:
            await self._settle_steps(items, settles, now, in_sets)
        if withdrawals:
            await self._withdraw_steps(items, withdrawals)
        if requests:
            await self._insert_requests(requests, now)
        if settlements:
            settled = await self.settle_runs(
                [(key[0], key[1], settlement) for key, (_, settlement) in settlements.items()], now
            )
            for key, (position, _) in settlements.items():
                if key not in settled:
                    raise ItemRefused(position, "the run changed under its own lease")
        return [_answer(held.get((item.run_id, item.epoch))) for item in items]

    async def _renew_leases(
        self, items: Sequence[BatchItem], now: float
    ) -> dict[tuple[str, int], bool]:
        """The fence: each held run's (run id, epoch), with whether a cancel was asked;
        the leases of the items with ``lease_seconds`` are renewed, the others' left."""
        q = self._queries
        source = RunState.RUNNING.value
        if "held_leases" not in q:
            fences = await self._executor.fetch_all(
                q["renew_leases"], {"items": _fence_set(items), "source": source, "now": now}
            )
            return {(row["run_id"], row["epoch"]): bool(row["cancel_requested"]) for row in fences}
        renewing = [item for item in items if item.lease_seconds]
        if renewing:
            await self._executor.execute(
                q["renew_leases"], {"items": _fence_set(renewing), "source": source, "now": now}
            )
        [row] = await self._executor.fetch_all(
            q["held_leases"], {"items": _fence_set(items), "source": source}
        )
        return {(run_id, epoch): bool(cancel) for run_id, epoch, cancel in json.loads(row["held"])}

    async def _insert_steps(
        self,
        items: Sequence[BatchItem],
        steps: _StepsByKey,
        now: float,
        in_sets: bool,
    ) -> None:
        if not in_sets:
            await self._insert_each(items, steps, now)
            return
        if "insert_step_set" in self._queries:
            await self._write_set(
                "insert_step_set",
                {"steps": _new_step_set(items, steps), "now": now},
                items,
                steps,
                "is already recorded differently",
            )
            return
        rows = await self._executor.fetch_all(
            self._queries["insert_steps"], {"steps": _new_step_set(items, steps), "now": now}
        )
        await self._check_unwritten(items, steps, rows, "is already recorded differently")

    async def _insert_each(
        self,
        items: Sequence[BatchItem],
        steps: _StepsByKey,
        now: float,
    ) -> None:
        """``_insert_steps`` for a dialect that binds rows one by one faster (SQLite)."""
        await self._write_each(
            "insert_step",
            [
                {
                    "run_id": items[position].run_id,
                    "seq": step.seq,
                    "epoch": items[position].epoch,
                    "kind": step.kind.value,
                    "tool": step.tool,
                    "call_id": step.call_id,
                    "effect": None if step.effect is None else step.effect.value,
                    "status": step.status.value,
                    "idempotency_key": step.idempotency_key,
                    "arguments_json": step.arguments_json,
                    "output_json": step.output_json,
                    "error": step.error,
                    "started_at": step.started_at,
                    "finished": step.status is not StepStatus.STARTED,
                    "source_json": step.source_json,
                    "now": now,
                }
                for position, step in steps.values()
            ],
            items,
            steps,
            "is already recorded differently",
        )

    async def _settle_steps(
        self,
        items: Sequence[BatchItem],
        steps: _StepsByKey,
        now: float,
        in_sets: bool,
    ) -> None:
        if not in_sets:
            await self._settle_each(items, steps, now)
            return
        if "settle_step_set" in self._queries:
            await self._write_set(
                "settle_step_set",
                {
                    "steps": _outcome_set(items, steps),
                    "started": StepStatus.STARTED.value,
                    "now": now,
                },
                items,
                steps,
                "has no open intent",
            )
            return
        rows = await self._executor.fetch_all(
            self._queries["settle_steps"],
            {
                "steps": _outcome_set(items, steps),
                "started": StepStatus.STARTED.value,
                "now": now,
            },
        )
        await self._check_unwritten(items, steps, rows, "has no open intent")

    async def _settle_each(
        self,
        items: Sequence[BatchItem],
        steps: _StepsByKey,
        now: float,
    ) -> None:
        """``_settle_steps`` for a dialect that binds rows one by one faster (SQLite)."""
        await self._write_each(
            "settle_step",
            [
                _outcome_row(items[position], step, started=StepStatus.STARTED.value, now=now)
                for position, step in steps.values()
            ],
            items,
            steps,
            "has no open intent",
        )

    async def _write_each(
        self,
        query: str,
        rows: Sequence[Mapping[str, object]],
        items: Sequence[BatchItem],
        steps: _StepsByKey,
        problem: str,
    ) -> None:
        """Run a one-row statement for each of ``rows``, one per step of ``steps``."""
        changed = await self._executor.execute_each(self._queries[query], rows)
        if changed != len(steps):
            # Which rows changed nothing is not told: each step is compared with its row.
            await self._check_unwritten(items, steps, (), problem)

    async def _write_set(
        self,
        query: str,
        params: Mapping[str, object],
        items: Sequence[BatchItem],
        steps: _StepsByKey,
        problem: str,
    ) -> None:
        """Run a set statement that returns nothing, for ``steps``; as ``_write_each``."""
        changed = await self._executor.execute_counted(self._queries[query], params)
        if changed != len(steps):
            await self._check_unwritten(items, steps, (), problem)

    async def _insert_requests(
        self, requests: Sequence[tuple[BatchItem, NewRequest]], now: float
    ) -> None:
        await self._executor.execute(
            self._queries["insert_requests"],
            {
                "requests": json_set(
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
                "steps": json_set(
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
                raise ItemRefused(position, f"step {step.seq} of run {key[0]} has no open intent")

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
            stored = None if row is None else step_from_row(row)
            if not step.stored_in(stored, items[position].epoch):
                raise ItemRefused(
                    position, f"step {step.seq} of run {key[0]} {problem}", data_error=True
                )

    async def settle_runs(
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
            {"settlements": _settlement_set(settlements, renewals), "now": now},
        )
        return {(row["run_id"], row["epoch"]) for row in rows}
