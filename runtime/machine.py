"""The run protocol as a pure state machine: events in, commands out.

One ``RunMachine`` drives one attempt of one run under one lease epoch. It does
no I/O, reads no clock and awaits nothing: time arrives in events. The actor
that owns it (``actors/run_actor.py``) carries out its commands and feeds back
what happened. A model checker can drive it the same way over a simulated store.

Driving it
----------
``machine.start()`` and ``machine.feed(event)`` each return a tuple of commands:
zero or more *observations* (``Log``, ``Metric``, ``CrashPoint``), carried out in
order and answered by nothing, then exactly one *action*, answered by one event:

===============================  ====================================================
action                           answered by
===============================  ====================================================
``LoadJournal``                  ``JournalLoaded(steps, requests)`` | ``LoadFailed``
``CheckAdmission``               ``AdmissionCheck(now, wall)``, fed at once
``AskProvider(request, ...)``    ``ProviderReplied`` | ``ProviderFailed`` | ``TimedOut``
                                 | ``CutOff`` | ``LeaseLost``
``CallTool(..., protected)``     ``ToolReturned`` | ``ToolFailed`` | ``ToolRaised``
                                 | ``TimedOut`` | ``CutOff`` | ``LeaseLost``
``Commit`` (``RecordSoft``,      ``Committed(outcome, sent_at)``: the CommitOutcome
``RecordIntent``,                of ``runtime/commits.py`` and the monotonic time
``RecordOutcome``, ``Renew``,    the commit was sent at
``Settle``, ``Park``)
``ReadBack``                     ``JournalRead(steps)`` | ``ReadFailed(error)``
``Stop(settlement)``             nothing: the attempt is over
===============================  ====================================================

Rules for the interpreter:

* ``CheckAdmission``: feed ``AdmissionCheck(now=monotonic, wall=wall clock)``; when
  it returns ``AskProvider`` or ``CallTool``, start that call with no await in
  between (G7). It may instead return ``Renew`` or a ``Settle``: carry those out.
  A cancel may be taken at a checkpoint just before feeding ``AdmissionCheck``.
* ``Commit``: send one write request of ``steps``, renewing the lease by
  ``lease_seconds`` (0: none) and applying ``settlement`` (None: none); take the
  monotonic ``sent_at`` just before sending. ``RecordIntent`` is shielded from a
  cancel within a bound (if the bound passes, answer ``Unanswered``); ``Settle``
  and ``Park`` are shielded.
* ``CallTool(protected=True)`` is a write with a durable intent: shield it from a
  drain or a cancel until ``machine.protecting`` is None again (only a cut-off
  lets a cancel through).
* During a call, the keeper's renewals are fed as ``LeaseRenewed(deadline,
  cancel_requested)`` (before the call's own answer); at any time between
  actions a drain may be fed as ``DrainRequested()``. Both return observations
  only. A stop of the worker is fed as ``Cancelled()`` in place of the answer
  awaited; it returns the settle to carry out (shielded), then ``Stop``.
* ``Log(level, event, fields)``: a structlog event of the run's logger;
  ``traceback`` asks for the exception of the ``ToolRaised`` just fed.
  ``Metric(name, args)``: ``getattr(metrics, name)(*args)``. ``CrashPoint(name)``:
  ``storage.crash_points.crash_point(name)``.

State
-----
Every field is an immutable value, and the Agent is consulted only for facts
(effects, argument schemas, approval policies, timeouts, max_steps, result
encoding): ``copy.copy`` or ``copy.deepcopy`` of a machine gives an independent
one, and ``snapshot()`` gives a hashable key of its state. The same events give
the same commands.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from leaseward.runtime.agents import Agent
from leaseward.runtime.approvals import Gate, GateAction, gate_call
from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored, Unanswered
from leaseward.runtime.conversation import (
    PendingCall,
    normalize_reply,
    pending_calls,
    rebuild,
    reply_to_json,
    tool_message,
)
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import (
    MAX_ARGUMENTS_BYTES,
    MAX_RESULT_BYTES,
    arguments_digest,
    dump_json,
)
from leaseward.runtime.errors import (
    AuditPersistenceFailed,
    CallTimedOut,
    InvalidInput,
    ProviderError,
    StoreError,
)
from leaseward.runtime.failures import FailureClass, classify
from leaseward.runtime.human_requests import Decision, HumanRequest, NewRequest, RequestKind
from leaseward.runtime.journal import StepInfo, StepWrite
from leaseward.runtime.lifecycle import (
    Event,
    Reason,
    RecoveryPolicy,
    RunMode,
    StepKind,
    StepStatus,
    decide_recovery,
)
from leaseward.runtime.messages import Message, ProviderReply, ProviderRequest, Role, ToolCall
from leaseward.runtime.runs import RunRecord
from leaseward.runtime.settlements import Settlement, settlement_after
from leaseward.runtime.tools import BoundTool

__all__ = [
    "MAX_ERROR_CHARS",
    "AdmissionCheck",
    "AskProvider",
    "CallTool",
    "Cancelled",
    "CheckAdmission",
    "Command",
    "Commit",
    "Committed",
    "CrashPoint",
    "CutOff",
    "DrainRequested",
    "JournalLoaded",
    "JournalRead",
    "LeaseLost",
    "LeaseRenewed",
    "LoadFailed",
    "LoadJournal",
    "Log",
    "MachineEvent",
    "Metric",
    "Park",
    "ProviderFailed",
    "ProviderReplied",
    "ReadBack",
    "ReadFailed",
    "RecordIntent",
    "RecordOutcome",
    "RecordSoft",
    "Renew",
    "RunMachine",
    "Settle",
    "Stop",
    "TimedOut",
    "ToolFailed",
    "ToolRaised",
    "ToolReturned",
    "UnexpectedEvent",
    "WriteBuffer",
    "WriteRef",
    "describe",
]

MAX_ERROR_CHARS = 2000


# -- events -----------------------------------------------------------------------------


@attrs.frozen
class JournalLoaded:
    steps: tuple[StepInfo, ...]
    requests: tuple[HumanRequest, ...] = ()


@attrs.frozen
class LoadFailed:
    error: Exception


@attrs.frozen
class Committed:
    outcome: CommitOutcome
    sent_at: float
    """Monotonic time the commit was sent: a renewal's lease runs from then."""


@attrs.frozen
class JournalRead:
    steps: tuple[StepInfo, ...]


@attrs.frozen
class ReadFailed:
    error: str


@attrs.frozen
class AdmissionCheck:
    now: float
    """Monotonic."""
    wall: float
    """Wall clock: when the call begins, for its journal row."""


