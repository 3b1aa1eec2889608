"""decide_recovery checked exhaustively against an oracle, settlement_after, and plan_reap."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import attrs
import msgspec
import pytest

from leaseward.actors.reaper import plan_reap
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.errors import ConfigurationError
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.journal import StepInfo, StepWrite
from leaseward.runtime.lifecycle import (
    Event,
    Reason,
    Recovery,
    RecoveryAction,
    RecoveryPolicy,
    RunMode,
    RunState,
    StepKind,
    StepStatus,
    decide_recovery,
)
from leaseward.runtime.runs import RunRecord
from leaseward.runtime.settlements import Settlement, settlement_after
from leaseward.storage.protocol import ExpiredRun

POLICY = RecoveryPolicy(max_requeues=3)
RETRYABLE_NAMES = {"connection", "rate_limit", "server_error", "circuit_open", "timeout"}


def oracle(
    *,
    mode: str,
    requeues: int,
    effect: str | None,
    status: str | None,
    failure: str,
    reaped: bool,
    audit_failed: bool,
    max_requeues: int = 3,
    base: float = 30.0,
    cap: float = 600.0,
    retry_after: float | None = None,
) -> tuple[str, str | None, float]:
    """DESIGN section 6 and the project rules, written with plain strings."""
    if mode == "interactive":
        if reaped:
            return ("fail", "interactive_interrupted", 0.0)
        if audit_failed:
            return ("fail", "audit_failed", 0.0)
        return ("fail", "interactive_failed", 0.0)
    if effect == "non_idempotent_write" and status == "started":
        return ("dead_letter", "interrupted_write", 0.0)
    if audit_failed:
        return ("fail", "audit_failed", 0.0)
    if failure not in RETRYABLE_NAMES:
        return ("dead_letter", "not_retryable", 0.0)
    if requeues >= max_requeues:
        return ("dead_letter", "retries_exhausted", 0.0)
    if retry_after is not None and math.isfinite(retry_after):
        # The service said how long to wait: that, within [0, cap], instead of the backoff.
        return ("requeue", None, min(cap, max(0.0, retry_after)))
    delay = 0.0 if reaped and requeues == 0 else min(cap, base * (2**requeues))
    return ("requeue", None, delay)


def as_tuple(recovery: Recovery) -> tuple[str, str | None, float]:
    reason = None if recovery.reason is None else recovery.reason.value
    return (recovery.action.value, reason, recovery.delay_seconds)


EFFECTS: list[ToolEffect | None] = [None, *ToolEffect]
RETRY_AFTERS = [None, 0.0, 7.5, -1.0, 10_000.0, math.nan, math.inf]
STATUSES: list[StepStatus | None] = [None, *StepStatus]


def test_axes_are_complete() -> None:
    assert len(EFFECTS) == 4
    assert len(STATUSES) == 4
    assert len(FailureClass) == 9
    assert len(RunMode) == 2


def test_decide_recovery_exhaustively() -> None:
    seen: set[tuple[str, str | None]] = set()
    count = 0
    for effect, status, failure, mode, requeues, reaped, audit_failed, after in itertools.product(
        EFFECTS,
        STATUSES,
        FailureClass,
        RunMode,
        range(5),
        (False, True),
        (False, True),
        RETRY_AFTERS,
    ):
        result = decide_recovery(
            mode=mode,
            requeues=requeues,
            last_effect=effect,
            last_status=status,
            failure_class=failure,
            reaped=reaped,
            audit_failed=audit_failed,
            policy=POLICY,
            retry_after_seconds=after,
        )
        assert isinstance(result, Recovery)
        expected = oracle(
            mode=mode.value,
            requeues=requeues,
            effect=None if effect is None else effect.value,
            status=None if status is None else status.value,
            failure=failure.value,
            reaped=reaped,
            audit_failed=audit_failed,
            retry_after=after,
        )
        assert as_tuple(result) == expected, (effect, status, failure, mode, requeues, after)
        seen.add(expected[:2])
        count += 1
    assert count == 4 * 4 * 9 * 2 * 5 * 2 * 2 * len(RETRY_AFTERS)
    # Every outcome the rules can produce was actually reached.
    assert seen == {
        ("fail", "interactive_interrupted"),
        ("fail", "interactive_failed"),
        ("fail", "audit_failed"),
        ("dead_letter", "interrupted_write"),
        ("dead_letter", "not_retryable"),
        ("dead_letter", "retries_exhausted"),
        ("requeue", None),
    }


def test_decide_recovery_honours_a_custom_policy() -> None:
    policy = RecoveryPolicy(max_requeues=6, backoff_base_seconds=2.0, backoff_cap_seconds=20.0)
    for requeues in range(8):
        result = decide_recovery(
            mode=RunMode.QUEUED,
            requeues=requeues,
            last_effect=ToolEffect.IDEMPOTENT_WRITE,
            last_status=StepStatus.STARTED,
            failure_class=FailureClass.RATE_LIMIT,
            reaped=False,
            audit_failed=False,
            policy=policy,
        )
        assert as_tuple(result) == oracle(
            mode="queued",
            requeues=requeues,
            effect="idempotent_write",
            status="started",
            failure="rate_limit",
            reaped=False,
            audit_failed=False,
            max_requeues=6,
            base=2.0,
            cap=20.0,
        )


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ({"max_requeues": -1}, "max_requeues"),
        ({"max_requeues": 1.5}, "max_requeues"),
        ({"max_requeues": True}, "max_requeues"),
        ({"backoff_base_seconds": "30"}, "backoff_base_seconds"),
        ({"backoff_base_seconds": math.nan}, "backoff_base_seconds"),
        ({"backoff_base_seconds": -5}, "backoff_base_seconds"),
        ({"backoff_cap_seconds": math.inf}, "backoff_cap_seconds"),
        ({"backoff_cap_seconds": 10 * 365 * 24 * 3600}, "backoff_cap_seconds"),
    ],
)
def test_a_policy_that_cannot_be_applied_is_refused_when_it_is_made(
    given: dict[str, Any], fragment: str
) -> None:
    # Applied, each would dead-letter a run over a TypeError, or retry it never (NaN, inf).
    with pytest.raises(ConfigurationError, match=fragment):
        RecoveryPolicy(**given)


def test_a_policy_may_retry_at_once() -> None:
    assert RecoveryPolicy(backoff_base_seconds=0, max_requeues=0).backoff_seconds(3) == 0.0


@pytest.mark.parametrize(
    ("effect", "expected"),
    [
        (ToolEffect.NON_IDEMPOTENT_WRITE, ("dead_letter", "interrupted_write", 0.0)),
        (ToolEffect.IDEMPOTENT_WRITE, ("requeue", None, 30.0)),
        (ToolEffect.READ_ONLY, ("requeue", None, 30.0)),
    ],
)
def test_a_timed_out_call_is_retried_unless_it_is_a_non_idempotent_write(
    effect: ToolEffect, expected: tuple[str, str | None, float]
) -> None:
    # A write's intent stays open when its call times out; a read's row is settled failed.
    status = StepStatus.STARTED if effect.is_write else StepStatus.FAILED
    result = decide_recovery(
        mode=RunMode.QUEUED,
        requeues=0,
        last_effect=effect,
        last_status=status,
        failure_class=FailureClass.TIMEOUT,
        reaped=False,
        audit_failed=False,
        policy=POLICY,
    )
    assert as_tuple(result) == expected


def test_zero_max_requeues_never_requeues() -> None:
    result = decide_recovery(
        mode=RunMode.QUEUED,
        requeues=0,
        last_effect=None,
        last_status=None,
        failure_class=FailureClass.CONNECTION,
        reaped=True,
        audit_failed=False,
        policy=RecoveryPolicy(max_requeues=0),
    )
    assert result.action is RecoveryAction.DEAD_LETTER
    assert result.reason is Reason.RETRIES_EXHAUSTED


# --- settlement_after -------------------------------------------------------------------------


def test_requeue_settlement_spends_a_retry() -> None:
    recovery = Recovery(RecoveryAction.REQUEUE, None, 60.0)
    settlement = settlement_after(
        recovery, failure_class=FailureClass.SERVER_ERROR, error="boom", cancel_requested=False
    )
    assert settlement == Settlement(
        Event.REQUEUE,
        None,
        failure_class=FailureClass.SERVER_ERROR,
        error="boom",
        delay_seconds=60.0,
        spends_retry=True,
    )
    assert settlement.target is RunState.QUEUED


def test_requeue_of_a_run_asked_to_cancel_cancels_it() -> None:
    recovery = Recovery(RecoveryAction.REQUEUE, None, 60.0)
    settlement = settlement_after(
        recovery, failure_class=FailureClass.CONNECTION, error="boom", cancel_requested=True
    )
    assert settlement.event is Event.CANCEL_RUNNING
    assert settlement.reason is Reason.CANCELLED
    assert settlement.target is RunState.CANCELLED
    assert settlement.spends_retry is False
    assert settlement.delay_seconds == 0.0
    assert settlement.error == "boom"


@pytest.mark.parametrize("cancel_requested", [False, True])
@pytest.mark.parametrize(
    "reason", [Reason.INTERRUPTED_WRITE, Reason.NOT_RETRYABLE, Reason.RETRIES_EXHAUSTED]
)
def test_dead_letter_settlement_keeps_reason_and_class(
    reason: Reason, cancel_requested: bool
) -> None:
    settlement = settlement_after(
        Recovery(RecoveryAction.DEAD_LETTER, reason),
        failure_class=FailureClass.AUTH,
        error="denied",
        cancel_requested=cancel_requested,
    )
    assert settlement.event is Event.DEAD_LETTER
    assert settlement.target is RunState.DEAD_LETTERED
    assert settlement.reason is reason
    assert settlement.failure_class is FailureClass.AUTH
    assert settlement.error == "denied"
    assert settlement.spends_retry is False


@pytest.mark.parametrize(
    "reason", [Reason.AUDIT_FAILED, Reason.INTERACTIVE_FAILED, Reason.INTERACTIVE_INTERRUPTED]
)
def test_fail_settlement(reason: Reason) -> None:
    settlement = settlement_after(
        Recovery(RecoveryAction.FAIL, reason),
        failure_class=FailureClass.UNKNOWN,
        error="x",
        cancel_requested=True,
    )
    assert settlement.event is Event.FAIL
    assert settlement.target is RunState.FAILED
    assert settlement.reason is reason
    assert settlement.failure_class is FailureClass.UNKNOWN
    assert settlement.spends_retry is False


# --- plan_reap ----------------------------------------------------------------------------------


def record(**changes: Any) -> RunRecord:
    fields: dict[str, Any] = {
        "id": "run-1",
        "agent": "agent",
        "mode": RunMode.QUEUED,
        "state": RunState.RUNNING,
        "reason": None,
        "failure_class": None,
        "input": "hi",
        "result": None,
        "error": None,
        "epoch": 2,
        "requeues": 0,
        "lease_owner": "worker-a",
        "lease_expires_at": 100.0,
        "available_at": 0.0,
        "cancel_requested": False,
        "created_at": 0.0,
        "updated_at": 50.0,
        "finished_at": None,
    }
    fields.update(changes)
    return RunRecord(**fields)


def expired(
    effect: ToolEffect | None = None, status: StepStatus | None = None, **changes: Any
) -> ExpiredRun:
    return ExpiredRun(run=record(**changes), last_effect=effect, last_status=status, renewals=1)


def test_reap_requeues_at_once_and_spends_a_retry() -> None:
    settlement = plan_reap(expired(requeues=0), POLICY)
    assert settlement.event is Event.REQUEUE
    assert settlement.delay_seconds == 0.0
    assert settlement.spends_retry is True
    assert settlement.failure_class is FailureClass.CONNECTION
    assert settlement.error is not None
    assert "worker-a" in settlement.error


def test_reap_of_an_interrupted_non_idempotent_write_dead_letters() -> None:
    settlement = plan_reap(
        expired(ToolEffect.NON_IDEMPOTENT_WRITE, StepStatus.STARTED, cancel_requested=True),
        POLICY,
    )
    assert settlement.event is Event.DEAD_LETTER
    assert settlement.reason is Reason.INTERRUPTED_WRITE
    assert settlement.failure_class is FailureClass.CONNECTION


@pytest.mark.parametrize(
    ("effect", "status"),
    [
        (ToolEffect.IDEMPOTENT_WRITE, StepStatus.STARTED),
        (ToolEffect.READ_ONLY, StepStatus.STARTED),
        (ToolEffect.NON_IDEMPOTENT_WRITE, StepStatus.SUCCEEDED),
        (ToolEffect.NON_IDEMPOTENT_WRITE, StepStatus.FAILED),
        (None, None),
    ],
)
def test_reap_of_other_interrupted_steps_requeues(
    effect: ToolEffect | None, status: StepStatus | None
) -> None:
    assert plan_reap(expired(effect, status), POLICY).event is Event.REQUEUE


def test_reap_with_retries_exhausted_dead_letters() -> None:
    settlement = plan_reap(expired(requeues=3), POLICY)
    assert settlement.event is Event.DEAD_LETTER
    assert settlement.reason is Reason.RETRIES_EXHAUSTED


def test_reap_of_a_run_asked_to_cancel_cancels_it() -> None:
    settlement = plan_reap(expired(cancel_requested=True), POLICY)
    assert settlement.event is Event.CANCEL_RUNNING
    assert settlement.reason is Reason.CANCELLED
    assert settlement.spends_retry is False


@pytest.mark.parametrize("cancel_requested", [False, True])
@pytest.mark.parametrize(
    ("effect", "status"), [(None, None), (ToolEffect.NON_IDEMPOTENT_WRITE, StepStatus.STARTED)]
)
def test_reap_of_an_interactive_run_fails_it(
    effect: ToolEffect | None, status: StepStatus | None, cancel_requested: bool
) -> None:
    settlement = plan_reap(
        expired(effect, status, mode=RunMode.INTERACTIVE, cancel_requested=cancel_requested),
        POLICY,
    )
    assert settlement.event is Event.FAIL
    assert settlement.reason is Reason.INTERACTIVE_INTERRUPTED
    assert settlement.target is RunState.FAILED


def test_plan_reap_uses_the_policy() -> None:
    assert plan_reap(expired(requeues=1), RecoveryPolicy(max_requeues=1)).reason is (
        Reason.RETRIES_EXHAUSTED
    )
    assert plan_reap(expired(requeues=1), RecoveryPolicy(max_requeues=2)).event is Event.REQUEUE


def test_a_run_reaped_again_backs_off_instead_of_crash_looping() -> None:
    policy = RecoveryPolicy(max_requeues=3, backoff_base_seconds=30.0)

    def after_reap(requeues: int) -> Recovery:
        return decide_recovery(
            mode=RunMode.QUEUED,
            requeues=requeues,
            last_effect=ToolEffect.READ_ONLY,
            last_status=StepStatus.STARTED,
            failure_class=FailureClass.CONNECTION,
            reaped=True,
            audit_failed=False,
            policy=policy,
        )

    assert as_tuple(after_reap(0)) == ("requeue", None, 0.0)
    assert as_tuple(after_reap(1)) == ("requeue", None, 60.0)
    assert as_tuple(after_reap(2)) == ("requeue", None, 120.0)
    assert as_tuple(after_reap(3)) == ("dead_letter", "retries_exhausted", 0.0)


# -- reading back a commit whose answer was lost ------------------------------------------

SENT = StepWrite(
    seq=3,
    kind=StepKind.TOOL,
    status=StepStatus.SUCCEEDED,
    tool="charge",
    call_id="c1",
    effect=ToolEffect.NON_IDEMPOTENT_WRITE,
    idempotency_key="k",
    arguments_json='{"amount":5}',
    output_json='{"applied":5}',
    settles=True,
)


def row_of(step: StepWrite, epoch: int = 2, **changes: Any) -> StepInfo:
    row = StepInfo(
        run_id="r",
        seq=step.seq,
        epoch=epoch,
        kind=step.kind,
        tool=step.tool,
        call_id=step.call_id,
        effect=step.effect,
        status=step.status,
        idempotency_key=step.idempotency_key,
        arguments=json.loads(step.arguments_json or "null"),
        output=json.loads(step.output_json or "null"),
        error=step.error,
        started_at=1.0,
        finished_at=2.0,
    )
    return attrs.evolve(row, **changes)


def test_a_row_exactly_as_sent_under_the_epoch_shows_the_change_stored() -> None:
    assert SENT.stored_in(row_of(SENT), epoch=2)


@pytest.mark.parametrize(
    "changes",
    [
        {"epoch": 1},
        {"status": StepStatus.STARTED, "output": None},
        {"output": {"applied": 6}},
        {"arguments": {"amount": 6}},
        {"idempotency_key": "other"},
        {"error": "refused"},
    ],
)
def test_a_row_that_differs_does_not(changes: dict[str, Any]) -> None:
    assert not SENT.stored_in(row_of(SENT, **changes), epoch=2)


def test_no_row_shows_a_withdrawal_stored_and_nothing_else() -> None:
    assert not SENT.stored_in(None, epoch=2)
    withdrawal = msgspec.structs.replace(
        SENT, status=StepStatus.STARTED, output_json=None, withdraws=True
    )
    assert withdrawal.stored_in(None, epoch=2)
    assert not withdrawal.stored_in(row_of(withdrawal), epoch=2)
