"""What an operator may do to a run in which state: pure preconditions of redrive and
resolve, which the store checks under the run's lock."""

from __future__ import annotations

from leaseward.runtime.errors import (
    NotAwaitingResolution,
    NothingToResolve,
    NotRedrivable,
    OtherCallInterrupted,
)
from leaseward.runtime.lifecycle import REDRIVABLE_REASONS, Reason, RunState
from leaseward.runtime.runs import RunRecord

__all__ = ["check_redrive", "check_resolve", "check_resolved_call"]


def _reason(run: RunRecord) -> str | None:
    return None if run.reason is None else run.reason.value


def check_redrive(run: RunRecord, *, call_open: bool) -> None:
    """Refuse to redrive ``run`` unless nothing is left for an operator to decide.

    ``call_open``: the run's newest journal row is a call started and never settled.
    """
    redrivable = run.state is RunState.DEAD_LETTERED and (
        run.reason in REDRIVABLE_REASONS
        # Dead-lettered over a call whose outcome did get stored (its commit's answer
        # was lost): the journal leaves nothing for an operator to decide.
        or (run.reason is Reason.INTERRUPTED_WRITE and not call_open)
    )
    if not redrivable:
        raise NotRedrivable(run.id, run.state.value, _reason(run))


def check_resolve(run: RunRecord, *, call_open: bool) -> None:
    """Refuse to resolve ``run`` unless it was dead-lettered over a call with no outcome."""
    if run.state is not RunState.DEAD_LETTERED or run.reason is not Reason.INTERRUPTED_WRITE:
        raise NotAwaitingResolution(run.id, run.state.value, _reason(run))
    if not call_open:
        raise NothingToResolve(run.id)


def check_resolved_call(
    run: RunRecord, step: int | None, *, open_step: int, call_id: str, tool: str
) -> None:
    """Refuse a resolution meant for another call than the one open now (``open_step``,
    the journal step of call ``call_id`` of ``tool``): ``step`` is the step of the call
    the operator checked; None resolves whichever is open."""
    if step is not None and step != open_step:
        raise OtherCallInterrupted(run.id, step, open_step, call_id, tool)
