"""What the interpreter feeds a RunMachine: the answer to its last action, or news
that arrives between actions (``LeaseRenewed``, ``DrainRequested``, ``Cancelled``).

Which event answers which action is told with the commands, in ``commands``.
"""

from __future__ import annotations

from typing import Any

import attrs

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
class ToolNotStarted:
    """The tool raised CallNotStarted: its request never left the process."""

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
