"""What a RunMachine waits for (its phase), the call it is about to make, and what a
commit in flight is for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

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


class ProviderTurn(msgspec.Struct, frozen=True):
    pass


class ToolTurn(msgspec.Struct, frozen=True):
    pending: PendingCall
    base: StepWrite
    arguments: Mapping[str, Any]
    """The keyword arguments the tool is called with, as the check of the call made them."""
    needs_intent: bool
    timeout_seconds: float
    tool_effect: ToolEffect
    """The effect the tool declares (the base row's effect is the resolver's)."""


# What happens once a commit is answered.
class Soft(msgspec.Struct, frozen=True):
    after: tuple[Log | Metric, ...] = ()
    then_fail: Failure | None = None


class Intent(msgspec.Struct, frozen=True):
    turn: ToolTurn
    after: tuple[Log | Metric, ...] = ()


class Outcome(msgspec.Struct, frozen=True):
    step: StepWrite


class Raised(msgspec.Struct, frozen=True):
    step: StepWrite
    failure: Failure


class Renewal(msgspec.Struct, frozen=True):
    call: ProviderTurn | ToolTurn


class Settling(msgspec.Struct, frozen=True):
    settlement: Settlement


Purpose = Soft | Intent | Outcome | Raised | Renewal | Settling


# Phases: what the machine waits for.
class Idle(msgspec.Struct, frozen=True):
    pass


class Loading(msgspec.Struct, frozen=True):
    pass


class Admitting(msgspec.Struct, frozen=True):
    call: ProviderTurn | ToolTurn
    renewed: bool = False


class Sending(msgspec.Struct, frozen=True):
    purpose: Purpose
    resent: tuple[StepWrite, ...]
    fresh: tuple[StepWrite, ...]
    settlement: Settlement | None
    after_pending: bool
    renew_from: float
    """As the commit's: sent from then on, it renews the lease."""
    first_try: CommitOutcome | None = None
    """Set when this is the second try, without the pending records that the first
    carried: how the first ended."""

    @property
    def steps(self) -> tuple[StepWrite, ...]:
        return (*self.resent, *self.fresh)


class ReadingBack(msgspec.Struct, frozen=True):
    sending: Sending
    unanswered: Unanswered


class Asking(msgspec.Struct, frozen=True):
    started_at: float


class Calling(msgspec.Struct, frozen=True):
    turn: ToolTurn


class Stopped(msgspec.Struct, frozen=True):
    settlement: Settlement | None


Phase = Idle | Loading | Admitting | Sending | ReadingBack | Asking | Calling | Stopped
