"""The simulated world: a store, workers that drive the real RunMachine, a reaper, an
operator, a submitter, and an independent ledger of every call made.

Time is whole units. Every clock (the store's, each worker's monotonic clock, the
reaper's monotonic clock) moves together when time passes; the store's can also
step alone, as NTP or a person may step a database host's clock.

A worker is an interpreter of ``runtime/machine/``, as ``actors/run_actor.py``
is: it carries out the action the machine awaits (one store interaction, or an
admission check and the call it admits) and feeds back the event that answers
it. The provider is scripted (one turn asking for every call of the scenario,
then a final reply) and each call is written to the ledger when it starts.

The whole world is plain data: ``World.copy`` makes an independent one (sharing the
machines, which a worker copies before it feeds one), and ``World.fingerprint`` is
what the explorer merges equal states on.
"""

from __future__ import annotations

import copy
import copyreg
import hashlib
import io
import json
import pickle
import weakref
from collections.abc import Iterator
from typing import Any

import attrs

from leaseward.actors.reaper import plan_reap
from leaseward.runtime.agents import Agent
from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored, Unanswered
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import dump_json, request_digest
from leaseward.runtime.errors import LeasewardError
from leaseward.runtime.human_requests import Decision
from leaseward.runtime.lifecycle import RunMode, RunState, StepStatus
from leaseward.runtime.machine import (
    AdmissionCheck,
    AskProvider,
    CallTool,
    Cancelled,
    CheckAdmission,
    Command,
    Commit,
    Committed,
    CrashPoint,
    JournalLoaded,
    JournalRead,
    LoadJournal,
    Log,
    MachineEvent,
    Metric,
    ProviderReplied,
    ReadBack,
    ReadFailed,
    RecordIntent,
    RunMachine,
    Settle,
    Stop,
    ToolReturned,
)
from leaseward.runtime.runs import NewRun
from leaseward.runtime.settlements import Settlement
from leaseward.storage.protocol import BatchItem, LeaseMark

from .agent import agent_for, machine_for, reply_to
from .scenario import (
    ADMISSION,
    AGENT,
    INPUT_JSON,
    KEY,
    LEASE,
    POLICY,
    PURGE_AGE,
    STORE_STEP,
    TERMINAL,
    Call,
    Scenario,
)
from .store import SimStore

__all__ = ["Execution", "Transition", "World"]


def _agent_by_calls(calls: tuple[Call, ...]) -> Agent:
    return agent_for(calls)


_MACHINE_KEYS: weakref.WeakKeyDictionary[RunMachine, bytes] = weakref.WeakKeyDictionary()


def _machine_key(machine: RunMachine | None, calls: tuple[Call, ...]) -> bytes | None:
    """The digest of a machine's state, its agent written as the scenario's calls.

    A machine is never changed once a world holds it (a worker feeds a copy), so its
    digest is computed once, however many worlds share it."""
    if machine is None:
        return None
    key = _MACHINE_KEYS.get(machine)
    if key is None:
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, protocol=5)
        pickler.dispatch_table = copyreg.dispatch_table.copy()
        pickler.dispatch_table[Agent] = lambda _: (_agent_by_calls, (calls,))
        pickler.dump(machine)
        key = hashlib.blake2b(buffer.getvalue(), digest_size=16).digest()
        _MACHINE_KEYS[machine] = key
    return key


@attrs.define(slots=False)
class Worker:
    name: str
    clock: float = 0.0
    """Monotonic."""
    stopping: bool = False
    machine: RunMachine | None = None
    awaiting: Command | None = None
    """The action the machine waits to have carried out."""
    answer: MachineEvent | None = None
    """An answer on its way (a commit's, delayed): fed at the worker's next step."""


@attrs.define(slots=False)
class Execution:
    """One call as the ledger saw it start, with what the store held at that moment."""

    worker: str
    run_id: str
    epoch: int
    call_id: str
    effect: ToolEffect | None
    """None for a provider call."""
    arguments_json: str
    intent_durable: bool
    lease_held: bool
    approval: tuple[Decision | None, float | None, float | None, str] | None
    """For a call that needs approval: the stored request's decision, when it was
    decided, when it expires, and the digest of the arguments it approved."""


