"""The run state machine as a table, and the recovery decision as a pure function.

Every guarded update in the store names one row of ``TRANSITIONS``: its ``WHERE
state = ?`` is the row's source state, its new state the row's target.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import attrs

from leaseward.runtime.clock import MAX_DURATION_SECONDS
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.errors import ConfigurationError, IllegalTransition
from leaseward.runtime.failures import FailureClass

__all__ = [
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_CAP_SECONDS",
    "MAX_REQUEUES",
    "REDRIVABLE_REASONS",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "Event",
    "Reason",
    "Recovery",
    "RecoveryAction",
    "RecoveryPolicy",
    "RunMode",
    "RunState",
    "StepKind",
    "StepStatus",
    "decide_recovery",
    "source_state",
    "transition",
]


class RunState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    WAITING_FOR_INPUT = "waiting_for_input"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD_LETTERED = "dead_lettered"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED, RunState.DEAD_LETTERED}
)


class RunMode(enum.StrEnum):
    QUEUED = "queued"
    INTERACTIVE = "interactive"


class Reason(enum.StrEnum):
    COMPLETED = "completed"
    MAX_STEPS = "max_steps"
    CANCELLED = "cancelled"
    NOT_RETRYABLE = "not_retryable"
    RETRIES_EXHAUSTED = "retries_exhausted"
    INTERRUPTED_WRITE = "interrupted_write"
    AUDIT_FAILED = "audit_failed"
    INTERACTIVE_INTERRUPTED = "interactive_interrupted"
    INTERACTIVE_FAILED = "interactive_failed"


class StepKind(enum.StrEnum):
    PROVIDER = "provider"
    TOOL = "tool"


class StepStatus(enum.StrEnum):
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Event(enum.StrEnum):
    SUBMIT = "submit"
    START_INTERACTIVE = "start_interactive"
    CLAIM = "claim"
    COMPLETE = "complete"
    FAIL = "fail"
    DEAD_LETTER = "dead_letter"
    REQUEUE = "requeue"
    RELEASE = "release"
    CANCEL_QUEUED = "cancel_queued"
    CANCEL_RUNNING = "cancel_running"
    AWAIT_APPROVAL = "await_approval"
    AWAIT_INPUT = "await_input"
    APPROVE = "approve"
    PROVIDE_INPUT = "provide_input"
    CANCEL_WAITING_APPROVAL = "cancel_waiting_approval"
    CANCEL_WAITING_INPUT = "cancel_waiting_input"
    REDRIVE = "redrive"
    RESOLVE = "resolve"


# (event) -> (source state, target state); None as a source means "no run yet".
TRANSITIONS: dict[Event, tuple[RunState | None, RunState]] = {
    Event.SUBMIT: (None, RunState.QUEUED),
    Event.START_INTERACTIVE: (None, RunState.RUNNING),
    Event.CLAIM: (RunState.QUEUED, RunState.RUNNING),
    Event.COMPLETE: (RunState.RUNNING, RunState.COMPLETED),
    Event.FAIL: (RunState.RUNNING, RunState.FAILED),
    Event.DEAD_LETTER: (RunState.RUNNING, RunState.DEAD_LETTERED),
    Event.REQUEUE: (RunState.RUNNING, RunState.QUEUED),
    Event.RELEASE: (RunState.RUNNING, RunState.QUEUED),
    Event.CANCEL_QUEUED: (RunState.QUEUED, RunState.CANCELLED),
    Event.CANCEL_RUNNING: (RunState.RUNNING, RunState.CANCELLED),
    Event.AWAIT_APPROVAL: (RunState.RUNNING, RunState.WAITING_FOR_APPROVAL),
    Event.AWAIT_INPUT: (RunState.RUNNING, RunState.WAITING_FOR_INPUT),
    Event.APPROVE: (RunState.WAITING_FOR_APPROVAL, RunState.QUEUED),
    Event.PROVIDE_INPUT: (RunState.WAITING_FOR_INPUT, RunState.QUEUED),
    Event.CANCEL_WAITING_APPROVAL: (RunState.WAITING_FOR_APPROVAL, RunState.CANCELLED),
    Event.CANCEL_WAITING_INPUT: (RunState.WAITING_FOR_INPUT, RunState.CANCELLED),
    # The only ways out of a terminal state: operator actions, each under a new epoch (G9).
    Event.REDRIVE: (RunState.DEAD_LETTERED, RunState.QUEUED),
    Event.RESOLVE: (RunState.DEAD_LETTERED, RunState.QUEUED),
}

REDRIVABLE_REASONS = frozenset({Reason.NOT_RETRYABLE, Reason.RETRIES_EXHAUSTED})


def transition(state: RunState | None, event: Event) -> RunState:
    """The state after ``event``; raises IllegalTransition when ``state`` does not allow it."""
    source, target = TRANSITIONS[event]
    if state is not source:
        shown = state.value if state is not None else "nothing"
        raise IllegalTransition(f"a run in state {shown} cannot {event.value.replace('_', ' ')}")
    return target


def source_state(event: Event) -> RunState:
    """The one state an existing run must be in for ``event``: the guard of its update."""
    source = TRANSITIONS[event][0]
    if source is None:
        raise IllegalTransition(f"{event.value} creates a run; it has no source state")
    return source


MAX_REQUEUES = 3
BACKOFF_BASE_SECONDS = 30.0
BACKOFF_CAP_SECONDS = 600.0


def _requeues(owner: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"max_requeues must be an integer, 0 or more, not {value!r}")


def _backoff(owner: Any, attribute: attrs.Attribute[float], value: Any) -> None:
    # Applied to a failed run, text raises there (dead-lettering the run over it), and
    # NaN or a span past a year makes a time no store or calendar holds.
    number = not isinstance(value, bool) and isinstance(value, int | float)
    if not number or not 0 <= value <= MAX_DURATION_SECONDS:
        raise ConfigurationError(
            f"{attribute.name} must be 0 or more and at most {MAX_DURATION_SECONDS:.0f} "
            f"seconds (a year), not {value!r}"
        )


@attrs.frozen
class RecoveryPolicy:
    """How a queued run that failed is retried: at most ``max_requeues`` times, after
    ``backoff_base_seconds * 2**n``, at most ``backoff_cap_seconds``. A value that could
    not be applied raises ConfigurationError when the policy is made."""

    max_requeues: int = attrs.field(default=MAX_REQUEUES, validator=_requeues)
    backoff_base_seconds: float = attrs.field(default=BACKOFF_BASE_SECONDS, validator=_backoff)
    backoff_cap_seconds: float = attrs.field(default=BACKOFF_CAP_SECONDS, validator=_backoff)

    def backoff_seconds(self, requeues_used: int) -> float:
        # The exponent is bounded so a large count reaches the cap instead of overflowing.
        doubling = 2.0 ** min(requeues_used, 64)
        return float(min(self.backoff_cap_seconds, self.backoff_base_seconds * doubling))


class RecoveryAction(enum.StrEnum):
    REQUEUE = "requeue"
    DEAD_LETTER = "dead_letter"
    FAIL = "fail"


@attrs.frozen
class Recovery:
    action: RecoveryAction
    reason: Reason | None
    delay_seconds: float = 0.0

    @property
    def event(self) -> Event:
        return {
            RecoveryAction.REQUEUE: Event.REQUEUE,
            RecoveryAction.DEAD_LETTER: Event.DEAD_LETTER,
            RecoveryAction.FAIL: Event.FAIL,
        }[self.action]


def decide_recovery(
    *,
    mode: RunMode,
    requeues: int,
    last_effect: ToolEffect | None,
    last_status: StepStatus | None,
    failure_class: FailureClass,
    reaped: bool,
    audit_failed: bool,
    policy: RecoveryPolicy,
    retry_after_seconds: float | None = None,
) -> Recovery:
    """What to do with a run whose attempt ended without settling it.

    ``last_effect``/``last_status`` describe the newest journal row (None when
    the journal is empty or the newest row is a provider step); ``reaped`` says
    the lease expired rather than the attempt failing in-process (the reaper
    passes ``FailureClass.CONNECTION``: a lost worker is a lost connection).
    ``retry_after_seconds`` is how long the failed service asked to be left
    alone; a requeue waits that long, at most the backoff cap, instead of the
    backoff.
    """
    interrupted_non_idempotent = (
        last_effect is ToolEffect.NON_IDEMPOTENT_WRITE and last_status is StepStatus.STARTED
    )
    if mode is RunMode.INTERACTIVE:
        if reaped:
            return Recovery(RecoveryAction.FAIL, Reason.INTERACTIVE_INTERRUPTED)
        if audit_failed:
            return Recovery(RecoveryAction.FAIL, Reason.AUDIT_FAILED)
        return Recovery(RecoveryAction.FAIL, Reason.INTERACTIVE_FAILED)
    if interrupted_non_idempotent:
        return Recovery(RecoveryAction.DEAD_LETTER, Reason.INTERRUPTED_WRITE)
    if audit_failed:
        return Recovery(RecoveryAction.FAIL, Reason.AUDIT_FAILED)
    if not failure_class.retryable:
        return Recovery(RecoveryAction.DEAD_LETTER, Reason.NOT_RETRYABLE)
    if requeues >= policy.max_requeues:
        return Recovery(RecoveryAction.DEAD_LETTER, Reason.RETRIES_EXHAUSTED)
    # A worker lost once is retried at once; a run whose attempts keep ending in
    # reaps may be what kills its workers, so from its second retry on it backs
    # off like any other failure instead of crash-looping the fleet.
    if retry_after_seconds is not None and math.isfinite(retry_after_seconds):
        delay = min(max(retry_after_seconds, 0.0), policy.backoff_cap_seconds)
    elif reaped and requeues == 0:
        delay = 0.0
    else:
        delay = policy.backoff_seconds(requeues)
    return Recovery(RecoveryAction.REQUEUE, None, delay)
