"""What a RunMachine waits for (its phase), the call it is about to make, and what a
commit in flight is for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from leaseward.runtime.commits import CommitOutcome, Unanswered
from leaseward.runtime.conversation import PendingCall
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.machine.commands import Log, Metric
from leaseward.runtime.machine.state import Failure
from leaseward.runtime.settlements import Settlement

__all__ = [
    "Admitting",
    "Asking",
    "Calling",
    "Idle",
    "Intent",
    "Loading",
    "Outcome",
    "Phase",
    "ProviderTurn",
    "Purpose",
    "Raised",
    "ReadingBack",
    "Renewal",
    "Sending",
    "Settling",
    "Soft",
    "Stopped",
    "ToolTurn",
]


@attrs.frozen
class ProviderTurn:
    pass


@attrs.frozen
class ToolTurn:
    pending: PendingCall
    base: StepWrite
    arguments: Mapping[str, Any]
    """The keyword arguments the tool is called with, as the check of the call made them."""
    needs_intent: bool
    timeout_seconds: float
    tool_effect: ToolEffect
    """The effect the tool declares (the base row's effect is the resolver's)."""


# What happens once a commit is answered.
@attrs.frozen
class Soft:
    after: tuple[Log | Metric, ...] = ()
    then_fail: Failure | None = None


@attrs.frozen
class Intent:
    turn: ToolTurn
    after: tuple[Log | Metric, ...] = ()


@attrs.frozen
class Outcome:
    step: StepWrite


@attrs.frozen
class Raised:
    step: StepWrite
    failure: Failure


@attrs.frozen
class Renewal:
    call: ProviderTurn | ToolTurn


@attrs.frozen
class Settling:
    settlement: Settlement


Purpose = Soft | Intent | Outcome | Raised | Renewal | Settling


# Phases: what the machine waits for.
@attrs.frozen
class Idle:
    pass


@attrs.frozen
class Loading:
    pass


@attrs.frozen
class Admitting:
    call: ProviderTurn | ToolTurn
    renewed: bool = False


@attrs.frozen
class Sending:
    purpose: Purpose
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
class ReadingBack:
    sending: Sending
    unanswered: Unanswered


@attrs.frozen
class Asking:
    started_at: float


@attrs.frozen
class Calling:
    turn: ToolTurn


@attrs.frozen
class Stopped:
    settlement: Settlement | None


Phase = Idle | Loading | Admitting | Sending | ReadingBack | Asking | Calling | Stopped