@attrs.frozen
class ProviderReplied:
    reply: Any
    """What the provider returned; anything but a ProviderReply fails the attempt."""
    latency_ms: float | None = None


@attrs.frozen
class ProviderFailed:
    error: Exception


@attrs.frozen
class ToolReturned:
    result: Any


@attrs.frozen
class ToolFailed:
    """The tool raised ToolError: a failure it reports to the model."""

    message: str


@attrs.frozen
class ToolRaised:
    """The tool raised something other than ToolError."""

    error: Exception


@attrs.frozen
class TimedOut:
    """The call in flight did not return within its own timeout."""


@attrs.frozen
class CutOff:
    """The keeper cancelled the call in flight: its lease could not be renewed."""

    reason: str


@attrs.frozen
class LeaseLost:
    """The store no longer holds the run at this epoch (seen by the keeper)."""


@attrs.frozen
class LeaseRenewed:
    """The keeper renewed the lease while a call ran."""

    deadline: float
    cancel_requested: bool = False


@attrs.frozen
class Cancelled:
    """The worker is stopping this attempt."""


@attrs.frozen
class DrainRequested:
    """The worker is draining: the run is released at its next step boundary."""


MachineEvent = (
    JournalLoaded
    | LoadFailed
    | Committed
    | JournalRead
    | ReadFailed
    | AdmissionCheck
    | ProviderReplied
    | ProviderFailed
    | ToolReturned
    | ToolFailed
    | ToolRaised
    | TimedOut
    | CutOff
    | LeaseLost
    | LeaseRenewed
    | Cancelled
    | DrainRequested
)


# -- commands ---------------------------------------------------------------------------


@attrs.frozen
class Log:
    level: str
    event: str
    fields: tuple[tuple[str, Any], ...] = ()
    traceback: bool = False


@attrs.frozen
class Metric:
    name: str
    args: tuple[Any, ...] = ()


@attrs.frozen
class CrashPoint:
    name: str


@attrs.frozen
class LoadJournal:
    pass


@attrs.frozen
class CheckAdmission:
    pass


@attrs.frozen
class AskProvider:
    request: ProviderRequest
    timeout_seconds: float


@attrs.frozen
class CallTool:
    tool: str
    call_id: str
    arguments: Mapping[str, Any]
    idempotency_key: str
    effect: ToolEffect
    timeout_seconds: float
    protected: bool
    """A write whose intent is durable: nothing but a cut-off may interrupt it."""


@attrs.frozen
class Commit:
    steps: tuple[StepWrite, ...]
    lease_seconds: float
    settlement: Settlement | None = None


@attrs.frozen
class RecordSoft(Commit):
    """Fail-soft records: a provider turn, a read's outcome, a refused or answered call."""


@attrs.frozen
class RecordIntent(Commit):
    """A write's intent, behind every pending record: the call waits on it."""


@attrs.frozen
class RecordOutcome(Commit):
    """The outcome of a call that had an intent."""


@attrs.frozen
class Renew(Commit):
    """A lease renewal before a call (with any pending records)."""


@attrs.frozen
class Settle(Commit):
    """The attempt's settlement, with any unstarted intent withdrawn."""


@attrs.frozen
class Park(Settle):
    """A settlement that parks the run until people decide its requests."""


@attrs.frozen
class ReadBack:
    """Read the run's journal: a commit went unanswered."""


@attrs.frozen
class Stop:
    settlement: Settlement | None
    """The settlement stored, or None if none was."""


Command = (
    Log
    | Metric
    | CrashPoint
    | LoadJournal
    | CheckAdmission
    | AskProvider
    | CallTool
    | Commit
    | ReadBack
    | Stop
)


class UnexpectedEvent(Exception):
    """An event the machine was not waiting for: the interpreter broke the protocol."""


# -- state values -----------------------------------------------------------------------


@attrs.frozen
class WriteBuffer:
    """Fail-soft records still to store, and the provider turns given up on."""

    pending: tuple[StepWrite, ...] = ()
    dropped_turns: frozenset[int] = frozenset()
    """Provider turns dropped from the journal: a write one of them asked for has no
    turn to stand on there, so a resumed run would not know the call."""

    def keep(self, step: StepWrite) -> WriteBuffer:
        return attrs.evolve(self, pending=(*self.pending, step))

    def stored(self) -> WriteBuffer:
        return attrs.evolve(self, pending=())

    def drop(self, steps: Sequence[StepWrite]) -> WriteBuffer:
        turns = {step.seq for step in steps if step.kind is StepKind.PROVIDER}
        kept = tuple(step for step in self.pending if step not in steps)
        return WriteBuffer(kept, self.dropped_turns | turns)


@attrs.frozen
class WriteRef:
    """The protected write in flight."""

    tool: str
    call_id: str


@attrs.frozen
class _Failure:
    failure_class: FailureClass
    error: str
    retry_after_seconds: float | None = None
    audit_failed: bool = False

    @classmethod
    def of(cls, exc: BaseException) -> _Failure:
        return cls(
            classify(exc),
            describe(exc),
            exc.retry_after_seconds if isinstance(exc, ProviderError) else None,
            isinstance(exc, AuditPersistenceFailed),
        )


@attrs.frozen
class _Conversation:
    messages: tuple[Message, ...] = ()
    next_seq: int = 0
    turns: int = 0
    pending: tuple[PendingCall, ...] = ()
    final: ProviderReply | None = None


@attrs.frozen
class _ProviderTurn:
    pass


@attrs.frozen
class _ToolTurn:
    pending: PendingCall
    base: StepWrite
    needs_intent: bool
    timeout_seconds: float
    tool_effect: ToolEffect
    """The effect the tool declares (the base row's effect is the resolver's)."""


# What happens once a commit is answered.
@attrs.frozen
class _Soft:
    after: tuple[Log | Metric, ...] = ()
    then_fail: _Failure | None = None


@attrs.frozen
class _Intent:
    turn: _ToolTurn
    after: tuple[Log | Metric, ...] = ()


@attrs.frozen
class _Outcome:
    step: StepWrite


@attrs.frozen
class _Raised:
    step: StepWrite
    failure: _Failure


@attrs.frozen
class _Renewal:
    call: _ProviderTurn | _ToolTurn


@attrs.frozen
class _Settling:
    settlement: Settlement


_Purpose = _Soft | _Intent | _Outcome | _Raised | _Renewal | _Settling

