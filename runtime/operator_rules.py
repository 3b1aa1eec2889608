"""What an operator may do to a run in which state: pure preconditions of redrive and
resolve, which the store checks under the run's lock."""

from __future__ import annotations

from leaseward.runtime.errors import NotAwaitingResolution, NothingToResolve, NotRedrivable
from leaseward.runtime.lifecycle import REDRIVABLE_REASONS, Reason, RunState
from leaseward.runtime.runs import RunRecord

__all__ = ["check_redrive", "check_resolve"]


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
