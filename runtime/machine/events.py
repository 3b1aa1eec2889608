"""What the interpreter feeds a RunMachine: the answer to its last action, or news
that arrives between actions (``LeaseRenewed``, ``DrainRequested``, ``Cancelled``).

Which event answers which action is told with the commands, in ``commands``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from leaseward.runtime.commits import CommitOutcome
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.journal import StepInfo

__all__ = [
    "AdmissionCheck",
    "Cancelled",
    "Committed",
    "CutOff",
    "DrainRequested",
    "JournalLoaded",
    "JournalRead",
    "LeaseLost",
    "LeaseRenewed",
    "LoadFailed",
    "MachineEvent",
    "ProviderFailed",
    "ProviderReplied",
    "ReadFailed",
    "TimedOut",
    "ToolFailed",
    "ToolNotStarted",
    "ToolRaised",
    "ToolReturned",
    "UnexpectedEvent",
]


class JournalLoaded(msgspec.Struct, frozen=True):
    steps: tuple[StepInfo, ...]
    requests: tuple[HumanRequest, ...] = ()


class LoadFailed(msgspec.Struct, frozen=True):
    error: Exception


class Committed(msgspec.Struct, frozen=True):
    outcome: CommitOutcome
    sent_at: float
    """Monotonic time the commit was sent: a renewal's lease runs from then."""


class JournalRead(msgspec.Struct, frozen=True):
    steps: tuple[StepInfo, ...]


class ReadFailed(msgspec.Struct, frozen=True):
    error: str


class AdmissionCheck(msgspec.Struct, frozen=True):
    now: float
    """Monotonic."""
    wall: float
    """Wall clock: when the call begins, for its journal row."""


class ProviderReplied(msgspec.Struct, frozen=True):
    reply: Any
    """What the provider returned; anything but a ProviderReply fails the attempt."""
    latency_ms: float | None = None


class ProviderFailed(msgspec.Struct, frozen=True):
    error: Exception


class ToolReturned(msgspec.Struct, frozen=True):
    result: Any


class ToolFailed(msgspec.Struct, frozen=True):
    """The tool raised ToolError: a failure it reports to the model."""

    message: str


class ToolRaised(msgspec.Struct, frozen=True):
    """The tool raised something other than ToolError."""

    error: Exception


class ToolNotStarted(msgspec.Struct, frozen=True):
    """The tool raised CallNotStarted: its request never left the process."""

    error: Exception


class TimedOut(msgspec.Struct, frozen=True):
    """The call in flight did not return within its own timeout."""


class CutOff(msgspec.Struct, frozen=True):
    """The keeper cancelled the call in flight: its lease could not be renewed."""

    reason: str


class LeaseLost(msgspec.Struct, frozen=True):
    """The store no longer holds the run at this epoch (seen by the keeper)."""


class LeaseRenewed(msgspec.Struct, frozen=True):
    """The keeper renewed the lease while a call ran."""

    deadline: float
    cancel_requested: bool = False


class Cancelled(msgspec.Struct, frozen=True):
    """The worker is stopping this attempt."""


class DrainRequested(msgspec.Struct, frozen=True):
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
    | ToolNotStarted
    | TimedOut
    | CutOff
    | LeaseLost
    | LeaseRenewed
    | Cancelled
    | DrainRequested
)


class UnexpectedEvent(Exception):
    """An event the machine was not waiting for: the interpreter broke the protocol."""
