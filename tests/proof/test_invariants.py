"""The invariant counter counts what it claims to: each violation, built by hand, is seen."""

from __future__ import annotations

from typing import Any

from leaseward import RunMode, RunState, StepKind, StepStatus, ToolEffect
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.runs import RunRecord
from tests.proof.invariants import RESUME_GRACE_SECONDS, Journal, ProcessLife, count
from tests.proof.proof_app import CALL_ID

RUN = "r1"


def run(state: RunState) -> RunRecord:
    return RunRecord(
        id=RUN,
        agent="non_idempotent",
        mode=RunMode.QUEUED,
        state=state,
        reason=None,
        failure_class=None,
        input=None,
        result=None,
        error=None,
        epoch=2,
        requeues=0,
        lease_owner=None,
        lease_expires_at=None,
        available_at=0.0,
        cancel_requested=False,
        created_at=0.0,
        updated_at=0.0,
        finished_at=None,
    )


def row(epoch: int, status: StepStatus, seq: int = 1) -> StepInfo:
    return StepInfo(
        run_id=RUN,
        seq=seq,
        epoch=epoch,
        kind=StepKind.TOOL,
        status=status,
        tool="charge",
        call_id=CALL_ID,
        effect=ToolEffect.NON_IDEMPOTENT_WRITE,
        idempotency_key="k",
        arguments={"amount": 5},
        output=None,
        error=None,
        started_at=0.0,
        finished_at=None,
    )


def execution(pid: int, epoch: int, start: float, end: float | None, **extra: Any) -> list[Any]:
    line = {"run_id": RUN, "call_id": CALL_ID, "epoch": epoch, "pid": pid}
    line |= {"effect": "non_idempotent", **extra}
    lines = [{**line, "ev": "start", "t": start}]
    return lines + ([{**line, "ev": "end", "t": end}] if end is not None else [])


def tally(ledger: list[Any], state: RunState, steps: list[StepInfo], **lives: Any) -> Any:
    journal = Journal({RUN: run(state)}, {RUN: steps})
    return count(ledger, journal, {int(k[1:]): v for k, v in lives.items()}, now=100.0)


def test_a_clean_history_counts_nothing() -> None:
    found = tally(execution(1, 1, 1.0, 2.0), RunState.COMPLETED, [row(1, StepStatus.SUCCEEDED)])
    assert set(found.values()) == {0}


def test_each_violation_is_counted() -> None:
    assert tally([], RunState.RUNNING, [])["lost"] == 1
    twice = execution(1, 1, 1.0, 2.0) + execution(2, 2, 3.0, 4.0)
    steps = [row(1, StepStatus.STARTED), row(2, StepStatus.SUCCEEDED, seq=2)]
    assert tally(twice, RunState.COMPLETED, steps)["twice"] == 1
    assert tally(execution(1, 1, 1.0, 2.0), RunState.DEAD_LETTERED, [])["no_intent"] == 1
    unrecorded = tally(execution(1, 1, 1.0, 2.0), RunState.COMPLETED, [row(1, StepStatus.STARTED)])
    assert unrecorded["unrecorded"] == 1
    bad = execution(1, 1, 1.0, 2.0, call_id="bad-1")
    assert tally(bad, RunState.DEAD_LETTERED, [])["bad_executed"] == 1


def test_overlapping_holders_count_unless_one_was_stopped_or_dead() -> None:
    both = execution(1, 1, 1.0, 5.0, effect="read_only") + execution(
        2, 2, 2.0, 3.0, effect="read_only"
    )
    assert tally(both, RunState.COMPLETED, [])["two_holders"] == 1
    paused = ProcessLife(pauses=[(1.5, 4.0)])
    assert tally(both, RunState.COMPLETED, [], p1=paused)["two_holders"] == 0
    assert tally(both, RunState.COMPLETED, [], p1=ProcessLife(died=1.5))["two_holders"] == 0
    # An older epoch starting after a newer one did: a zombie got a call through.
    stale = execution(2, 2, 1.0, 2.0, effect="read_only") + execution(
        1, 1, 3.0, 4.0, effect="read_only"
    )
    assert tally(stale, RunState.COMPLETED, [])["two_holders"] == 1


def test_a_continued_worker_gets_its_first_moments_back_and_no_more() -> None:
    stopped = ProcessLife(pauses=[(1.5, 4.0)])
    # In flight when stopped, ended just after it was continued, while the newer
    # epoch's call ran: the overdue callbacks ran before the keeper's cut-off.
    tail = execution(1, 1, 1.0, 4.0 + RESUME_GRACE_SECONDS / 2, effect="read_only")
    newer = execution(2, 2, 3.5, 6.0, effect="read_only")
    assert tally(tail + newer, RunState.COMPLETED, [], p1=stopped)["two_holders"] == 0
    # Going on past those moments beside the newer holder is counted.
    long_tail = execution(1, 1, 1.0, 4.0 + 3 * RESUME_GRACE_SECONDS, effect="read_only")
    assert tally(long_tail + newer, RunState.COMPLETED, [], p1=stopped)["two_holders"] == 1
    # Started just after it was continued, after the newer epoch's call began: admitted
    # before it was stopped, and cut off at once.
    back = 4.0 + RESUME_GRACE_SECONDS / 4
    started_back = execution(1, 1, back, back + 0.001, effect="read_only")
    earlier_newer = execution(2, 2, 2.0, 3.0, effect="read_only")
    assert (
        tally(earlier_newer + started_back, RunState.COMPLETED, [], p1=stopped)["two_holders"] == 0
    )
    # Started once those moments were over: a stale worker got a call through.
    started_late = execution(1, 1, 4.0 + 2 * RESUME_GRACE_SECONDS, 4.5, effect="read_only")
    assert (
        tally(earlier_newer + started_late, RunState.COMPLETED, [], p1=stopped)["two_holders"] == 1
    )
