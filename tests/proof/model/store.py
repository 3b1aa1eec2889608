"""A store in memory, with the SQL store's fencing rules, on a clock that only moves when told.

Each method mirrors one operation of ``storage/store.py`` and its named queries,
synchronously: a commit is one step of the simulated world, all or nothing. The
rules it must share with the real stores (which commit is stored, fenced or
refused; which reap, decision, redrive, resolution or submit is accepted) are
pinned by the scenario tables of tests/integration/test_model_conformance.py,
which run against this store and against SQLite and PostgreSQL alike.

The state is plain data: ``copy`` makes an independent store (journal rows are
replaced, never changed, so copies share them) and ``fingerprint`` is what the
explorer merges equal states on.
Flags re-introduce holes that reviews found, for the checker's own tests.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import attrs

from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import load_json
from leaseward.runtime.errors import (
    IdempotencyKeyConflict,
    IllegalTransition,
    RequestExpired,
    RequestNotFound,
    RunNotFound,
    RunPurged,
)
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.human_requests import Decision, HumanRequest, RequestKind
from leaseward.runtime.journal import StepInfo, StepWrite
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
from leaseward.runtime.retention import PurgedRun
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.storage.protocol import BatchItem, ExpiredRun, LeaseMark

__all__ = ["SimKey", "SimRequest", "SimRun", "SimStep", "SimStore", "StoreHoles"]


@attrs.frozen(slots=False)
class StoreHoles:
    """Bugs the real store once had (or could have), put back on purpose."""

    purge_forgets_keys: bool = False
    """A purge deletes the idempotency keys of the runs it deletes."""
    late_decisions: bool = False
    """A decision is taken however long after its request's expiry it comes."""


@attrs.define(slots=False)
class SimRun:
    id: str
    agent: str
    mode: RunMode
    state: RunState
    input_json: str
    epoch: int
    created_at: float
    available_at: float
    updated_at: float
    idempotency_key: str | None = None
    request_digest: str | None = None
    reason: Reason | None = None
    failure_class: FailureClass | None = None
    result_json: str | None = None
    error: str | None = None
    requeues: int = 0
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    lease_seconds: float | None = None
    renewals: int = 0
    cancel_requested: bool = False
    finished_at: float | None = None

    def record(self) -> RunRecord:
        return RunRecord(
            id=self.id,
            agent=self.agent,
            mode=self.mode,
            state=self.state,
            reason=self.reason,
            failure_class=self.failure_class,
            input=load_json(self.input_json),
            result=load_json(self.result_json),
            error=self.error,
            epoch=self.epoch,
            requeues=self.requeues,
            lease_owner=self.lease_owner,
            lease_expires_at=self.lease_expires_at,
            available_at=self.available_at,
            cancel_requested=self.cancel_requested,
            created_at=self.created_at,
            updated_at=self.updated_at,
            finished_at=self.finished_at,
            idempotency_key=self.idempotency_key,
        )


@attrs.define(slots=False)
class SimStep:
    seq: int
    epoch: int
    kind: StepKind
    status: StepStatus
    tool: str | None
    call_id: str | None
    effect: ToolEffect | None
    idempotency_key: str | None
    arguments_json: str | None
    output_json: str | None
    error: str | None
    started_at: float
    finished_at: float | None

    def info(self, run_id: str) -> StepInfo:
        return StepInfo(
            run_id=run_id,
            seq=self.seq,
            epoch=self.epoch,
            kind=self.kind,
            tool=self.tool,
            call_id=self.call_id,
            effect=self.effect,
            status=self.status,
            idempotency_key=self.idempotency_key,
            arguments=load_json(self.arguments_json),
            output=load_json(self.output_json),
            error=self.error,
            started_at=self.started_at,
            finished_at=self.finished_at,
        )

    def same_as(self, epoch: int, step: StepWrite) -> bool:
        """``_same_step`` of the SQL store: whether this row is what ``step`` wrote."""
        if (epoch, step.status, step.output_json, step.error) != (
            self.epoch,
            self.status,
            self.output_json,
            self.error,
        ):
            return False
        if step.settles:
            return True
        return (
            step.kind,
            step.tool,
            step.call_id,
            step.effect,
            step.idempotency_key,
            step.arguments_json,
        ) == (
            self.kind,
            self.tool,
            self.call_id,
            self.effect,
            self.idempotency_key,
            self.arguments_json,
        )