_COMMANDS: dict[type[Any], type[Commit]] = {
    _Soft: RecordSoft,
    _Intent: RecordIntent,
    _Outcome: RecordOutcome,
    _Raised: RecordOutcome,
    _Renewal: Renew,
    _Settling: Settle,
}


# Phases: what the machine waits for.
@attrs.frozen
class _Idle:
    pass


@attrs.frozen
class _Loading:
    pass


@attrs.frozen
class _Admitting:
    call: _ProviderTurn | _ToolTurn
    renewed: bool = False


@attrs.frozen
class _Sending:
    purpose: _Purpose
    resent: tuple[StepWrite, ...]
    fresh: tuple[StepWrite, ...]
    settlement: Settlement | None
    after_pending: bool
    first_try: CommitOutcome | None = None
    """Set when this is the second try, without the pending records that the first
    carried: how the first ended."""

    @property
    def steps(self) -> tuple[StepWrite, ...]:
        return (*self.resent, *self.fresh)


@attrs.frozen
class _ReadingBack:
    sending: _Sending
    unanswered: Unanswered


@attrs.frozen
class _Asking:
    started_at: float


@attrs.frozen
class _Calling:
    turn: _ToolTurn


@attrs.frozen
class _Stopped:
    settlement: Settlement | None


_Phase = _Idle | _Loading | _Admitting | _Sending | _ReadingBack | _Asking | _Calling | _Stopped


def describe(exc: BaseException) -> str:
    """An exception in words for the journal, the run's error and the logs, bounded."""
    if isinstance(exc, CallTimedOut):
        # Its words say what timed out and what that means; its type adds nothing.
        return exc.message
    # A tool's exception text is the tool's to write, of any length.
    text = str(exc)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _log(level: str, event: str, **fields: Any) -> Log:
    return Log(level, event, tuple(fields.items()))


