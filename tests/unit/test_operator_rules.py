"""What redrive and resolve may do in which state, with the words a person reads."""

from __future__ import annotations

import pytest

from leaseward.runtime.errors import NotAwaitingResolution, NothingToResolve, NotRedrivable
from leaseward.runtime.lifecycle import Reason, RunMode, RunState
from leaseward.runtime.operator_rules import check_redrive, check_resolve
from leaseward.runtime.runs import RunRecord


def run(state: RunState, reason: Reason | None) -> RunRecord:
    return RunRecord(
        id="run-1",
        agent="agent",
        mode=RunMode.QUEUED,
        state=state,
        reason=reason,
        failure_class=None,
        input="hi",
        result=None,
        error=None,
        epoch=1,
        requeues=0,
        lease_owner=None,
        lease_expires_at=None,
        available_at=0.0,
        cancel_requested=False,
        created_at=0.0,
        updated_at=0.0,
        finished_at=None,
    )


DEAD = RunState.DEAD_LETTERED


@pytest.mark.parametrize("reason", [Reason.NOT_RETRYABLE, Reason.RETRIES_EXHAUSTED])
def test_a_run_dead_lettered_for_its_failures_is_redriven(reason: Reason) -> None:
    check_redrive(run(DEAD, reason), call_open=False)


def test_an_interrupted_write_with_its_outcome_recorded_is_redriven() -> None:
    check_redrive(run(DEAD, Reason.INTERRUPTED_WRITE), call_open=False)


def test_an_interrupted_write_with_an_open_call_needs_a_resolution() -> None:
    with pytest.raises(NotRedrivable) as refused:
        check_redrive(run(DEAD, Reason.INTERRUPTED_WRITE), call_open=True)
    assert refused.value.message == (
        "run run-1 is dead_lettered (interrupted_write): only a run dead-lettered "
        "not_retryable or retries_exhausted, or interrupted_write with its call's "
        "outcome recorded, can be redriven; an interrupted write needs `resolve` "
        "(did the call apply?)"
    )


def test_a_run_not_dead_lettered_is_not_redriven() -> None:
    with pytest.raises(NotRedrivable) as refused:
        check_redrive(run(RunState.COMPLETED, None), call_open=False)
    assert refused.value.state == "completed"
    assert refused.value.message.startswith("run run-1 is completed: only a run")
    assert "resolve" not in refused.value.message


def test_an_interrupted_call_is_resolved() -> None:
    check_resolve(run(DEAD, Reason.INTERRUPTED_WRITE), call_open=True)


def test_only_an_interrupted_write_waits_for_a_resolution() -> None:
    with pytest.raises(NotAwaitingResolution) as refused:
        check_resolve(run(DEAD, Reason.NOT_RETRYABLE), call_open=True)
    assert refused.value.message == (
        "run run-1 is dead_lettered (not_retryable): only a run dead-lettered "
        "interrupted_write waits for a resolution"
    )


def test_a_recorded_outcome_leaves_nothing_to_resolve() -> None:
    with pytest.raises(NothingToResolve) as refused:
        check_resolve(run(DEAD, Reason.INTERRUPTED_WRITE), call_open=False)
    assert refused.value.message == (
        "run run-1 has no interrupted call to resolve: its journal records the outcome "
        "of its last call; `redrive` puts it back in the queue"
    )