@attrs.define(slots=False)
class SimRequest:
    seq: int
    position: int
    call_id: str
    kind: RequestKind
    tool: str
    effect: ToolEffect
    arguments_json: str
    arguments_digest: str
    epoch: int
    requested_at: float
    expires_at: float | None
    decision: Decision | None = None
    decided_at: float | None = None

    @property
    def pending(self) -> bool:
        return self.decision is None


@attrs.define(slots=False)
class SimKey:
    run_id: str
    agent: str
    request_digest: str | None
    created_at: float
    purged_at: float | None = None
    final_state: RunState | None = None
    final_reason: Reason | None = None
    finished_at: float | None = None


class _Refusal(Exception):
    """One item cannot be written as sent: nothing of it is (the SQL's _ItemRefused)."""

    def __init__(self, error: str, *, data_error: bool = False) -> None:
        super().__init__(error)
        self.outcome = Refused(error, data_error=data_error)


@attrs.define(slots=False)
class SimStore:
    now: float = 0.0
    """The store's clock: SQLite's injected clock, PostgreSQL's database clock."""
    holes: StoreHoles = StoreHoles()
    runs: dict[str, SimRun] = attrs.Factory(dict)
    steps: dict[str, dict[int, SimStep]] = attrs.Factory(dict)
    requests: dict[str, list[SimRequest]] = attrs.Factory(dict)
    keys: dict[str, SimKey] = attrs.Factory(dict)

    # -- submits and claims ---------------------------------------------------------------

    def create_run(self, new: NewRun) -> RunRecord:
        """A queued run (interactive runs are not simulated), or the run of its key."""
        if new.mode is not RunMode.QUEUED:
            raise NotImplementedError("the simulation holds queued runs only")
        if new.idempotency_key is not None:
            key = self.keys.get(new.idempotency_key)
            if key is not None:
                if key.request_digest != new.request_digest:
                    raise IdempotencyKeyConflict(
                        f"the idempotency key {new.idempotency_key!r} was already used by run "
                        f"{key.run_id}"
                    )
                run = self.runs.get(key.run_id)
                if run is not None:
                    return run.record()
                raise RunPurged(self._purged(new.idempotency_key, key))
            self.keys[new.idempotency_key] = SimKey(new.id, new.agent, new.request_digest, self.now)
        run = SimRun(
            id=new.id,
            agent=new.agent,
            mode=new.mode,
            state=TRANSITIONS[Event.SUBMIT][1],
            input_json=new.input_json,
            epoch=0,
            created_at=self.now,
            available_at=self.now,
            updated_at=self.now,
            idempotency_key=new.idempotency_key,
            request_digest=new.request_digest,
        )
        self.runs[run.id] = run
        self.steps[run.id] = {}
        self.requests[run.id] = []
        return run.record()

    def claim_runs(self, worker_id: str, limit: int, lease_seconds: float) -> list[SimRun]:
        """Lease up to ``limit`` ready runs, oldest first (every agent's)."""
        ready = sorted(
            (
                run
                for run in self.runs.values()
                if run.state is RunState.QUEUED and run.available_at <= self.now
            ),
            key=lambda run: (run.available_at, run.created_at),
        )[:limit]
        for run in ready:
            run.state = TRANSITIONS[Event.CLAIM][1]
            run.epoch += 1
            run.lease_owner = worker_id
            run.lease_expires_at = self.now + lease_seconds
            run.lease_seconds = lease_seconds
            run.renewals += 1
            run.updated_at = self.now
        return ready

    # -- the journal: one item, all or nothing, fenced on its epoch -------------------------

    def commit_item(self, item: BatchItem) -> CommitOutcome:
        """The SQL store's ``_write_items`` for one item.

        The fence is the run's epoch and state alone, as ``renew_leases`` has it: a
        lease past its expiry on the store's clock is still held until a reaper
        that watched it unrenewed reaps it (or a claim takes the run again).
        """
        run = self.runs.get(item.run_id)
        if run is None or run.epoch != item.epoch or run.state is not RunState.RUNNING:
            return Fenced()
        saved = (attrs.evolve(run), dict(self.steps[run.id]), list(self.requests[run.id]))
        try:
            self._apply(run, item)
        except _Refusal as refusal:
            self.runs[run.id], self.steps[run.id], self.requests[run.id] = saved
            return refusal.outcome
        return Stored(cancel_requested=run.cancel_requested)

    def _apply(self, run: SimRun, item: BatchItem) -> None:
        if item.lease_seconds:
            run.lease_expires_at = self.now + item.lease_seconds
            run.lease_seconds = item.lease_seconds
            run.renewals += 1
            run.updated_at = self.now
        journal = self.steps[run.id]
        # Copied before a change: the saved journal of a refused item shares the rows.
        inserts = [s for s in item.steps if not s.settles and not s.withdraws]
        settles = [s for s in item.steps if s.settles and not s.withdraws]
        withdrawals = [s for s in item.steps if s.withdraws]
        for step in inserts:
            row = journal.get(step.seq)
            if row is None:
                journal[step.seq] = SimStep(
                    seq=step.seq,
                    epoch=item.epoch,
                    kind=step.kind,
                    status=step.status,
                    tool=step.tool,
                    call_id=step.call_id,
                    effect=step.effect,
                    idempotency_key=step.idempotency_key,
                    arguments_json=step.arguments_json,
                    output_json=step.output_json,
                    error=step.error,
                    started_at=self.now if step.started_at is None else step.started_at,
                    finished_at=None if step.status is StepStatus.STARTED else self.now,
                )
            elif not row.same_as(item.epoch, step):
                raise _Refusal(
                    f"step {step.seq} of run {run.id} is already recorded differently",
                    data_error=True,
                )
        for step in settles:
            row = journal.get(step.seq)
            if row is not None and row.epoch == item.epoch and row.status is StepStatus.STARTED:
                journal[step.seq] = attrs.evolve(
                    row,
                    status=step.status,
                    output_json=step.output_json,
                    error=step.error,
                    finished_at=self.now,
                )
            elif row is None or not row.same_as(item.epoch, step):
                raise _Refusal(
                    f"step {step.seq} of run {run.id} has no open intent", data_error=True
                )
        for step in withdrawals:
            row = journal.get(step.seq)
            if row is not None and row.epoch == item.epoch and row.status is StepStatus.STARTED:
                del journal[step.seq]
            elif row is not None:
                raise _Refusal(f"step {step.seq} of run {run.id} has no open intent")
        settlement = item.settlement
        if settlement is None:
            return
        for request in settlement.requests:
            self.requests[run.id].append(
                SimRequest(
                    seq=request.seq,
                    position=request.position,
                    call_id=request.call_id,
                    kind=request.kind,
                    tool=request.tool,
                    effect=request.effect,
                    arguments_json=request.arguments_json,
                    arguments_digest=request.arguments_digest,
                    epoch=item.epoch,
                    requested_at=self.now,
                    expires_at=None
                    if request.timeout_seconds is None
                    else self.now + request.timeout_seconds,
                )
            )
        if not self._settle(run, item.epoch, settlement, renewals=None):
            raise _Refusal("the run changed under its own lease")

    def _settle(
        self, run: SimRun, epoch: int, settlement: Settlement, *, renewals: int | None
    ) -> bool:
        """``settle_runs``: fenced on epoch and source state, a reap also on renewals."""
        if run.epoch != epoch or run.state is not source_state(settlement.event):
            return False
        if renewals is not None and run.renewals != renewals:
            return False
        target = settlement.target
        run.state = target
        run.reason = settlement.reason
        run.failure_class = settlement.failure_class
        run.result_json = settlement.result_json
        run.error = settlement.error
        run.requeues += 1 if settlement.spends_retry else 0
        run.available_at = self.now + settlement.delay_seconds
        run.lease_owner = None
        run.lease_expires_at = None
        run.updated_at = self.now
        run.finished_at = self.now if target.terminal else None
        return True

    def list_steps(self, run_id: str) -> list[StepInfo]:
        journal = self.steps.get(run_id, {})
        return [journal[seq].info(run_id) for seq in sorted(journal)]

    def last_step(self, run_id: str) -> SimStep | None:
        journal = self.steps.get(run_id, {})
        return journal[max(journal)] if journal else None

    def list_requests(self, run_id: str) -> list[HumanRequest]:
        run = self.runs[run_id]
        return [
            HumanRequest(
                run_id=run_id,
                agent=run.agent,
                seq=r.seq,
                position=r.position,
                call_id=r.call_id,
                kind=r.kind,
                tool=r.tool,
                effect=r.effect,
                arguments=load_json(r.arguments_json),
                arguments_digest=r.arguments_digest,
                epoch=r.epoch,
                requested_at=r.requested_at,
                expires_at=r.expires_at,
                decision=r.decision,
                operator=None,
                note=None,
                value=None,
                decided_at=r.decided_at,
                age_seconds=max(0.0, self.now - r.requested_at),
            )
            for r in sorted(self.requests[run_id], key=lambda r: (r.seq, r.position))
        ]

    def get_run(self, run_id: str) -> RunRecord | None:
        run = self.runs.get(run_id)
        return None if run is None else run.record()

    # -- cancels ------------------------------------------------------------------------

    def request_cancel(self, run_id: str) -> str:
        """``cancelled``, ``requested`` or ``already_finished`` (CancelOutcome's values)."""
        run = self.runs.get(run_id)
        if run is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        if run.state.terminal:
            return "already_finished"
        run.updated_at = self.now
        if run.state is RunState.RUNNING:
            run.cancel_requested = True
            return "requested"
        run.state = RunState.CANCELLED
        run.reason = Reason.CANCELLED
        run.lease_owner = None
        run.lease_expires_at = None
        run.finished_at = self.now
        return "cancelled"

    # -- the reaper's reads and its fenced reap --------------------------------------------

    def running_leases(self) -> list[LeaseMark]:
        return [
            LeaseMark(run.id, run.epoch, run.renewals, float(run.lease_seconds or 0.0))
            for run in self.runs.values()
            if run.state is RunState.RUNNING
        ]

    def expired_runs(self, marks: list[LeaseMark]) -> list[ExpiredRun]:
        found = []
        for mark in marks:
            run = self.runs.get(mark.run_id)
            if run is None or run.state is not RunState.RUNNING:
                continue
            if (run.epoch, run.renewals) != (mark.epoch, mark.renewals):
                continue
            last = self.last_step(run.id)
            found.append(
                ExpiredRun(
                    run=run.record(),
                    last_effect=None if last is None else last.effect,
                    last_status=None if last is None else last.status,
                    renewals=mark.renewals,
                )
            )
        return found

    def reap(self, expired: ExpiredRun, settlement: Settlement) -> bool:
        run = self.runs.get(expired.run.id)
        if run is None:
            return False
        return self._settle(run, expired.run.epoch, settlement, renewals=expired.renewals)

    # -- requests for people ----------------------------------------------------------------

    def decide(self, run_id: str, call_id: str, decision: Decision) -> SimRequest:
        """``decide`` for a named call; raises as the SQL store does."""
        run = self.runs.get(run_id)
        if run is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        kind = RequestKind.INPUT if decision is Decision.ANSWERED else RequestKind.APPROVAL
        named = [r for r in self.requests[run_id] if r.call_id == call_id]
        if not named:
            raise RequestNotFound(f"run {run_id} has no request for call {call_id!r}")
        request = max(named, key=lambda r: r.seq)
        if request.kind is not kind:
            raise IllegalTransition(f"call {call_id} asks for {request.kind.value}")
        if request.decision is Decision.EXPIRED and request.expires_at is not None:
            raise RequestExpired(run_id, call_id, request.expires_at)
        if not request.pending:
            raise IllegalTransition(f"call {call_id} was already {request.decision}")
        if run.state is not kind.waiting_state:
            raise IllegalTransition(f"run {run_id} is {run.state.value}")
        in_time = request.expires_at is None or request.expires_at >= self.now
        if in_time or self.holes.late_decisions:
            request.decision = decision
            request.decided_at = self.now
            self._requeue_decided(run, kind)
            return request
        self._expire_waiting(run)
        assert request.expires_at is not None
        raise RequestExpired(run_id, call_id, request.expires_at)

    def expire_requests(self) -> int:
        """Reject the requests whose expiry passed; how many."""
        waiting = RequestKind.APPROVAL.waiting_state
        return sum(self._expire_waiting(run) for run in self.runs.values() if run.state is waiting)

    def _expire_waiting(self, run: SimRun) -> int:
        expired = 0
        for request in self.requests[run.id]:
            if request.pending and request.expires_at is not None and request.expires_at < self.now:
                request.decision = Decision.EXPIRED
                request.decided_at = self.now
                expired += 1
        self._requeue_decided(run, RequestKind.APPROVAL)
        return expired

    def _requeue_decided(self, run: SimRun, kind: RequestKind) -> None:
        if run.state is not source_state(kind.resume_event):
            return
        if any(r.pending for r in self.requests[run.id]):
            return
        run.state = TRANSITIONS[kind.resume_event][1]
        run.available_at = self.now
        run.updated_at = self.now

    # -- operator actions ---------------------------------------------------------------------

    def open_call(self, run_id: str) -> SimStep | None:
        last = self.last_step(run_id)
        return last if last is not None and last.status is StepStatus.STARTED else None

    def _reopen(self, run: SimRun, event: Event, *, reset_requeues: bool) -> None:
        run.state = TRANSITIONS[event][1]
        run.reason = None
        run.failure_class = None
        run.error = None
        run.requeues = 0 if reset_requeues else run.requeues
        run.epoch += 1
        run.available_at = self.now
        run.lease_owner = None
        run.lease_expires_at = None
        run.cancel_requested = False
        run.updated_at = self.now
        run.finished_at = None

    def redrive(self, run_id: str) -> None:
        run = self.runs.get(run_id)
        if run is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        redrivable = run.state is RunState.DEAD_LETTERED and (
            run.reason in REDRIVABLE_REASONS
            or (run.reason is Reason.INTERRUPTED_WRITE and self.open_call(run_id) is None)
        )
        if not redrivable:
            raise IllegalTransition(f"run {run_id} cannot be redriven")
        self._reopen(run, Event.REDRIVE, reset_requeues=True)

    def resolve(self, run_id: str, *, applied: bool, operator: str) -> None:
        run = self.runs.get(run_id)
        if run is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        if run.state is not RunState.DEAD_LETTERED or run.reason is not Reason.INTERRUPTED_WRITE:
            raise IllegalTransition(f"run {run_id} waits for no resolution")
        last = self.open_call(run_id)
        if last is None:
            raise IllegalTransition(f"run {run_id} has no interrupted call to resolve")
        output = {
            "resolution": "applied" if applied else "not_applied",
            "resolved_by": operator,
            "note": None,
        }
        self.steps[run_id][last.seq] = attrs.evolve(
            last,
            status=StepStatus.SUCCEEDED if applied else StepStatus.FAILED,
            output_json=json.dumps(output, separators=(",", ":")),
            error=None if applied else "the operator recorded that the call did not apply",
            finished_at=self.now,
        )
        self._reopen(run, Event.RESOLVE, reset_requeues=False)

    def purge_finished(self, states: tuple[RunState, ...], older_than_seconds: float) -> int:
        """Delete the finished runs of ``states`` older than the age; how many."""
        cutoff = self.now - older_than_seconds
        gone = [
            run
            for run in self.runs.values()
            if run.state in states and run.finished_at is not None and run.finished_at < cutoff
        ]
        for run in gone:
            del self.runs[run.id]
            del self.steps[run.id]
            del self.requests[run.id]
            if run.idempotency_key is None:
                continue
            if self.holes.purge_forgets_keys:
                del self.keys[run.idempotency_key]
                continue
            key = self.keys[run.idempotency_key]
            key.purged_at = self.now
            key.final_state = run.state
            key.final_reason = run.reason
            key.finished_at = run.finished_at
        return len(gone)

    def forget_keys(self, older_than_seconds: float) -> int:
        cutoff = self.now - older_than_seconds
        gone = [
            name
            for name, key in self.keys.items()
            if key.purged_at is not None and key.created_at < cutoff
        ]
        for name in gone:
            del self.keys[name]
        return len(gone)

    def _purged(self, name: str, key: SimKey) -> PurgedRun:
        assert key.final_state is not None and key.finished_at is not None
        assert key.purged_at is not None
        return PurgedRun(
            run_id=key.run_id,
            agent=key.agent,
            idempotency_key=name,
            state=key.final_state,
            reason=key.final_reason,
            finished_at=key.finished_at,
            purged_at=key.purged_at,
        )

    def copy(self) -> SimStore:
        """An independent store: journal rows are replaced, never changed, so they are shared."""
        copied = copy.copy(self)
        copied.runs = {run_id: copy.copy(run) for run_id, run in self.runs.items()}
        copied.steps = {run_id: dict(journal) for run_id, journal in self.steps.items()}
        copied.requests = {
            run_id: [copy.copy(request) for request in requests]
            for run_id, requests in self.requests.items()
        }
        copied.keys = {name: copy.copy(key) for name, key in self.keys.items()}
        return copied

    def fingerprint(self) -> tuple[Any, ...]:
        """Equal for equal stores, and hashable."""
        return (
            self.now,
            tuple((run_id, *vars(run).values()) for run_id, run in self.runs.items()),
            tuple(
                (run_id, tuple(tuple(vars(row).values()) for row in journal.values()))
                for run_id, journal in self.steps.items()
            ),
            tuple(
                (run_id, tuple(tuple(vars(request).values()) for request in requests))
                for run_id, requests in self.requests.items()
            ),
            tuple((name, *vars(key).values()) for name, key in self.keys.items()),
        )