def _frozen(value: Any) -> Any:
    """A hashable value equal for equal states (dicts and lists in arguments included)."""
    if value is None or isinstance(value, str | int | float | bool | enum.Enum):
        return value
    if isinstance(value, Mapping):
        return ("{}", tuple(sorted((str(k), _frozen(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return tuple(_frozen(item) for item in value)
    if isinstance(value, set | frozenset):
        return frozenset(_frozen(item) for item in value)
    if attrs.has(type(value)):
        fields = attrs.fields(type(value))
        return (type(value).__name__, tuple(_frozen(getattr(value, f.name)) for f in fields))
    return (type(value).__name__, repr(value))


_WAITING = frozenset(kind.waiting_state for kind in RequestKind)


@attrs.define(eq=False)
class RunMachine:
    """One attempt of one run: events in, commands out (see the module's docstring)."""

    agent: Agent
    run_id: str
    epoch: int
    mode: RunMode
    requeues: int
    run_input: Any
    lease_seconds: float
    admission_seconds: float
    """What a lease must have left for a call to start: until the keeper's next
    renewal, and its margin beyond."""
    policy: RecoveryPolicy
    deadline: float
    """Monotonic: when the lease ends unless renewed (from when its renewal was sent)."""
    cancel_requested: bool = False
    in_doubt: bool = False
    """A commit of this attempt went unanswered, and no answered commit since: no call
    starts until one is (G6, G7). A read-back proves records, never the fence."""
    draining: bool = False
    phase: _Phase = _Idle()
    conversation: _Conversation = _Conversation()
    requests: tuple[HumanRequest, ...] = ()
    newest: tuple[ToolEffect | None, StepStatus | None] = (None, None)
    """Effect and status of the journal's newest row (status only for a tool row)."""
    before_intent: tuple[ToolEffect | None, StepStatus | None] = (None, None)
    buffer: WriteBuffer = WriteBuffer()
    unstarted_intent: StepWrite | None = None
    """An intent sent whose call has not started: withdrawn if the attempt ends, so no
    later attempt takes a call that never started for one that may have run."""
    protecting: WriteRef | None = None
    """The write in flight that only a cut-off may interrupt."""

    @classmethod
    def for_run(
        cls,
        run: RunRecord,
        agent: Agent,
        *,
        lease_seconds: float,
        admission_seconds: float,
        lease_deadline: float,
        policy: RecoveryPolicy,
    ) -> RunMachine:
        return cls(
            agent=agent,
            run_id=run.id,
            epoch=run.epoch,
            mode=run.mode,
            requeues=run.requeues,
            run_input=run.input,
            lease_seconds=lease_seconds,
            admission_seconds=admission_seconds,
            policy=policy,
            deadline=lease_deadline,
            cancel_requested=run.cancel_requested,
        )

    # -- value semantics -------------------------------------------------------------

    def __copy__(self) -> RunMachine:
        return attrs.evolve(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> RunMachine:
        # Every field is immutable and the Agent is shared facts, so a copy is independent.
        return copy.copy(self)

    def snapshot(self) -> Any:
        """A hashable key: equal for machines in equal states."""
        return _frozen(
            tuple(getattr(self, f.name) for f in attrs.fields(RunMachine) if f.name != "agent")
        )

    @property
    def stopped(self) -> bool:
        return isinstance(self.phase, _Stopped)

    # -- entry points ----------------------------------------------------------------

    def start(self) -> tuple[Command, ...]:
        if not isinstance(self.phase, _Idle):
            raise UnexpectedEvent("the machine has started already")
        if self.epoch == 1:
            # Epoch 1 is a run's first lease: nobody can have written its journal yet.
            return self._begin((), ())
        self.phase = _Loading()
        return (LoadJournal(),)

    def feed(self, event: MachineEvent) -> tuple[Command, ...]:
        phase = self.phase
        if isinstance(phase, _Stopped):
            raise UnexpectedEvent(f"the attempt is over; {type(event).__name__} came after")
        if isinstance(event, LeaseRenewed):
            self.deadline = max(self.deadline, event.deadline)
            self.cancel_requested = self.cancel_requested or event.cancel_requested
            return ()
        if isinstance(event, DrainRequested):
            # Interactive runs are never released back to the queue, so they never drain.
            self.draining = self.mode is RunMode.QUEUED
            return ()
        if isinstance(event, Cancelled):
            return self._cancelled()
        try:
            return self._dispatch(phase, event)
        except UnexpectedEvent:
            raise
        except Exception as exc:
            # Something the model or a tool gave cannot be journaled (InvalidInput, a
            # result encoder's error): the attempt fails, as any failure does.
            if isinstance(self.phase, _Sending) and isinstance(self.phase.purpose, _Settling):
                raise
            return self._fail(_Failure.of(exc))

    def _dispatch(self, phase: _Phase, event: MachineEvent) -> tuple[Command, ...]:
        if isinstance(phase, _Loading):
            if isinstance(event, JournalLoaded):
                return self._begin(event.steps, event.requests)
            if isinstance(event, LoadFailed):
                return self._fail(_Failure.of(event.error))
        elif isinstance(phase, _Admitting) and isinstance(event, AdmissionCheck):
            return self._admission(phase, event)
        elif isinstance(phase, _Sending) and isinstance(event, Committed):
            return self._committed(phase, event)
        elif isinstance(phase, _ReadingBack):
            if isinstance(event, JournalRead):
                return self._read_back(phase, event.steps)
            if isinstance(event, ReadFailed):
                return (
                    _log("warning", "commit.undecided", error=event.error),
                    *self._sent(phase.sending, phase.unanswered, answered=False, sent_at=0.0),
                )
        elif isinstance(phase, _Asking):
            return self._provider_event(phase, event)
        elif isinstance(phase, _Calling):
            return self._tool_event(phase.turn, event)
        raise UnexpectedEvent(
            f"{type(event).__name__} does not answer {type(phase).__name__.lstrip('_')}"
        )

    # -- the loop --------------------------------------------------------------------

    def _begin(
        self, steps: Sequence[StepInfo], requests: Sequence[HumanRequest]
    ) -> tuple[Command, ...]:
        self.requests = tuple(requests)
        if steps:
            newest = max(steps, key=lambda s: s.seq)
            self.newest = (
                newest.effect,
                newest.status if newest.kind is StepKind.TOOL else None,
            )
        rebuilt = rebuild(self.run_id, self.agent.instructions, self.run_input, steps)
        self.conversation = _Conversation(
            rebuilt.messages,
            rebuilt.next_seq,
            rebuilt.provider_turns,
            rebuilt.pending,
            rebuilt.final_reply,
        )
        return self._next()

    def _next(self) -> tuple[Command, ...]:
        """At a step boundary: what the run does next."""
        self.protecting = None
        talk = self.conversation
        # A finished conversation completes even when a cancel or a drain arrived
        # meanwhile: the work is done and recorded.
        if talk.final is not None:
            return self._settle(
                Settlement(
                    Event.COMPLETE,
                    Reason.COMPLETED,
                    result_json=dump_json(talk.final.text, what="result"),
                )
            )
        if self.cancel_requested:
            return self._settle(Settlement(Event.CANCEL_RUNNING, Reason.CANCELLED))
        if self.draining:
            return self._settle(Settlement(Event.RELEASE))
        if talk.pending:
            return self._gate_turn(talk.pending)
        if talk.turns >= self.agent.max_steps:
            return self._settle(
                Settlement(
                    Event.FAIL,
                    Reason.MAX_STEPS,
                    error=f"the agent used its {self.agent.max_steps} provider steps "
                    "without finishing",
                )
            )
        self.phase = _Admitting(_ProviderTurn())
        return (CheckAdmission(),)

    def _take_seq(self) -> int:
        seq = self.conversation.next_seq
        self.conversation = attrs.evolve(self.conversation, next_seq=seq + 1)
        return seq

    def _say(self, message: Message) -> None:
        talk = self.conversation
        self.conversation = attrs.evolve(talk, messages=(*talk.messages, message))

    # -- admission (G7) --------------------------------------------------------------

    def _admission(self, phase: _Admitting, check: AdmissionCheck) -> tuple[Command, ...]:
        remaining = max(0.0, self.deadline - check.now)
        if not self.in_doubt and remaining >= self.admission_seconds:
            return self._admitted(phase.call, check.wall)
        if not phase.renewed:
            return self._send(_Renewal(phase.call), ())
        if self.in_doubt:
            return self._not_admitted("the store has not answered whether the lease still holds")
        return self._not_admitted(
            f"the lease has {remaining:.1f} s left, less than the "
            f"{self.admission_seconds:.1f} s a call needs to be renewed in time"
        )

    def _not_admitted(self, error: str) -> tuple[Command, ...]:
        """The call did not start: the run goes back to the queue without spending a retry."""
        withdrawn = self._withdraw_unstarted()
        return (
            _log("warning", "call.not_admitted", error=error),
            *self._settle(Settlement(Event.RELEASE), withdrawn),
        )

    def _admitted(self, call: _ProviderTurn | _ToolTurn, wall: float) -> tuple[Command, ...]:
        agent = self.agent
        if isinstance(call, _ProviderTurn):
            self.phase = _Asking(started_at=wall)
            request = ProviderRequest(
                run_id=self.run_id,
                agent=agent.name,
                messages=self.conversation.messages,
                tools=agent.tool_specs,
                model_settings=agent.model_settings,
            )
            return (AskProvider(request, agent.provider_timeout_seconds),)
        protected = self.unstarted_intent is not None
        self.unstarted_intent = None
        base = call.base
        if protected:
            self.protecting = WriteRef(call.pending.call.name, call.pending.call.call_id)
        elif not call.needs_intent:
            # A read has no intent row, so its record carries when the call began.
            base = attrs.evolve(base, started_at=wall)
        turn = attrs.evolve(call, base=base)
        self.phase = _Calling(turn)
        pending_call = call.pending.call
        return (
            CallTool(
                tool=pending_call.name,
                call_id=pending_call.call_id,
                arguments=pending_call.arguments,
                idempotency_key=call.pending.idempotency_key,
                effect=call.tool_effect,
                timeout_seconds=call.timeout_seconds,
                protected=protected,
            ),
        )

    # -- the provider ----------------------------------------------------------------

    def _provider_event(self, phase: _Asking, event: MachineEvent) -> tuple[Command, ...]:
        if isinstance(event, ProviderReplied):
            return self._replied(phase, event)
        if isinstance(event, ProviderFailed):
            return self._fail(_Failure.of(event.error))
        if isinstance(event, TimedOut):
            timeout = self.agent.provider_timeout_seconds
            # A bare TimeoutError would leave the run's error saying nothing of what timed out.
            error = ProviderError(
                f"the provider call timed out (its timeout is {timeout:g} s)",
                failure_class=FailureClass.CONNECTION.value,
            )
            return self._fail(_Failure.of(error))
        if isinstance(event, CutOff):
            return self._settle(self._recovered_from_interruption(event.reason))
        if isinstance(event, LeaseLost):
            return self._lease_lost()
        raise UnexpectedEvent(f"{type(event).__name__} does not answer a provider call")

    def _replied(self, phase: _Asking, event: ProviderReplied) -> tuple[Command, ...]:
        reply = event.reply
        if not isinstance(reply, ProviderReply):
            raise InvalidInput(f"the provider returned {type(reply).__name__}, not ProviderReply")
        seq = self._take_seq()
        reply = normalize_reply(reply, seq)
        usage = reply.usage
        observed = _log(
            "info",
            "provider.replied",
            seq=seq,
            model=reply.model,
            input_tokens=None if usage is None else usage.input_tokens,
            output_tokens=None if usage is None else usage.output_tokens,
            latency_ms=event.latency_ms,
            stop_reason=reply.stop_reason,
        )
        step = StepWrite(
            seq=seq,
            kind=StepKind.PROVIDER,
            status=StepStatus.SUCCEEDED,
            output_json=dump_json(
                reply_to_json(reply, latency_ms=event.latency_ms), what="the provider reply"
            ),
            started_at=phase.started_at,
        )
        talk = self.conversation
        self.conversation = attrs.evolve(
            talk,
            messages=(
                *talk.messages,
                Message(Role.ASSISTANT, reply.text, tool_calls=reply.tool_calls),
            ),
            turns=talk.turns + 1,
            pending=tuple(pending_calls(self.run_id, seq, reply)),
            final=None if reply.tool_calls else reply,
        )
        return (observed, *self._send(_Soft(), (step,)))

    # -- calls that wait for a person ------------------------------------------------

    def _request(self, pending: PendingCall) -> HumanRequest | None:
        for request in self.requests:
            if request.seq == pending.turn_seq and request.call_id == pending.call.call_id:
                return request
        return None

    def _gate(self, pending: PendingCall) -> Gate | None:
        """What a person has to do with this call; None for a call nobody is asked about:
        one that cannot run (an unknown tool, refused arguments) or that an earlier
        attempt left open (recovery decides it, from its intent)."""
        call = pending.call
        bound = self.agent.tools.get(call.name)
        if pending.open_attempt is not None or bound is None:
            return None
        if self._check_arguments(bound, call)[1] is not None:
            return None
        return gate_call(
            call.arguments,
            asks_human=bound.asks_human,
            needs_approval=bound.needs_approval(call.arguments),
            request=self._request(pending),
        )

    def _gate_turn(self, pending: Sequence[PendingCall]) -> tuple[Command, ...]:
        """Park the run if its next call must wait for a person, else make the call.

        Parking asks at once about every later call of the turn that needs the same
        kind of answer, so that a person sees them together and the run comes back
        once, when all are decided. Calls are still executed in the model's order.
        """
        gate = self._gate(pending[0])
        if gate is None or gate.action is not GateAction.PARK or gate.kind is None:
            return self._tool_step(gate)
        kind = gate.kind
        if pending[0].turn_seq in self.buffer.dropped_turns:
            # A request must stand on the turn that asked for it, as an intent must.
            raise StoreError(
                f"the provider turn that asked for {pending[0].call.name} could not be "
                "recorded, so neither can its request"
            )
        requests: list[NewRequest] = []
        for waiting in pending:
            later = self._gate(waiting)
            if later is None or later.action is not GateAction.PARK or later.kind is not kind:
                continue
            if later.request is None:
                requests.append(self._new_request(waiting, kind))
        return self._settle(Settlement(kind.park_event, requests=tuple(requests)))

    def _new_request(self, pending: PendingCall, kind: RequestKind) -> NewRequest:
        call = pending.call
        bound = self.agent.tools.get(call.name)
        assert bound is not None, "only calls of known tools are gated"
        own = bound.approval_timeout_seconds
        timeout = own if own is not None else self.agent.approval_timeout_seconds
        return NewRequest(
            seq=pending.turn_seq,
            position=pending.index,
            call_id=call.call_id,
            kind=kind,
            tool=call.name,
            effect=bound.effect,
            arguments_json=dump_json(dict(call.arguments), what=f"the arguments of {call.name}"),
            arguments_digest=arguments_digest(call.arguments),
            # Input has no expiry: a question waits for its answer.
            timeout_seconds=timeout if kind is RequestKind.APPROVAL else None,
        )

    def _decision_used(self, request: HumanRequest) -> tuple[Log | Metric, ...]:
        used: list[Log | Metric] = []
        if request.decision is not None and request.decided_at is not None:
            used.append(
                Metric(
                    "request_decided",
                    (request.decision, request.decided_at - request.requested_at),
                )
            )
        used.append(
            _log(
                "info",
                "request.used",
                call_id=request.call_id,
                tool=request.tool,
                decision=None if request.decision is None else request.decision.value,
                operator=request.operator,
            )
        )
        return tuple(used)

    # -- tool steps ------------------------------------------------------------------

    def _tool_step(self, gate: Gate | None) -> tuple[Command, ...]:
        """Make the next call the model asked for, or answer it as a person decided."""
        talk = self.conversation
        pending = talk.pending[0]
        self.conversation = attrs.evolve(talk, pending=talk.pending[1:])
        call = pending.call
        open_attempt = pending.open_attempt
        request = self._request(pending)
        approved = request is not None and request.decision is Decision.APPROVED
        if open_attempt is not None and (
            open_attempt.effect is ToolEffect.NON_IDEMPOTENT_WRITE or approved
        ):
            # Before any other check: whatever the app now says about this tool (removed,
            # its schema changed), the journal says a non-idempotent call may have run.
            # An approved call's intent consumed its approval, whatever its effect: the
            # approval authorised one execution, and that one may have happened.
            return self._settle(
                Settlement(
                    Event.DEAD_LETTER,
                    Reason.INTERRUPTED_WRITE,
                    error=f"call {call.call_id} of {call.name} was interrupted at epoch "
                    f"{open_attempt.epoch}; its outcome is unknown",
                )
            )
        bound = self.agent.tools.get(call.name)
        effect = self.agent.effects.effect_for(call.name)
        arguments_json, rejection = self._check_arguments(bound, call)
        base = StepWrite(
            seq=self._take_seq(),
            kind=StepKind.TOOL,
            status=StepStatus.STARTED,
            tool=call.name,
            call_id=call.call_id,
            effect=effect,
            idempotency_key=pending.idempotency_key,
            arguments_json=arguments_json,
        )
        if bound is None or rejection is not None:
            # Nothing is executed, so nothing needs an intent: the model gets the error.
            output = {"error": rejection}
            self._say(tool_message(call, output, is_error=True))
            failed = attrs.evolve(
                base, status=StepStatus.FAILED, output_json=dump_json(output), error=rejection
            )
            return self._send(_Soft(), (failed,))
        if gate is not None and gate.action in (GateAction.REFUSE, GateAction.ANSWER):
            return self._answer_without_call(call, base, gate)
        # An approved call always goes through an intent, even a read: the intent is
        # what consumes the approval, so that no later attempt can execute it again.
        approved_now = gate is not None and gate.request is not None
        turn = _ToolTurn(
            pending,
            base,
            needs_intent=effect.is_write or approved_now,
            timeout_seconds=bound.timeout_seconds,
            tool_effect=bound.effect,
        )
        if not turn.needs_intent:
            self.phase = _Admitting(turn)
            return (CrashPoint("before_intent"), CrashPoint("after_intent"), CheckAdmission())
        if pending.turn_seq in self.buffer.dropped_turns:
            # G2: stored alone, the intent would be ignored on resume, the model asked
            # again and the call maybe made twice. A retry asks for a turn that stays.
            return (
                CrashPoint("before_intent"),
                *self._fail(
                    _Failure.of(
                        StoreError(
                            f"the provider turn that asked for {call.name} (call "
                            f"{call.call_id}) could not be recorded, so neither can the "
                            "call's intent"
                        )
                    )
                ),
            )
        self.before_intent = self.newest
        # Marked before it is sent: if the attempt ends before the call, with the
        # intent's commit answered or not, the settlement withdraws whatever of it was
        # stored, and the next attempt never takes a call that did not start for one
        # that may have run.
        self.unstarted_intent = base
        used = () if gate is None or gate.request is None else self._decision_used(gate.request)
        return (
            CrashPoint("before_intent"),
            *self._send(_Intent(turn, used), (base,), after_pending=True),
        )

    def _answer_without_call(
        self, call: ToolCall, base: StepWrite, gate: Gate
    ) -> tuple[Command, ...]:
        """Record a person's answer, or the refusal of the call, as the call's result."""
        refused = gate.action is GateAction.REFUSE
        try:
            output_json = dump_json(
                gate.output, what=f"the result of {call.name}", limit=MAX_RESULT_BYTES
            )
            output = gate.output
        except InvalidInput as exc:
            output = {"error": exc.message}
            output_json = dump_json(output)
        self._say(tool_message(call, output, is_error=refused))
        step = attrs.evolve(
            base,
            status=StepStatus.FAILED if refused else StepStatus.SUCCEEDED,
            output_json=output_json,
            error=gate.error,
        )
        used = () if gate.request is None else self._decision_used(gate.request)
        return self._send(_Soft(after=used), (step,))

    def _check_arguments(
        self, bound: BoundTool | None, call: ToolCall
    ) -> tuple[str | None, str | None]:
        """The arguments' JSON text (None if they have none) and why they are refused, if so.

        Arguments the model sent as text that is not a JSON object are journaled
        as that text, a JSON string.
        """
        name = call.name
        unreadable = call.arguments_problem
        arguments: Any = dict(call.arguments) if unreadable is None else call.invalid_arguments
        try:
            arguments_json = dump_json(
                arguments, what=f"the arguments of {name}", limit=MAX_ARGUMENTS_BYTES
            )
        except InvalidInput as exc:
            return None, exc.message
        if unreadable is not None:
            return arguments_json, f"the arguments of {name} could not be read: {unreadable}"
        if bound is None:
            known = ", ".join(sorted(t.name for t in self.agent.tools)) or "none"
            return arguments_json, f"unknown tool {name!r} (available: {known})"
        try:
            bound.arguments.parse(arguments)
        except InvalidInput as exc:
            return arguments_json, f"invalid arguments for {name}: {exc.message}"
        return arguments_json, None

    def _tool_event(self, turn: _ToolTurn, event: MachineEvent) -> tuple[Command, ...]:
        call = turn.pending.call
        if isinstance(event, ToolReturned):
            return (
                CrashPoint("after_call"),
                *self._finish(turn, StepStatus.SUCCEEDED, event.result),
            )
        if isinstance(event, ToolFailed):
            output = {"error": event.message}
            return (
                CrashPoint("after_call"),
                *self._finish(turn, StepStatus.FAILED, output, event.message),
            )
        if isinstance(event, TimedOut):
            words = f"{call.name} did not return within {turn.timeout_seconds:.1f} s"
            if turn.tool_effect.is_write:
                words += "; it may have applied"
            observed = _log(
                "warning", "tool.timed_out", tool=call.name, call_id=call.call_id, error=words
            )
            return (observed, *self._record_raised(turn, words, CallTimedOut(words)))
        if isinstance(event, ToolRaised):
            words = describe(event.error)
            # A bug in the tool, most likely: whoever fixes it needs the traceback.
            observed = Log(
                "error",
                "tool.raised",
                (("tool", call.name), ("call_id", call.call_id), ("error", words)),
                traceback=True,
            )
            return (observed, *self._record_raised(turn, words, event.error))
        if isinstance(event, CutOff):
            # Settled as the reaper would have, but before the lease ran out: if the
            # store takes it in time, the reason says what happened.
            return self._settle(self._recovered_from_interruption(event.reason))
        if isinstance(event, LeaseLost):
            return self._lease_lost()
        raise UnexpectedEvent(f"{type(event).__name__} does not answer a tool call")

    def _finish(
        self, turn: _ToolTurn, status: StepStatus, output: Any, error: str | None = None
    ) -> tuple[Command, ...]:
        call = turn.pending.call
        bound = self.agent.tools.get(call.name)
        assert bound is not None, "only known tools are called"
        encoded = bound.encode_result(output, returned=status is StepStatus.SUCCEEDED)
        self._say(tool_message(call, encoded.value, is_error=status is StepStatus.FAILED))
        outcome = attrs.evolve(turn.base, status=status, output_json=encoded.text, error=error)
        if turn.needs_intent:
            settled = attrs.evolve(outcome, settles=True)
            return self._send(_Outcome(settled), (settled,))
        return self._send(_Soft(), (outcome,))

    def _record_raised(self, turn: _ToolTurn, words: str, error: Exception) -> tuple[Command, ...]:
        """Journal a call that raised or timed out, with what happened, then fail.

        A read's row is settled failed. A write's intent stays open, with the words
        beside it: the write may have applied before it raised, so only an operator
        can say whether it did (G2); recovery takes it for an interrupted write.
        """
        failure = _Failure.of(error)
        if not turn.needs_intent:
            failed = attrs.evolve(
                turn.base,
                status=StepStatus.FAILED,
                output_json=dump_json({"error": words}),
                error=words,
            )
            return self._send(_Soft(then_fail=failure), (failed,))
        step = attrs.evolve(turn.base, settles=True, error=words)
        return self._send(_Raised(step, failure), (step,))

    # -- commits ---------------------------------------------------------------------

    def _send(
        self,
        purpose: _Purpose,
        fresh: tuple[StepWrite, ...],
        settlement: Settlement | None = None,
        *,
        after_pending: bool = False,
    ) -> tuple[Command, ...]:
        """Commit ``fresh`` (and a renewal or ``settlement``) behind the pending records.

        With ``after_pending`` they are stored only together with every pending
        record: a write's intent must never reach the journal without the provider
        turn that asked for it. Otherwise, if the commit is not stored, the pending
        records stay pending and the rest is sent again alone.
        """
        sending = _Sending(purpose, self.buffer.pending, fresh, settlement, after_pending)
        return self._commit(sending)

    def _commit(self, sending: _Sending) -> tuple[Command, ...]:
        self.phase = sending
        lease_seconds = 0.0 if sending.settlement is not None else self.lease_seconds
        settlement = sending.settlement
        command = _COMMANDS[type(sending.purpose)]
        if settlement is not None and settlement.target in _WAITING:
            command = Park
        return (command(sending.steps, lease_seconds, settlement),)

    def _committed(self, sending: _Sending, event: Committed) -> tuple[Command, ...]:
        outcome = event.outcome
        if isinstance(outcome, Unanswered):
            # Whatever the journal says, nobody told this worker that its fence held
            # when it sent this, let alone now: no call before the store says so.
            self.in_doubt = True
            if sending.fresh:
                self.phase = _ReadingBack(sending, outcome)
                return (ReadBack(),)
            return (
                _log("warning", "commit.undecided", error=outcome.error),
                *self._sent(sending, outcome, answered=False, sent_at=event.sent_at),
            )
        return self._sent(sending, outcome, answered=True, sent_at=event.sent_at)

    def _read_back(self, phase: _ReadingBack, rows: Sequence[StepInfo]) -> tuple[Command, ...]:
        """The commit went unanswered: whether it is stored is read from the journal.

        The item's steps were written only if its lease fence held, and all of them
        or none: if every one is in the journal exactly as sent under this epoch, and
        one of them was sent for the first time in it, the item committed. The read
        proves records stored, never that the lease holds now: it renews nothing.
        """
        sending, unanswered = phase.sending, phase.unanswered
        journal = {row.seq: row for row in rows}
        if not all(step.stored_in(journal.get(step.seq), self.epoch) for step in sending.steps):
            return (
                _log("warning", "commit.not_stored", error=unanswered.error),
                *self._sent(sending, Refused(unanswered.error), answered=False, sent_at=0.0),
            )
        return (
            _log("warning", "commit.stored", error=unanswered.error),
            *self._sent(
                sending,
                Stored(cancel_requested=self.cancel_requested),
                answered=False,
                sent_at=0.0,
            ),
        )

    def _sent(
        self, sending: _Sending, outcome: CommitOutcome, *, answered: bool, sent_at: float
    ) -> tuple[Command, ...]:
        if isinstance(outcome, Fenced):
            if isinstance(sending.purpose, _Settling):
                self.phase = _Stopped(None)
                return (_log("warning", "lease.lost", during="settle"), Stop(None))
            return self._lease_lost()
        if isinstance(outcome, Stored):
            observed = list(self._recorded(sending.steps))
            if sending.settlement is None and answered:
                self.deadline = max(self.deadline, sent_at + self.lease_seconds)
                self.cancel_requested = self.cancel_requested or outcome.cancel_requested
                self.in_doubt = False
                observed.append(_log("debug", "lease.renewed", seconds=self.lease_seconds))
                observed.append(Metric("lease_renewed"))
            if sending.first_try is None:
                self.buffer = self.buffer.stored()
            elif isinstance(sending.first_try, Refused) and sending.first_try.data_error:
                # The rest went in without them, so the store refuses what the pending
                # records hold: sent again, they would be refused again, forever.
                observed.append(self._drop(self.buffer.pending, sending.first_try.error))
            return (*observed, *self._done(sending, None))
        if sending.first_try is None and sending.resent and not sending.after_pending:
            retry = attrs.evolve(sending, resent=(), first_try=outcome)
            return (
                _log("warning", "step.deferred", count=len(sending.resent), error=outcome.error),
                *self._commit(retry),
            )
        return self._done(sending, outcome)

    def _recorded(self, steps: Sequence[StepWrite]) -> tuple[Log | Metric, ...]:
        observed: list[Log | Metric] = []
        for step in steps:
            observed.append(
                _log(
                    "info",
                    "step.recorded",
                    seq=step.seq,
                    kind=step.kind.value,
                    tool=step.tool,
                    effect=None if step.effect is None else step.effect.value,
                    status=step.status.value,
                )
            )
            observed.append(Metric("step_recorded", (step.kind, step.effect)))
        kept = [step for step in steps if not step.withdraws]
        if kept:
            newest = max(kept, key=lambda s: s.seq)
            self.newest = (
                newest.effect,
                newest.status if newest.kind is StepKind.TOOL else None,
            )
        return tuple(observed)

    def _drop(self, steps: Sequence[StepWrite], error: str | None) -> Log:
        """Give up on fail-soft records (G5): the run goes on without them in its journal."""
        self.buffer = self.buffer.drop(steps)
        return _log(
            "warning",
            "step.dropped",
            count=len(steps),
            seqs=[step.seq for step in steps],
            error=error,
        )

    def _done(self, sending: _Sending, failed: Refused | Unanswered | None) -> tuple[Command, ...]:
        """Carry on after a commit: ``failed`` says how it was not stored, None if it was."""
        purpose = sending.purpose
        if isinstance(purpose, _Soft):
            observed: tuple[Command, ...] = ()
            if isinstance(failed, Refused) and failed.data_error:
                # Refused for what it holds, not for a passing fault: kept pending, it
                # would get every later record of this run refused along with it.
                observed = (self._drop(sending.fresh, failed.error),)
            elif failed is not None:
                self.buffer = attrs.evolve(
                    self.buffer, pending=(*self.buffer.pending, *sending.fresh)
                )
                observed = tuple(
                    _log("warning", "step.record_failed", seq=step.seq, error=failed.error)
                    for step in sending.fresh
                )
            if purpose.then_fail is not None:
                return (*observed, *purpose.after, *self._fail(purpose.then_fail))
            return (*observed, *purpose.after, *self._next())
        if isinstance(purpose, _Intent):
            if failed is None:
                self.phase = _Admitting(purpose.turn)
                return (*purpose.after, CrashPoint("after_intent"), CheckAdmission())
            if isinstance(failed, Refused):
                # Surely not stored: there is nothing for the settlement to withdraw.
                self.unstarted_intent = None
            call = purpose.turn.pending.call
            # G3: without a durable intent the tool is not called.
            error = StoreError(
                f"the intent of {call.name} (call {call.call_id}) could not be stored: "
                f"{failed.error}"
            )
            return self._fail(_Failure.of(error))
        if isinstance(purpose, _Outcome):
            if failed is None:
                return self._next()
            step = purpose.step
            return (
                _log("error", "audit.failed", seq=step.seq, tool=step.tool, error=failed.error),
                Metric("audit_failed"),
                *self._fail(
                    _Failure.of(
                        AuditPersistenceFailed(
                            f"{step.tool} (call {step.call_id}) ran but its result could not "
                            f"be recorded: {failed.error}"
                        )
                    )
                ),
            )
        if isinstance(purpose, _Raised):
            observed = ()
            if failed is not None:
                # The intent is still there, open: the write is handled as interrupted.
                step = purpose.step
                observed = (
                    _log(
                        "warning",
                        "step.record_failed",
                        seq=step.seq,
                        tool=step.tool,
                        error=failed.error,
                    ),
                )
            return (*observed, *self._fail(purpose.failure))
        if isinstance(purpose, _Renewal):
            if failed is None:
                self.phase = _Admitting(purpose.call, renewed=True)
                return (CheckAdmission(),)
            return self._not_admitted(
                f"the lease could not be renewed for the next call: {failed.error}"
            )
        return self._settled(purpose.settlement, failed)

    # -- settling --------------------------------------------------------------------

    def _settle(
        self, settlement: Settlement, withdrawn: tuple[StepWrite, ...] = ()
    ) -> tuple[Command, ...]:
        self.protecting = None
        # Requests name the provider turn that asked for their calls: it must be
        # stored with them, never left behind as a pending record.
        return (
            CrashPoint("settle"),
            *self._send(
                _Settling(settlement),
                withdrawn,
                settlement,
                after_pending=bool(settlement.requests),
            ),
        )

    def _settled(
        self, settlement: Settlement, failed: Refused | Unanswered | None
    ) -> tuple[Command, ...]:
        if failed is not None:
            # The lease will expire and the reaper applies recovery from the journal.
            # ("event" is the log line's own name: the transition goes under another key.)
            self.phase = _Stopped(None)
            return (
                _log(
                    "error",
                    "run.settle_failed",
                    transition=settlement.event.value,
                    error=failed.error,
                ),
                Stop(None),
            )
        self.phase = _Stopped(settlement)
        observed: list[Command] = [Metric("run_settled", (settlement.target,))]
        if self.buffer.pending:
            # Fail-soft records the store kept refusing; the run is over without them.
            observed.append(self._drop(self.buffer.pending, None))
        fields: dict[str, Any] = {"state": settlement.target.value}
        if settlement.reason is not None:
            fields["reason"] = settlement.reason.value
        if settlement.failure_class is not None:
            fields["failure_class"] = settlement.failure_class.value
        if settlement.event is Event.DEAD_LETTER:
            observed.append(_log("error", "run.dead_lettered", error=settlement.error, **fields))
            observed.append(Metric("dead_lettered", (settlement.reason,)))
        elif settlement.target in _WAITING:
            calls = [r.call_id for r in settlement.requests]
            observed.append(_log("info", "run.parked", calls=calls, **fields))
        elif settlement.event in (Event.REQUEUE, Event.RELEASE):
            observed.append(
                _log(
                    "info",
                    "run.requeued" if settlement.event is Event.REQUEUE else "lease.released",
                    delay_seconds=settlement.delay_seconds,
                    **fields,
                )
            )
        else:
            observed.append(_log("info", "run.settled", **fields))
        return (*observed, Stop(settlement))

    def _lease_lost(self) -> tuple[Command, ...]:
        self.protecting = None
        self.phase = _Stopped(None)
        return (_log("warning", "lease.lost"), Stop(None))

    def _cancelled(self) -> tuple[Command, ...]:
        if isinstance(self.phase, _Sending | _ReadingBack):
            sending = self.phase if isinstance(self.phase, _Sending) else self.phase.sending
            if isinstance(sending.purpose, _Settling):
                # The settle's answer is abandoned: the lease expires and the reaper recovers.
                self.phase = _Stopped(None)
                return (Stop(None),)
        withdrawn = self._withdraw_unstarted()
        return self._settle(self._stopped(), withdrawn)

    def _withdraw_unstarted(self) -> tuple[StepWrite, ...]:
        intent = self.unstarted_intent
        if intent is None:
            return ()
        self.unstarted_intent = None
        self.newest = self.before_intent
        return (attrs.evolve(intent, withdraws=True),)

    def _fail(self, failure: _Failure) -> tuple[Command, ...]:
        withdrawn = self._withdraw_unstarted()
        last_effect, last_status = self.newest
        recovery = decide_recovery(
            mode=self.mode,
            requeues=self.requeues,
            last_effect=last_effect,
            last_status=last_status,
            failure_class=failure.failure_class,
            reaped=False,
            audit_failed=failure.audit_failed,
            policy=self.policy,
            retry_after_seconds=failure.retry_after_seconds,
        )
        observed = _log(
            "warning",
            "run.attempt_failed",
            failure_class=failure.failure_class.value,
            action=recovery.action.value,
            error=failure.error,
        )
        settlement = settlement_after(
            recovery,
            failure_class=failure.failure_class,
            error=failure.error,
            cancel_requested=self.cancel_requested,
        )
        return (observed, *self._settle(settlement, withdrawn))

    def _stopped(self) -> Settlement:
        """The settlement for an attempt cut off by this process shutting down."""
        if self.mode is RunMode.QUEUED and self.newest[1] is not StepStatus.STARTED:
            return Settlement(Event.RELEASE)
        return self._recovered_from_interruption("the worker stopped during the call")

    def _recovered_from_interruption(self, error: str) -> Settlement:
        """What the reaper would decide for this attempt, had its lease expired now."""
        last_effect, last_status = self.newest
        recovery = decide_recovery(
            mode=self.mode,
            requeues=self.requeues,
            last_effect=last_effect,
            last_status=last_status,
            failure_class=FailureClass.CONNECTION,
            reaped=True,
            audit_failed=False,
            policy=self.policy,
        )
        return settlement_after(
            recovery,
            failure_class=FailureClass.CONNECTION,
            error=error,
            cancel_requested=self.cancel_requested,
        )