@attrs.define(slots=False)
class Reaper:
    clock: float = 0.0
    seen: dict[str, tuple[LeaseMark, float]] = attrs.Factory(dict)


@attrs.frozen(slots=False)
class Transition:
    actor: str
    action: str
    budget: str | None = None
    """The budget the move spends, if any."""


FAULTS = (
    ("refused", "refusals"),
    ("refused for its data", "data_errors"),
    ("stored, answer lost", "lost_answers"),
    ("not stored, answer lost", "lost_answers"),
    ("stored, answer delayed", "delayed_answers"),
)


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
    """Intents (run, seq, epoch) still open when their attempt settled, their call never
    started: the attempt knew it, and no later one can."""
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

    def copy(self) -> World:
        """An independent world. Machines, ledger lines and commands are shared: none is
        ever changed once a world holds it."""
        copied = copy.copy(self)
        copied.store = self.store.copy()
        copied.workers = [copy.copy(worker) for worker in self.workers]
        copied.reaper = Reaper(self.reaper.clock, dict(self.reaper.seen))
        copied.ledger = list(self.ledger)
        copied.accepted = {key: list(runs) for key, runs in self.accepted.items()}
        copied.purged = list(self.purged)
        copied.abandoned = list(self.abandoned)
        copied.spent = dict(self.spent)
        return copied

    def fingerprint(self) -> tuple[Any, ...]:
        """Equal for equal worlds, and hashable: what the explorer merges states on."""
        calls = self.scenario.calls
        return (
            self.store.fingerprint(),
            tuple(
                (
                    w.name,
                    w.clock,
                    w.stopping,
                    _machine_key(w.machine, calls),
                    w.awaiting,
                    w.answer,
                )
                for w in self.workers
            ),
            self.reaper.clock,
            tuple(self.reaper.seen.items()),
            tuple(tuple(vars(e).values()) for e in self.ledger),
            tuple((key, tuple(runs)) for key, runs in self.accepted.items()),
            tuple(self.purged),
            tuple(self.abandoned),
            tuple(sorted(self.spent.items())),
            self.submits,
        )

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
                            action = f"{verb} {run.id} {request.call_id}"
                            yield Transition("operator", action, "decisions")
            if not run.state.terminal and self._left("cancels"):
                yield Transition("operator", f"cancel {run.id}", "cancels")
            if run.state is RunState.DEAD_LETTERED:
                if self._left("resolutions") and self.store.open_call(run.id) is not None:
                    for how in ("applied", "not-applied"):
                        yield Transition("operator", f"resolve {run.id} {how}", "resolutions")
                if self._left("redrives"):
                    yield Transition("operator", f"redrive {run.id}", "redrives")
            if run.state.terminal and self._left("purges"):
                yield Transition("operator", f"purge {run.id}", "purges")
        if self._left("resubmits"):
            yield Transition("submitter", "submit again", "resubmits")

    def _left(self, kind: str) -> bool:
        budget = self.scenario.budget
        if (
            budget.total is not None
            and kind in budget.faults
            and sum(self.spent.get(fault, 0) for fault in budget.faults) >= budget.total
        ):
            return False
        allowed: int = getattr(budget, kind)
        return self.spent.get(kind, 0) < allowed

    def _worker_moves(self, worker: Worker) -> Iterator[Transition]:
        name = worker.name
        if worker.machine is None:
            if not worker.stopping and self._claimable():
                yield Transition(name, "claim")
                if self._left("lost_answers"):
                    yield Transition(name, "claim, answer lost", "lost_answers")
            return
        if self._left("crashes"):
            yield Transition(name, "crash", "crashes")
        if not worker.stopping and self._left("stops"):
            yield Transition(name, "stop", "stops")
        yield Transition(name, "step")
        if worker.answer is not None or self._stops_now(worker):
            return
        if isinstance(worker.awaiting, Commit):
            for fault, kind in FAULTS:
                if self._left(kind):
                    yield Transition(name, f"step, {fault}", kind)
        if isinstance(worker.awaiting, ReadBack) and self._left("failed_read_backs"):
            yield Transition(name, "step, read fails", "failed_read_backs")

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
            self.store.now += units
            self.reaper.clock += units
            for worker in self.workers:
                worker.clock += units
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

    # -- a worker: the interpreter of the machine -----------------------------------------------

    def _move_worker(self, worker: Worker, action: str) -> str:
        if action.startswith("claim"):
            return self._claim(worker, lost=action != "claim")
        machine = worker.machine
        assert machine is not None
        if action == "crash":
            self._forget(worker)
            worker.stopping = False
            return f"crashes, its attempt of {machine.run_id} at epoch {machine.epoch} with it"
        if action == "stop":
            worker.stopping = True
            return "is told to stop"
        if worker.answer is not None:
            event, worker.answer = worker.answer, None
            if isinstance(event, Committed) and self.scenario.holes.lease_from_answer:
                event = Committed(event.outcome, worker.clock)
            return "gets the answer it waited for; " + self._feed(worker, event)
        if self._stops_now(worker):
            return "stops: " + self._feed(worker, Cancelled())
        awaiting = worker.awaiting
        fault = action.removeprefix("step").removeprefix(", ")
        if isinstance(awaiting, LoadJournal):
            steps = tuple(self.store.list_steps(machine.run_id))
            requests = tuple(self.store.list_requests(machine.run_id))
            return "loads the journal; " + self._feed(worker, JournalLoaded(steps, requests))
        if isinstance(awaiting, ReadBack):
            if fault:
                return "reads the journal back: the read fails; " + self._feed(
                    worker, ReadFailed("the read failed")
                )
            steps = tuple(self.store.list_steps(machine.run_id))
            return "reads the journal back; " + self._feed(worker, JournalRead(steps))
        if isinstance(awaiting, CheckAdmission):
            return self._admit_and_call(worker, machine)
        assert isinstance(awaiting, Commit), awaiting
        return self._commit(worker, machine, awaiting, fault)

    @staticmethod
    def _stops_now(worker: Worker) -> bool:
        """Whether a stop takes effect at this step: anywhere but in what is shielded from
        it (an intent's commit, a settlement, a protected write and its outcome)."""
        machine = worker.machine
        return (
            worker.stopping
            and machine is not None
            and machine.protecting is None
            and not isinstance(worker.awaiting, RecordIntent | Settle)
        )

    def _forget(self, worker: Worker) -> None:
        worker.machine = worker.awaiting = worker.answer = None

    def _claim(self, worker: Worker, *, lost: bool) -> str:
        sent_at = worker.clock
        (run,) = self.store.claim_runs(worker.name, 1, LEASE)
        if lost:
            return f"claims {run.id} at epoch {run.epoch}; the answer is lost"
        machine = machine_for(self.scenario.holes).for_run(
            run.record(),
            agent_for(self.scenario.calls),
            lease_seconds=LEASE,
            admission_seconds=ADMISSION,
            lease_deadline=sent_at + LEASE,
            policy=POLICY,
        )
        worker.machine = machine
        said = f"claims {run.id} at epoch {run.epoch}, lease until {sent_at + LEASE:g}; "
        return said + self._carry(worker, machine.start())

    def _feed(self, worker: Worker, event: MachineEvent) -> str:
        assert worker.machine is not None
        # Fed a copy: the machine held before may be shared with other worlds.
        worker.machine = copy.copy(worker.machine)
        return self._carry(worker, worker.machine.feed(event))

    def _carry(self, worker: Worker, commands: tuple[Command, ...]) -> str:
        """Keep the action the machine now awaits; a Stop ends the attempt."""
        action = next(c for c in commands if not isinstance(c, Log | Metric | CrashPoint))
        worker.awaiting = action
        if isinstance(action, Stop):
            self._forget(worker)
            if action.settlement is None:
                return "the attempt ends"
            return f"the attempt ends, {_settled(action.settlement)}"
        return f"next: {_action(action)}"

    def _admit_and_call(self, worker: Worker, machine: RunMachine) -> str:
        machine = worker.machine = copy.copy(machine)
        commands = machine.feed(AdmissionCheck(now=worker.clock, wall=self.store.now))
        call = next(c for c in commands if not isinstance(c, Log | Metric | CrashPoint))
        if isinstance(call, AskProvider):
            self._record(worker, machine, None)
            reply = reply_to(self.scenario.calls, call.request)
            asked = f"admitted, asks the provider at epoch {machine.epoch}; "
            return asked + self._feed(worker, ProviderReplied(reply))
        if isinstance(call, CallTool):
            self._record(worker, machine, call)
            called = f"admitted, calls {call.tool} at epoch {machine.epoch}; "
            return called + self._feed(worker, ToolReturned("done"))
        return "not admitted; " + self._carry(worker, commands)

    def _record(self, worker: Worker, machine: RunMachine, call: CallTool | None) -> None:
        """The ledger's line for a call starting, with what the store holds right then."""
        store = self.store
        run = store.runs.get(machine.run_id)
        held = run is not None and run.state is RunState.RUNNING and run.epoch == machine.epoch
        journal = store.steps.get(machine.run_id, {}).values()
        durable = call is not None and any(
            row.status is StepStatus.STARTED
            and row.epoch == machine.epoch
            and row.call_id == call.call_id
            for row in journal
        )
        approval: tuple[Decision | None, float | None, float | None, str] | None = None
        if call is not None and any(
            c.needs_approval for c in self.scenario.calls if c.call_id == call.call_id
        ):
            named = [r for r in store.requests.get(machine.run_id, []) if r.call_id == call.call_id]
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
                run_id=machine.run_id,
                epoch=machine.epoch,
                call_id="provider" if call is None else call.call_id,
                effect=None if call is None else call.effect,
                arguments_json="" if call is None else dump_json(dict(call.arguments)),
                intent_durable=durable,
                lease_held=held,
                approval=approval,
            )
        )

    def _commit(self, worker: Worker, machine: RunMachine, commit: Commit, fault: str) -> str:
        sent_at = worker.clock
        item = BatchItem(
            run_id=machine.run_id,
            epoch=machine.epoch,
            steps=commit.steps,
            lease_seconds=commit.renewal_at(sent_at),
            settlement=commit.settlement,
        )
        if fault == "refused":
            outcome: CommitOutcome = Refused("a passing fault")
        elif fault == "refused for its data":
            outcome = Refused("the store refused the data", data_error=True)
        elif fault == "not stored, answer lost":
            outcome = Unanswered("the connection dropped before the commit")
        else:
            outcome = self.store.commit_item(item)
            if isinstance(outcome, Stored) and isinstance(commit, Settle):
                self._note_abandoned(machine)
        what = f"commits {_action(commit)} at epoch {machine.epoch}: {_named(outcome)}"
        if fault == "stored, answer delayed":
            worker.answer = Committed(outcome, sent_at)
            return f"{what}, its answer delayed"
        if fault == "stored, answer lost":
            outcome = Unanswered("the answer to the commit was lost")
            what += ", its answer lost"
        return f"{what}; " + self._feed(worker, Committed(outcome, sent_at))

    def _note_abandoned(self, machine: RunMachine) -> None:
        """Intents of this attempt still open as it settles, their call never started."""
        started = {(e.run_id, e.call_id, e.epoch) for e in self.ledger}
        for row in self.store.steps[machine.run_id].values():
            if (
                row.status is StepStatus.STARTED
                and row.epoch == machine.epoch
                and (machine.run_id, row.call_id, row.epoch) not in started
            ):
                self.abandoned.append((machine.run_id, row.seq, row.epoch))


def _named(outcome: CommitOutcome) -> str:
    if isinstance(outcome, Refused):
        return "refused for its data" if outcome.data_error else "refused"
    if isinstance(outcome, Fenced):
        return "fenced"
    return type(outcome).__name__.lower()


def _settled(settlement: Settlement) -> str:
    reason = "" if settlement.reason is None else f" ({settlement.reason.value})"
    return f"{settlement.target.value}{reason}"


def _action(command: Command) -> str:
    """A command the machine gave, in a few words."""
    if not isinstance(command, Commit):
        return type(command).__name__
    parts = []
    for step in command.steps:
        what = step.tool or "provider turn"
        verb = "withdrawal" if step.withdraws else "outcome" if step.settles else step.status.value
        parts.append(f"{what} {verb} at seq {step.seq}")
    if command.settlement is not None:
        parts.append(f"settling {_settled(command.settlement)}")
    shown = "; ".join(parts) or f"{command.lease_seconds:g} s"
    return f"{type(command).__name__} ({shown})"
