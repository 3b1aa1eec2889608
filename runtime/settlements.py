"""How an attempt leaves a run: the transition, and what is recorded with it."""

from __future__ import annotations

import attrs

from leaseward.runtime.encoding import valid_error
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.human_requests import NewRequest
from leaseward.runtime.lifecycle import (
    TRANSITIONS,
    Event,
    Reason,
    Recovery,
    RecoveryAction,
    RunState,
)

__all__ = [
    "Settlement",
    "settlement_after",
]


@attrs.frozen
class Settlement:
    """How an attempt leaves a run: the transition and what to record with it."""

    event: Event
    reason: Reason | None = None
    failure_class: FailureClass | None = None
    result_json: str | None = None
    error: str | None = attrs.field(default=None, converter=valid_error)
    delay_seconds: float = 0.0
    spends_retry: bool = False
    requests: tuple[NewRequest, ...] = ()
    """Calls that wait for a person, stored with a settlement that parks the run."""

    @property
    def target(self) -> RunState:
        return TRANSITIONS[self.event][1]

    @property
    def queues_now(self) -> bool:
        """Whether it puts the run back in the queue at once, not after a backoff: a
        worker may claim it as soon as it is stored."""
        return self.target is RunState.QUEUED and self.delay_seconds <= 0


def settlement_after(
    recovery: Recovery, *, failure_class: FailureClass, error: str, cancel_requested: bool
) -> Settlement:
    """The settlement that carries out a recovery decision.

    A run someone asked to cancel is not put back in the queue: it is cancelled.
    """
    if recovery.action is RecoveryAction.REQUEUE:
        if cancel_requested:
            return Settlement(Event.CANCEL_RUNNING, Reason.CANCELLED, error=error)
        return Settlement(
            Event.REQUEUE,
            None,
            failure_class=failure_class,
            error=error,
            delay_seconds=recovery.delay_seconds,
            spends_retry=True,
        )
    return Settlement(recovery.event, recovery.reason, failure_class=failure_class, error=error)
