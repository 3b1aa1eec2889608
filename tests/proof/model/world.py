"""The simulated world: a store, workers running the run protocol, a reaper, an operator,
a submitter, and an independent ledger of every call made.

Time is whole units. Every clock (the store's, each worker's monotonic clock, the
reaper's monotonic clock) moves together when time passes; the store's can also
step alone, as NTP or a person may step a database host's clock. A worker's lease
deadline is on its own monotonic clock, from when it sent the renewal.

The worker carries out today's run protocol (``actors/run_actor.py``) one store
interaction or one call per transition: replay, provider turn, approval gate,
renewal before a call, admission, intent, call, outcome, fail-soft records with
their pending list, read-back after an unanswered commit, recovery decision,
settlement with its withdrawal. Each ``Holes`` flag puts back one bug a review
found, so that the checker's own tests can see it fail.

The whole world is plain data, copied with ``pickle``; ``World.key`` is what the
explorer merges states on.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Iterator

import attrs

from leaseward.actors.reaper import plan_reap
from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored, Unanswered
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.errors import LeasewardError
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.lifecycle import (
    Event,
    Reason,
    RecoveryPolicy,
    RunMode,
    RunState,
    StepKind,
    StepStatus,
    decide_recovery,
)
from leaseward.runtime.model import (
    Decision,
    NewRequest,
    NewRun,
    RequestKind,
    Settlement,
    StepWrite,
    arguments_digest,
    dump_json,
    request_digest,
    settlement_after,
)
from leaseward.storage.protocol import BatchItem, LeaseMark

from .store import SimStore, StoreHoles

__all__ = [
    "ADMISSION",
    "LEASE",
    "Budget",
    "Call",
    "Holes",
    "Scenario",
    "Transition",
    "World",
]

LEASE = 3
"""Units a claim or renewal grants."""
ADMISSION = 1
"""Units a lease must have left for a call to start (the keeper's interval and margin)."""
APPROVAL_TIMEOUT = 2
"""Units an approval request waits before it expires."""
STORE_STEP = 10
"""How far a step of the store's clock jumps."""
PURGE_AGE = 0.5
AGENT = "payer"
KEY = "order-1"
INPUT_JSON = dump_json({"order": 1})
# Retries wait for nothing: a requeued run is claimable at once, so that interleavings
# of retries fit in a small bound.
POLICY = RecoveryPolicy(backoff_base_seconds=0.0)
TERMINAL = (RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED, RunState.DEAD_LETTERED)


@attrs.frozen(slots=False)
class Call:
    """One call the scripted provider's first turn asks for."""

    name: str
    effect: ToolEffect
    needs_approval: bool = False

    @property
    def call_id(self) -> str:
        return f"call-{self.name}"

    @property
    def arguments_json(self) -> str:
        return dump_json({"what": self.name})


@attrs.frozen(slots=False)
class Budget:
    """How many transitions of each kind of fault or action one path may take."""

    crashes: int = 0
    pauses: int = 0
    ticks: int = 0
    lost_answers: int = 0
    delayed_answers: int = 0
    refusals: int = 0
    data_errors: int = 0
    failed_read_backs: int = 0
    store_steps: int = 0
    stops: int = 0
    decisions: int = 0
    cancels: int = 0
    resolutions: int = 0
    redrives: int = 0
    purges: int = 0
    resubmits: int = 0

    def describe(self) -> str:
        return ", ".join(f"{name} {value}" for name, value in attrs.asdict(self).items() if value)


@attrs.frozen(slots=False)
class Holes:
    """Bugs of the protocol, the reaper or the store that reviews found, put back."""

    skip_admission: bool = False
    """(1) A call starts whatever the lease has left after a pause."""
    lease_from_answer: bool = False
    """(2) The lease is measured from when a commit's answer came, not from when it was sent."""
    unanswered_as_stored: bool = False
    """(3) A commit whose answer was lost is taken as stored, without reading back."""
    read_back_renews: bool = False
    """(4) A read-back that finds records stored is taken for a renewal."""
    purge_forgets_keys: bool = False
    """(5) A purge deletes the idempotency keys of the runs it deletes."""
    late_decisions: bool = False
    """(6) A decision after its request's expiry is accepted."""
    reap_by_store_clock: bool = False
    """(7) The reaper reaps a lease whose expiry passed on the store's wall clock."""
    keep_intent_on_stop: bool = False
    """(8) A stop between an intent's commit and its call leaves the intent in the journal."""

    def store_holes(self) -> StoreHoles:
        return StoreHoles(
            purge_forgets_keys=self.purge_forgets_keys, late_decisions=self.late_decisions
        )


@attrs.frozen(slots=False)
class Scenario:
    calls: tuple[Call, ...]
    workers: int = 2
    budget: Budget = Budget()
    holes: Holes = Holes()


# -- the worker ------------------------------------------------------------------------


@attrs.define(slots=False)
class Op:
    """What a worker does next: one store interaction, one call, or one answer awaited."""

    kind: str
    """load | commit | provider | call | answer"""
    purpose: str = ""
    """For a commit: soft | intent | outcome | renew | settle."""
    steps: tuple[StepWrite, ...] = ()
    """A commit's fresh steps (the pending ones are added when it is sent); a call's row."""
    settlement: Settlement | None = None
    call: Call | None = None
    seq: int = -1
    after: Op | None = None
    """For a renewal: the call it is for."""
    alone: bool = False
    """Sent again without the pending records, which the first commit was refused with."""
    first_data_error: bool = False
    resent: tuple[StepWrite, ...] = ()
    """For an answer awaited: the pending records its commit carried."""
    origin: Op | None = None
    """For an answer awaited: the commit it answers."""
    outcome: CommitOutcome | None = None
    sent_at: float = 0.0


@attrs.define(slots=False)
class Attempt:
    """One claimed attempt of a run: the actor's knowledge, nothing of the store's."""

    run_id: str
    epoch: int
    requeues: int
    deadline: float
    """On the worker's monotonic clock: when the lease it was last told of ends."""
    op: Op
    in_doubt: bool = False
    cancel_seen: bool = False
    next_seq: int = 0
    turns: int = 0
    """Provider turns asked: 1 asked for the calls, 2 replied finally."""
    calls_seq: int | None = None
    """The seq of the turn that asked for the calls."""
    final: bool = False
    results: dict[str, StepStatus] = attrs.Factory(dict)
    open_calls: dict[str, tuple[int, ToolEffect | None]] = attrs.Factory(dict)
    decisions: dict[str, Decision] = attrs.Factory(dict)
    pending: tuple[StepWrite, ...] = ()
    dropped_turns: frozenset[int] = frozenset()
    last: tuple[ToolEffect | None, StepStatus | None] = (None, None)
    before_intent: tuple[ToolEffect | None, StepStatus | None] = (None, None)
    unstarted: StepWrite | None = None
    shielded: bool = False
    """A write call ran: its outcome is recorded before a stop takes effect."""


@attrs.define(slots=False)
class Worker:
    name: str
    clock: float = 0.0
    stopping: bool = False
    attempt: Attempt | None = None


@attrs.define(slots=False)
class Execution:
    """One call as the ledger saw it made, with what the store held at that moment."""

    worker: str
    run_id: str
    epoch: int
    call_id: str
    effect: ToolEffect | None
    """None for a provider call."""
    seq: int
    arguments_json: str
    intent_durable: bool
    lease_held: bool
    approval: tuple[Decision | None, float | None, float | None, str] | None
    """The stored request at the call: decision, decided at, expires at, digest."""


@attrs.define(slots=False)
class Reaper:
    clock: float = 0.0
    seen: dict[str, tuple[LeaseMark, float]] = attrs.Factory(dict)


@attrs.frozen(slots=False)
class Transition:
    """One move of the world; ``label`` says what was done, ``outcome`` what came of it."""

    actor: str
    action: str
    budget: str | None = None
    """The budget the move spends, if any."""


class _LeaseLost(Exception):
    """The store fenced a commit: the attempt ends with nothing more to write."""


class _NotAdmitted(Exception):
    """The lease would not last until its next renewal: the call does not start."""


def _named(outcome: CommitOutcome) -> str:
    if isinstance(outcome, Refused):
        return "refused for its data" if outcome.data_error else "refused"
    return type(outcome).__name__.lower()


def _settled(settlement: Settlement) -> str:
    reason = "" if settlement.reason is None else f" ({settlement.reason.value})"
    return f"{settlement.target.value}{reason}"


def _withdrawal(withdrawn: tuple[StepWrite, ...]) -> str:
    return "".join(f", withdrawing the intent at seq {step.seq}" for step in withdrawn)


def _after_pending(op: Op) -> bool:
    """Whether the commit must carry the pending records or not be stored at all: an
    intent, or requests, must never reach the journal without the turn that asked."""
    return op.purpose == "intent" or (op.settlement is not None and bool(op.settlement.requests))


def _describe(op: Op, resent: tuple[StepWrite, ...]) -> str:
    parts = [f"{op.purpose} record" if op.purpose != "renew" else "a renewal"]
    for step in op.steps:
        what = "provider turn" if step.kind is StepKind.PROVIDER else step.tool
        verb = "withdraw" if step.withdraws else "outcome" if step.settles else step.status.value
        parts.append(f"{what} {verb} seq {step.seq}")
    if resent:
        parts.append(f"with pending seq {', '.join(str(step.seq) for step in resent)}")
    if op.settlement is not None:
        parts.append(f"settling {_settled(op.settlement)}")
    return " ".join(parts[:1]) + (" (" + "; ".join(parts[1:]) + ")" if parts[1:] else "")


@attrs.define(slots=False)
class World:
    scenario: Scenario
    store: SimStore
    workers: list[Worker]
    reaper: Reaper = attrs.Factory(Reaper)
    ledger: list[Execution] = attrs.Factory(list)
    accepted: dict[str, list[str]] = attrs.Factory(dict)
    """The runs each idempotency key's submits were answered with."""
    purged: list[str] = attrs.Factory(list)
    abandoned: list[tuple[str, int, int]] = attrs.Factory(list)
    """Intents (run, seq, epoch) an attempt left in the journal when it settled, their
    call never started."""
    spent: dict[str, int] = attrs.Factory(dict)
    submits: int = 0

    @classmethod
    def start(cls, scenario: Scenario) -> World:
        store = SimStore(holes=scenario.holes.store_holes())
        world = cls(
            scenario=scenario,
            store=store,
            workers=[Worker(f"w{index + 1}") for index in range(scenario.workers)],
        )
        world._submit()
        return world

    def key(self) -> bytes:
        return hashlib.blake2b(pickle.dumps(self, protocol=5), digest_size=16).digest()

    def copy(self) -> World:
        copied: World = pickle.loads(pickle.dumps(self, protocol=5))
        return copied

    # -- what can happen next ---------------------------------------------------------------

    def transitions(self) -> Iterator[Transition]:
        for worker in self.workers:
            yield from self._worker_moves(worker)
        yield Transition("reaper", "pass")
        if self._left("ticks"):
            yield Transition("time", "tick", "ticks")
        if self._left("pauses"):
            yield Transition("time", "pause", "pauses")
        if self._left("store_steps"):
            yield Transition("store", "clock step", "store_steps")
        for run in self.store.runs.values():
            if run.state is RunState.WAITING_FOR_APPROVAL and self._left("decisions"):
                for request in self.store.requests[run.id]:
                    if request.pending:
                        for verb in ("approve", "reject"):
                            yield Transition(
                                "operator", f"{verb} {run.id} {request.call_id}", "decisions"
                            )
            if not run.state.terminal and self._left("cancels"):
                yield Transition("operator", f"cancel {run.id}", "cancels")
            if run.state is RunState.DEAD_LETTERED:
                if self._left("resolutions") and self.store._open_call(run.id) is not None:
                    for how in ("applied", "not-applied"):
                        yield Transition("operator", f"resolve {run.id} {how}", "resolutions")
                if self._left("redrives"):
                    yield Transition("operator", f"redrive {run.id}", "redrives")
            if run.state.terminal and self._left("purges"):
                yield Transition("operator", f"purge {run.id}", "purges")
        if self._left("resubmits"):
            yield Transition("submitter", "submit again", "resubmits")

    def _left(self, kind: str) -> bool:
        return self.spent.get(kind, 0) < getattr(self.scenario.budget, kind)

    def _worker_moves(self, worker: Worker) -> Iterator[Transition]:
        name = worker.name
        attempt = worker.attempt
        if attempt is None:
            if not worker.stopping and self._claimable():
                yield Transition(name, "claim")
                if self._left("lost_answers"):
                    yield Transition(name, "claim, answer lost", "lost_answers")
            return
        if self._left("crashes"):
            yield Transition(name, "crash", "crashes")
        if not worker.stopping and self._left("stops"):
            yield Transition(name, "stop", "stops")
        op = attempt.op
        yield Transition(name, "step")
        if op.kind != "commit" or self._stops_now(worker, attempt):
            return
        for action, kind in (
            ("step, refused", "refusals"),
            ("step, refused for its data", "data_errors"),
            ("step, stored, answer lost", "lost_answers"),
            ("step, not stored, answer lost", "lost_answers"),
            ("step, stored, answer lost, read-back fails", "failed_read_backs"),
            ("step, stored, answer delayed", "delayed_answers"),
        ):
            if self._left(kind):
                yield Transition(name, action, kind)

    def _claimable(self) -> bool:
        return any(
            run.state is RunState.QUEUED and run.available_at <= self.store.now
            for run in self.store.runs.values()
        )

    # -- making one move --------------------------------------------------------------------

    def apply(self, move: Transition) -> str:
        """Carry out ``move``; returns what happened, in words."""
        if move.budget is not None:
            self.spent[move.budget] = self.spent.get(move.budget, 0) + 1
        if move.actor == "time":
            units = 1 if move.action == "tick" else LEASE + 1
            self._pass_time(units)
            return f"{units} s pass on every clock"
        if move.actor == "store":
            self.store.now += STORE_STEP
            return f"the store's clock steps {STORE_STEP} s ahead"
        if move.actor == "reaper":
            return self._reap()
        if move.actor == "operator":
            return self._operate(move.action)
        if move.actor == "submitter":
            return self._submit()
        worker = next(w for w in self.workers if w.name == move.actor)
        return self._move_worker(worker, move.action)

    def _pass_time(self, units: float) -> None:
        self.store.now += units
        self.reaper.clock += units
        for worker in self.workers:
            worker.clock += units

    def _submit(self) -> str:
        self.submits += 1
        new = NewRun(
            id=f"run-{self.submits}",
            agent=AGENT,
            mode=RunMode.QUEUED,
            input_json=INPUT_JSON,
            idempotency_key=KEY,
            request_digest=request_digest(AGENT, json.loads(INPUT_JSON)),
        )
        try:
            run = self.store.create_run(new)
        except LeasewardError as exc:
            return f"submit with key {KEY}: {type(exc).__name__}"
        answered = self.accepted.setdefault(KEY, [])
        if run.id not in answered:
            answered.append(run.id)
        return f"submit with key {KEY} -> {run.id}"

    def _operate(self, action: str) -> str:
        verb, run_id, *rest = action.split(" ")
        try:
            if verb in ("approve", "reject"):
                decision = Decision.APPROVED if verb == "approve" else Decision.REJECTED
                self.store.decide(run_id, rest[0], decision)
            elif verb == "cancel":
                return f"{action}: {self.store.request_cancel(run_id)}"
            elif verb == "resolve":
                self.store.resolve(run_id, applied=rest[0] == "applied", operator="op")
            elif verb == "redrive":
                self.store.redrive(run_id)
            else:
                gone = self.store.purge_finished(tuple(TERMINAL), PURGE_AGE)
                self.purged.extend(
                    run for run in self.accepted.get(KEY, []) if run not in self.store.runs
                )
                return f"purge: {gone} run(s) gone"
        except LeasewardError as exc:
            return f"{action}: refused, {type(exc).__name__}"
        run = self.store.runs[run_id]
        return f"{action}: now {run.state.value}"

    def _reap(self) -> str:
        store, reaper = self.store, self.reaper
        marks = store.running_leases()
        if self.scenario.holes.reap_by_store_clock:
            due = [
                mark
                for mark in marks
                if (expiry := store.runs[mark.run_id].lease_expires_at) is not None
                and expiry < store.now
            ]
        else:
            seen: dict[str, tuple[LeaseMark, float]] = {}
            for mark in marks:
                before = reaper.seen.get(mark.run_id)
                seen[mark.run_id] = (
                    before if before is not None and before[0] == mark else (mark, reaper.clock)
                )
            reaper.seen = seen
            due = [
                mark for mark, since in seen.values() if since + mark.lease_seconds <= reaper.clock
            ]
        words = []
        for expired in store.expired_runs(due):
            settlement = plan_reap(expired, POLICY)
            if store.reap(expired, settlement):
                words.append(
                    f"reaps {expired.run.id} at epoch {expired.run.epoch}: {_settled(settlement)}"
                )
        expired_requests = store.expire_requests()
        if expired_requests:
            words.append(f"expires {expired_requests} request(s)")
        return "; ".join(words) or "reaps nothing"

    # -- the worker's protocol ----------------------------------------------------------------

    def _move_worker(self, worker: Worker, action: str) -> str:
        if action.startswith("claim"):
            return self._claim(worker, lost=action != "claim")
        attempt = worker.attempt
        assert attempt is not None
        if action == "crash":
            worker.attempt = None
            worker.stopping = False
            return f"crashes ({attempt.run_id} at epoch {attempt.epoch} abandoned)"
        if action == "stop":
            worker.stopping = True
            return "is told to stop"
        if self._stops_now(worker, attempt):
            return self._stop_now(worker, attempt)
        fault = action.removeprefix("step").removeprefix(", ")
        try:
            return self._carry_out(worker, attempt, fault)
        except _LeaseLost:
            worker.attempt = None
            return f"finds its lease of {attempt.run_id} at epoch {attempt.epoch} lost and ends"

    @staticmethod
    def _stops_now(worker: Worker, attempt: Attempt) -> bool:
        """Whether a stop takes effect at this step: anywhere but in a write's call and
        its outcome, an answer awaited, or the settlement itself."""
        op = attempt.op
        return (
            worker.stopping
            and not attempt.shielded
            and op.kind != "answer"
            and op.purpose != "settle"
        )

    def _claim(self, worker: Worker, *, lost: bool) -> str:
        sent_at = worker.clock
        (run,) = self.store.claim_runs(worker.name, 1, LEASE)
        if lost:
            return f"claims {run.id} at epoch {run.epoch}; the answer is lost"
        attempt = Attempt(
            run_id=run.id,
            epoch=run.epoch,
            requeues=run.requeues,
            deadline=sent_at + LEASE,
            op=Op("load"),
            cancel_seen=run.cancel_requested,
        )
        worker.attempt = attempt
        if run.epoch == 1:
            self._next(worker, attempt)
        return f"claims {run.id} at epoch {run.epoch}, lease until {sent_at + LEASE:g}"

    def _stop_now(self, worker: Worker, attempt: Attempt) -> str:
        """A stop cancels the attempt wherever it waits outside a write: it settles as a
        stopped attempt, withdrawing an intent whose call never started."""
        withdrawn = self._withdraw(attempt, keep=self.scenario.holes.keep_intent_on_stop)
        if attempt.last[1] is not StepStatus.STARTED:
            settlement = Settlement(Event.RELEASE)
        else:
            settlement = self._recovered(attempt, "the worker stopped during the call")
        attempt.op = Op("commit", "settle", steps=withdrawn, settlement=settlement)
        return "stops: settles " + _settled(settlement) + _withdrawal(withdrawn)

    def _withdraw(self, attempt: Attempt, *, keep: bool = False) -> tuple[StepWrite, ...]:
        intent = attempt.unstarted
        if intent is None:
            return ()
        attempt.unstarted = None
        if keep:
            return ()
        attempt.last = attempt.before_intent
        return (attrs.evolve(intent, withdraws=True),)

    def _carry_out(self, worker: Worker, attempt: Attempt, fault: str) -> str:
        op = attempt.op
        if op.kind == "load":
            self._replay(attempt)
            self._next(worker, attempt)
            return f"replays the journal of {attempt.run_id}"
        if op.kind in ("provider", "call"):
            try:
                self._admit(worker, attempt)
            except _NotAdmitted as exc:
                withdrawn = self._withdraw(attempt)
                attempt.op = Op(
                    "commit", "settle", steps=withdrawn, settlement=Settlement(Event.RELEASE)
                )
                what = "the provider" if op.call is None else op.call.name
                return f"does not call {what}: {exc}" + _withdrawal(withdrawn)
            if op.kind == "provider":
                return self._ask_provider(worker, attempt, op)
            return self._call(worker, attempt, op)
        if op.kind == "answer":
            assert op.outcome is not None and op.origin is not None
            return "gets the answer it waited for: " + self._answered(
                worker, attempt, op.origin, op.resent, op.outcome, op.sent_at
            )
        return self._commit(worker, attempt, op, fault)

    def _ask_provider(self, worker: Worker, attempt: Attempt, op: Op) -> str:
        self._execute(worker, attempt, None, op.seq)
        attempt.turns += 1
        final = attempt.turns >= 2
        step = StepWrite(
            seq=op.seq,
            kind=StepKind.PROVIDER,
            status=StepStatus.SUCCEEDED,
            output_json=dump_json({"turn": attempt.turns, "final": final}),
        )
        if final:
            attempt.final = True
        else:
            attempt.calls_seq = op.seq
        attempt.op = Op("commit", "soft", steps=(step,))
        return f"asks the provider (turn {attempt.turns}, seq {op.seq}) at epoch {attempt.epoch}"

    def _call(self, worker: Worker, attempt: Attempt, op: Op) -> str:
        call = op.call
        assert call is not None
        wrote = attempt.unstarted is not None
        attempt.unstarted = None
        self._execute(worker, attempt, call, op.seq)
        done = attrs.evolve(
            op.steps[0], status=StepStatus.SUCCEEDED, output_json=dump_json({"done": call.name})
        )
        if wrote:
            # G13: a write that ran is recorded before a stop takes effect.
            attempt.shielded = True
            attempt.op = Op(
                "commit", "outcome", steps=(attrs.evolve(done, settles=True),), call=call
            )
        else:
            attempt.op = Op("commit", "soft", steps=(done,), call=call)
        return f"calls {call.name} (seq {op.seq}) at epoch {attempt.epoch}"

    # -- commits, their answers, and what the protocol makes of them --------------------------

    def _commit(self, worker: Worker, attempt: Attempt, op: Op, fault: str) -> str:
        resent = () if op.alone else attempt.pending
        item = self._item(attempt, op, resent)
        sent_at = worker.clock
        if fault == "refused":
            outcome: CommitOutcome = Refused("a passing fault")
        elif fault == "refused for its data":
            outcome = Refused("the store refused the data", data_error=True)
        elif fault == "not stored, answer lost":
            outcome = Unanswered("the connection dropped before the commit")
        else:
            outcome = self.store.commit_item(item)
        what = f"commits {_describe(op, resent)} at epoch {attempt.epoch}"
        if fault == "stored, answer delayed":
            attempt.op = Op("answer", origin=op, resent=resent, outcome=outcome, sent_at=sent_at)
            return f"{what}: {_named(outcome)}, its answer delayed"
        if fault.startswith("stored, answer lost"):
            what = f"{what}: {_named(outcome)}, its answer lost"
            outcome = Unanswered("the answer to the commit was lost")
        else:
            what = f"{what}: {_named(outcome)}"
        read_back = not fault.endswith("read-back fails")
        return (
            what + "; " + self._answered(worker, attempt, op, resent, outcome, sent_at, read_back)
        )

    def _item(self, attempt: Attempt, op: Op, resent: tuple[StepWrite, ...]) -> BatchItem:
        return BatchItem(
            run_id=attempt.run_id,
            epoch=attempt.epoch,
            steps=(*resent, *op.steps),
            lease_seconds=0.0 if op.settlement is not None else LEASE,
            settlement=op.settlement,
        )

    def _answered(
        self,
        worker: Worker,
        attempt: Attempt,
        op: Op,
        resent: tuple[StepWrite, ...],
        outcome: CommitOutcome,
        sent_at: float,
        read_back: bool = True,
    ) -> str:
        """``RunActor._commit`` and the caller of the commit, given its answer."""
        holes = self.scenario.holes
        item = self._item(attempt, op, resent)
        renews = False
        undecided = False
        words = ""
        if isinstance(outcome, Unanswered):
            attempt.in_doubt = True
            if holes.unanswered_as_stored:
                outcome = Stored(cancel_requested=attempt.cancel_seen)
                renews = True
                words = "takes the lost answer for stored; "
            elif not read_back or (not op.steps and not holes.read_back_renews):
                undecided = True
                words = "cannot tell whether it was stored; "
            else:
                journal = {row.seq: row for row in self.store.list_steps(attempt.run_id)}
                if all(step.stored_in(journal.get(step.seq), attempt.epoch) for step in item.steps):
                    words = "reads back: stored; "
                    outcome = Stored(cancel_requested=attempt.cancel_seen)
                    renews = holes.read_back_renews
                else:
                    words = "reads back: not stored; "
                    outcome = Refused("the read-back found it not stored")
        else:
            renews = True
        if isinstance(outcome, Fenced):
            raise _LeaseLost()
        stored = isinstance(outcome, Stored)
        if stored:
            if not op.alone:
                attempt.pending = ()
            elif op.first_data_error:
                # The rest went in without them: the store refuses what they hold.
                self._drop(attempt, attempt.pending)
                attempt.pending = ()
            kept = [step for step in item.steps if not step.withdraws]
            if kept:
                newest = max(kept, key=lambda step: step.seq)
                attempt.last = (
                    newest.effect,
                    newest.status if newest.kind is StepKind.TOOL else None,
                )
            if op.settlement is None and renews:
                assert isinstance(outcome, Stored)
                start = worker.clock if holes.lease_from_answer else sent_at
                attempt.deadline = start + LEASE
                attempt.in_doubt = False
                attempt.cancel_seen = outcome.cancel_requested
                words += f"lease until {attempt.deadline:g}; "
        elif resent and not op.alone and not _after_pending(op):
            data_error = isinstance(outcome, Refused) and outcome.data_error
            attempt.op = attrs.evolve(op, alone=True, first_data_error=data_error)
            return words + "sends its own records again without the pending ones"
        return words + self._then(worker, attempt, op, outcome, undecided=undecided)

    def _then(
        self, worker: Worker, attempt: Attempt, op: Op, outcome: CommitOutcome, *, undecided: bool
    ) -> str:
        stored = isinstance(outcome, Stored)
        if op.purpose == "settle":
            worker.attempt = None
            if not stored:
                return "its settlement is not stored (the reaper will recover the run)"
            self._note_abandoned(attempt)
            assert op.settlement is not None
            return f"settled {_settled(op.settlement)}"
        if op.purpose == "soft":
            (step,) = op.steps
            if op.call is not None:
                attempt.results[op.call.call_id] = step.status
            if not stored:
                if isinstance(outcome, Refused) and outcome.data_error:
                    self._drop(attempt, (step,))
                    words = "drops the record"
                else:
                    attempt.pending = (*attempt.pending, step)
                    words = "keeps the record pending"
            else:
                words = "recorded"
            self._next(worker, attempt)
            return words
        if op.purpose == "intent":
            if not stored:
                if not undecided:
                    attempt.unstarted = None
                self._fail(attempt, "the intent could not be stored")
                return "the intent is not stored: the attempt fails"
            self._before_call(
                worker, attempt, Op("call", steps=op.steps, call=op.call, seq=op.steps[0].seq)
            )
            return "the intent is durable"
        if op.purpose == "outcome":
            attempt.shielded = False
            if not stored:
                self._fail(attempt, "the outcome could not be recorded", audit=True)
                return "the outcome is not stored: AuditPersistenceFailed"
            assert op.call is not None
            attempt.results[op.call.call_id] = StepStatus.SUCCEEDED
            self._next(worker, attempt)
            return "the outcome is durable"
        assert op.purpose == "renew" and op.after is not None
        if not stored:
            withdrawn = self._withdraw(attempt)
            attempt.op = Op(
                "commit", "settle", steps=withdrawn, settlement=Settlement(Event.RELEASE)
            )
            return "not renewed: the call is not admitted" + _withdrawal(withdrawn)
        attempt.op = op.after
        return "renewed"

    def _drop(self, attempt: Attempt, steps: tuple[StepWrite, ...]) -> None:
        """Fail-soft records given up: a write the dropped turn asked for cannot be recorded."""
        attempt.dropped_turns = attempt.dropped_turns | {
            step.seq for step in steps if step.kind is StepKind.PROVIDER
        }

    def _note_abandoned(self, attempt: Attempt) -> None:
        """Intents of this attempt still open when it settled, their call never started."""
        started = {(e.run_id, e.seq, e.epoch) for e in self.ledger}
        for row in self.store.steps.get(attempt.run_id, {}).values():
            key = (attempt.run_id, row.seq, row.epoch)
            if (
                row.status is StepStatus.STARTED
                and row.epoch == attempt.epoch
                and key not in started
            ):
                self.abandoned.append(key)

    def _admit(self, worker: Worker, attempt: Attempt) -> None:
        if self.scenario.holes.skip_admission:
            return
        if attempt.in_doubt:
            raise _NotAdmitted("the store has not answered whether the lease holds")
        left = attempt.deadline - worker.clock
        if left < ADMISSION:
            raise _NotAdmitted(f"the lease has {left:g} s left")

    def _execute(self, worker: Worker, attempt: Attempt, call: Call | None, seq: int) -> None:
        store = self.store
        run = store.runs.get(attempt.run_id)
        held = run is not None and run.state is RunState.RUNNING and run.epoch == attempt.epoch
        row = store.steps.get(attempt.run_id, {}).get(seq)
        durable = (
            row is not None
            and row.status is StepStatus.STARTED
            and row.epoch == attempt.epoch
            and call is not None
            and row.call_id == call.call_id
        )
        approval = None
        if call is not None and call.needs_approval:
            named = [r for r in store.requests.get(attempt.run_id, []) if r.call_id == call.call_id]
            approval = (None, None, None, "")
            if named:
                request = max(named, key=lambda r: r.seq)
                approval = (
                    request.decision,
                    request.decided_at,
                    request.expires_at,
                    request.arguments_digest,
                )
        self.ledger.append(
            Execution(
                worker=worker.name,
                run_id=attempt.run_id,
                epoch=attempt.epoch,
                call_id="provider" if call is None else call.call_id,
                effect=None if call is None else call.effect,
                seq=seq,
                arguments_json="" if call is None else call.arguments_json,
                intent_durable=durable,
                lease_held=held,
                approval=approval,
            )
        )

    def _replay(self, attempt: Attempt) -> None:
        """The journal and the requests, as ``rebuild`` and the actor's start read them."""
        rows = self.store.list_steps(attempt.run_id)
        for row in rows:
            attempt.next_seq = row.seq + 1
            if row.kind is StepKind.PROVIDER:
                turn = row.output["turn"]
                attempt.turns = max(attempt.turns, turn)
                if row.output["final"]:
                    attempt.final = True
                else:
                    attempt.calls_seq = row.seq
                    attempt.open_calls.clear()
                continue
            assert row.call_id is not None
            if row.status is StepStatus.STARTED:
                attempt.open_calls[row.call_id] = (row.seq, row.effect)
            else:
                attempt.results[row.call_id] = row.status
                attempt.open_calls.pop(row.call_id, None)
        if rows:
            newest = rows[-1]
            attempt.last = (newest.effect, newest.status if newest.kind is StepKind.TOOL else None)
        for request in self.store.requests.get(attempt.run_id, []):
            if request.decision is not None:
                attempt.decisions[request.call_id] = request.decision

    def _take_seq(self, attempt: Attempt) -> int:
        seq = attempt.next_seq
        attempt.next_seq += 1
        return seq

    def _next(self, worker: Worker, attempt: Attempt) -> None:
        """The boundary: what the attempt does next, decided from what it knows."""
        if attempt.final:
            settlement = Settlement(Event.COMPLETE, Reason.COMPLETED, result_json='"done"')
            attempt.op = Op("commit", "settle", settlement=settlement)
            return
        if attempt.cancel_seen:
            attempt.op = Op(
                "commit", "settle", settlement=Settlement(Event.CANCEL_RUNNING, Reason.CANCELLED)
            )
            return
        if worker.stopping:
            attempt.op = Op("commit", "settle", settlement=Settlement(Event.RELEASE))
            return
        waiting = [c for c in self.scenario.calls if c.call_id not in attempt.results]
        if attempt.calls_seq is None or not waiting:
            self._before_call(worker, attempt, Op("provider", seq=self._take_seq(attempt)))
            return
        call = waiting[0]
        open_attempt = attempt.open_calls.get(call.call_id)
        decision = attempt.decisions.get(call.call_id)
        if open_attempt is not None and (
            call.effect is ToolEffect.NON_IDEMPOTENT_WRITE or decision is Decision.APPROVED
        ):
            settlement = Settlement(
                Event.DEAD_LETTER,
                Reason.INTERRUPTED_WRITE,
                error=f"call {call.call_id} was interrupted; its outcome is unknown",
            )
            attempt.op = Op("commit", "settle", settlement=settlement)
            return
        base = StepWrite(
            seq=-1,
            kind=StepKind.TOOL,
            status=StepStatus.STARTED,
            tool=call.name,
            call_id=call.call_id,
            effect=call.effect,
            idempotency_key=f"{attempt.run_id}:{call.call_id}",
            arguments_json=call.arguments_json,
        )
        approved = False
        if call.needs_approval and open_attempt is None:
            if decision is None:
                if attempt.calls_seq in attempt.dropped_turns:
                    self._fail(attempt, "the turn that asked for the call was not recorded")
                    return
                request = NewRequest(
                    seq=attempt.calls_seq,
                    position=self.scenario.calls.index(call),
                    call_id=call.call_id,
                    kind=RequestKind.APPROVAL,
                    tool=call.name,
                    effect=call.effect,
                    arguments_json=call.arguments_json,
                    arguments_digest=arguments_digest(json.loads(call.arguments_json)),
                    timeout_seconds=APPROVAL_TIMEOUT,
                )
                settlement = Settlement(Event.AWAIT_APPROVAL, requests=(request,))
                attempt.op = Op("commit", "settle", settlement=settlement)
                return
            if decision is not Decision.APPROVED:
                refused = attrs.evolve(
                    base,
                    seq=self._take_seq(attempt),
                    status=StepStatus.FAILED,
                    output_json=dump_json({"error": decision.value}),
                    error=f"the call was {decision.value}",
                )
                attempt.op = Op("commit", "soft", steps=(refused,), call=call)
                return
            approved = True
        base = attrs.evolve(base, seq=self._take_seq(attempt))
        if call.effect.is_write or approved:
            if attempt.calls_seq in attempt.dropped_turns:
                self._fail(attempt, "the turn that asked for the call was not recorded")
                return
            attempt.before_intent = attempt.last
            attempt.unstarted = base
            attempt.op = Op("commit", "intent", steps=(base,), call=call, seq=base.seq)
            return
        self._before_call(worker, attempt, Op("call", steps=(base,), call=call, seq=base.seq))

    def _before_call(self, worker: Worker, attempt: Attempt, call: Op) -> None:
        """Renew first if the lease would not last until the keeper's next renewal."""
        if attempt.in_doubt or attempt.deadline - worker.clock < ADMISSION:
            attempt.op = Op("commit", "renew", after=call)
        else:
            attempt.op = call

    def _fail(self, attempt: Attempt, error: str, *, audit: bool = False) -> None:
        """An attempt that failed in-process: withdraw, then settle by the recovery rules."""
        withdrawn = self._withdraw(attempt)
        recovery = decide_recovery(
            mode=RunMode.QUEUED,
            requeues=attempt.requeues,
            last_effect=attempt.last[0],
            last_status=attempt.last[1],
            failure_class=FailureClass.UNKNOWN if audit else FailureClass.CONNECTION,
            reaped=False,
            audit_failed=audit,
            policy=POLICY,
        )
        settlement = settlement_after(
            recovery,
            failure_class=FailureClass.UNKNOWN if audit else FailureClass.CONNECTION,
            error=error,
            cancel_requested=attempt.cancel_seen,
        )
        attempt.op = Op("commit", "settle", steps=withdrawn, settlement=settlement)

    def _recovered(self, attempt: Attempt, error: str) -> Settlement:
        recovery = decide_recovery(
            mode=RunMode.QUEUED,
            requeues=attempt.requeues,
            last_effect=attempt.last[0],
            last_status=attempt.last[1],
            failure_class=FailureClass.CONNECTION,
            reaped=True,
            audit_failed=False,
            policy=POLICY,
        )
        return settlement_after(
            recovery,
            failure_class=FailureClass.CONNECTION,
            error=error,
            cancel_requested=attempt.cancel_seen,
        )
