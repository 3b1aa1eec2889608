"""A RunMachine's state, and the steps each concern of the machine takes on another's behalf.

Every field is an immutable value, and the Agent is consulted only for facts
(effects, argument schemas, approval policies, timeouts, max_steps, result
encoding): ``copy.copy`` or ``copy.deepcopy`` of a machine gives an independent
one, and ``snapshot()`` gives a hashable key of its state. The same events give
the same commands.

The machine's logic is split by concern into classes over this one (admission,
provider turns, calls that wait for a person, tool calls, commits, settling),
which ``RunMachine`` combines. A concern reaches another only through the steps
declared abstract here, so none imports another.
"""

from __future__ import annotations

import abc
import copy
import enum
from collections.abc import Mapping, Sequence
from typing import Any, Self

import attrs
import msgspec

from leaseward.runtime.agents import Agent
from leaseward.runtime.approvals import Gate
from leaseward.runtime.commits import Refused, Unanswered
from leaseward.runtime.conversation import PendingCall
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import RecoveryPolicy, RunMode, StepStatus
from leaseward.runtime.machine.commands import Command, Log
from leaseward.runtime.machine.phases import Idle, Phase, Purpose, Stopped
from leaseward.runtime.machine.state import Conversation, Failure, WriteBuffer, WriteRef
from leaseward.runtime.messages import Message, ToolCall
from leaseward.runtime.settlements import Settlement
from leaseward.runtime.tools import BoundTool

__all__ = ["CheckedArguments", "MachineCore"]

CheckedArguments = tuple[str | None, str | None, Mapping[str, Any]]
"""A call's arguments as JSON text (None if they have none), why they are refused (None
if they are not), and the keyword arguments the tool is called with (empty if refused)."""


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
    if isinstance(value, msgspec.Struct):
        names = value.__struct_fields__
        return (type(value).__name__, tuple(_frozen(getattr(value, name)) for name in names))
    if attrs.has(type(value)):
        fields = attrs.fields(type(value))
        return (type(value).__name__, tuple(_frozen(getattr(value, f.name)) for f in fields))
    return (type(value).__name__, repr(value))


@attrs.define(eq=False)
class MachineCore(abc.ABC):
    """The state of one attempt of one run, and what every concern may do with it."""

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
    phase: Phase = attrs.field(factory=Idle)
    conversation: Conversation = attrs.field(factory=Conversation)
    requests: tuple[HumanRequest, ...] = ()
    newest: tuple[ToolEffect | None, StepStatus | None] = (None, None)
    """Effect and status of the journal's newest row (status only for a tool row)."""
    before_intent: tuple[ToolEffect | None, StepStatus | None] = (None, None)
    buffer: WriteBuffer = attrs.field(factory=WriteBuffer)
    unstarted_intent: StepWrite | None = None
    """An intent sent whose call has not started: withdrawn if the attempt ends, so no
    later attempt takes a call that never started for one that may have run."""
    protecting: WriteRef | None = None
    """The write in flight that only a cut-off may interrupt."""
    observing: bool = True
    """Whether every step's routine observations (its info and debug logs) are made:
    the actor turns them off while neither a log handler nor a trace would take them."""

    # -- value semantics -------------------------------------------------------------

    def __copy__(self) -> Self:
        return attrs.evolve(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        # Every field is immutable and the Agent is shared facts, so a copy is independent.
        return copy.copy(self)

    def snapshot(self) -> Any:
        """A hashable key: equal for machines in equal states."""
        return _frozen(
            tuple(getattr(self, f.name) for f in attrs.fields(MachineCore) if f.name != "agent")
        )

    @property
    def stopped(self) -> bool:
        return isinstance(self.phase, Stopped)

    # -- the state's own bookkeeping -------------------------------------------------

    def _say(self, message: Message) -> None:
        talk = self.conversation
        self.conversation = msgspec.structs.replace(talk, messages=(*talk.messages, message))

    def _request(self, pending: PendingCall) -> HumanRequest | None:
        for request in self.requests:
            if request.seq == pending.turn_seq and request.call_id == pending.call.call_id:
                return request
        return None

    def _withdraw_unstarted(self) -> tuple[StepWrite, ...]:
        intent = self.unstarted_intent
        if intent is None:
            return ()
        self.unstarted_intent = None
        self.newest = self.before_intent
        return (msgspec.structs.replace(intent, withdraws=True),)

    # -- steps of one concern that others take ---------------------------------------

    @abc.abstractmethod
    def _next(self) -> tuple[Command, ...]:
        """At a step boundary: what the run does next (``RunMachine``)."""

    @abc.abstractmethod
    def _not_admitted(self, error: str) -> tuple[Command, ...]:
        """The call did not start: the run goes back to the queue (admission)."""

    @abc.abstractmethod
    def _tool_step(
        self, gate: Gate | None, checked: CheckedArguments | None
    ) -> tuple[Command, ...]:
        """Make the next call the model asked for, or answer it as decided; ``checked`` is
        the check of its arguments if one was made already (tool calls)."""

    @abc.abstractmethod
    def _check_arguments(self, bound: BoundTool | None, call: ToolCall) -> CheckedArguments:
        """The arguments' JSON text, why they are refused, if so, and the tool's keyword
        arguments (tool calls)."""

    @abc.abstractmethod
    def _send(
        self,
        purpose: Purpose,
        fresh: tuple[StepWrite, ...],
        settlement: Settlement | None = None,
        *,
        after_pending: bool = False,
    ) -> tuple[Command, ...]:
        """Commit ``fresh`` behind the pending records (commits)."""

    @abc.abstractmethod
    def _drop(self, steps: Sequence[StepWrite], error: str | None) -> Log:
        """Give up on fail-soft records (commits)."""

    @abc.abstractmethod
    def _settle(
        self, settlement: Settlement, withdrawn: tuple[StepWrite, ...] = ()
    ) -> tuple[Command, ...]:
        """End the attempt with ``settlement`` (settling)."""

    @abc.abstractmethod
    def _settled(
        self, settlement: Settlement, failed: Refused | Unanswered | None
    ) -> tuple[Command, ...]:
        """The settlement's commit is answered (settling)."""

    @abc.abstractmethod
    def _fail(self, failure: Failure) -> tuple[Command, ...]:
        """End the attempt as recovery decides for ``failure`` (settling)."""

    @abc.abstractmethod
    def _lease_lost(self) -> tuple[Command, ...]:
        """The store no longer holds the run at this epoch (settling)."""

    @abc.abstractmethod
    def _recovered_from_interruption(self, error: str) -> Settlement:
        """What the reaper would decide for this attempt, had its lease expired now
        (settling)."""
