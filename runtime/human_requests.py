"""Calls that wait for a person: the request for an approval or an input, and its decision."""

from __future__ import annotations

import enum
from typing import Any

import attrs

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.lifecycle import TRANSITIONS, Event, RunState

__all__ = [
    "EXPIRED_REASON",
    "Decision",
    "HumanRequest",
    "NewRequest",
    "RequestKind",
]


class RequestKind(enum.StrEnum):
    """What a parked call waits for: a person's approval, or a person's input."""

    APPROVAL = "approval"
    INPUT = "input"

    @property
    def waiting_state(self) -> RunState:
        return TRANSITIONS[self.park_event][1]

    @property
    def park_event(self) -> Event:
        return Event.AWAIT_APPROVAL if self is RequestKind.APPROVAL else Event.AWAIT_INPUT

    @property
    def resume_event(self) -> Event:
        """The transition that requeues a run once every request of its turn is decided."""
        return Event.APPROVE if self is RequestKind.APPROVAL else Event.PROVIDE_INPUT


class Decision(enum.StrEnum):
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    """Rejected by the reaper: nobody decided before the request's expiry."""
    ANSWERED = "answered"
    """An input request, answered with a value."""


EXPIRED_REASON = "approval expired"


@attrs.frozen
class NewRequest:
    """A call that waits for a person, recorded with the settlement that parks its run."""

    seq: int
    """The provider turn that asked for the call: with the call id, what names it."""
    position: int
    """The call's place in that turn."""
    call_id: str
    kind: RequestKind
    tool: str
    effect: ToolEffect
    arguments_json: str
    arguments_digest: str
    timeout_seconds: float | None = None
    """Until the request expires as a rejection; None waits for ever (input never expires)."""


@attrs.frozen
class HumanRequest:
    """A journaled request for a person's approval of one call, or for their input."""

    run_id: str
    agent: str
    seq: int
    position: int
    call_id: str
    kind: RequestKind
    tool: str
    effect: ToolEffect
    arguments: Any
    arguments_digest: str
    epoch: int
    """The lease epoch of the attempt that parked the run."""
    requested_at: float
    expires_at: float | None
    decision: Decision | None
    operator: str | None
    note: str | None
    """The approver's note, the rejection's reason, or "approval expired"."""
    value: Any
    """An input request's answer."""
    decided_at: float | None
    age_seconds: float
    """Since the request was made, on the store's clock, when it was read."""

    @property
    def pending(self) -> bool:
        return self.decision is None

    @property
    def question(self) -> Any:
        """What an input request asks: its ``question`` argument, or all its arguments."""
        if isinstance(self.arguments, dict) and "question" in self.arguments:
            return self.arguments["question"]
        return self.arguments
