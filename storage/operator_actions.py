"""What an operator does to a dead-lettered run: redrive it, or resolve its interrupted call."""

from __future__ import annotations

import json

from leaseward.runtime.errors import IllegalTransition, StoreError
from leaseward.runtime.lifecycle import (
    REDRIVABLE_REASONS,
    TRANSITIONS,
    Event,
    Reason,
    RunState,
    StepStatus,
    source_state,
)
from leaseward.runtime.model import RunRecord
from leaseward.storage.concern import WORK_CHANNEL, StoreConcern
from leaseward.storage.executor import Row
from leaseward.storage.rows import run_from_row

__all__ = ["OperatorActions"]


def _state_text(run: RunRecord) -> str:
    return run.state.value if run.reason is None else f"{run.state.value} ({run.reason.value})"


class OperatorActions(StoreConcern):
    """Redrive and resolve, each under the run's lock."""

    async def _reopen(self, run: RunRecord, event: Event, *, reset_requeues: bool) -> RunRecord:
        row = await self._executor.fetch_one(
            self._queries["reopen_run"],
            {
                "run_id": run.id,
                "epoch": run.epoch,
                "source": source_state(event).value,
                "target": TRANSITIONS[event][1].value,
                "reset_requeues": reset_requeues,
                "now": self._now(),
            },
        )
        if row is None:
            raise StoreError(f"run {run.id} changed while it was being reopened")
        await self._executor.notify(WORK_CHANNEL)
        return run_from_row(row)

    async def _open_call(self, run_id: str) -> Row | None:
        """The newest journal row if it is a call started and never settled, else None."""
        last = await self._executor.fetch_one(self._queries["last_step"], {"run_id": run_id})
        if last is None or StepStatus(last["status"]) is not StepStatus.STARTED:
            return None
        return last

    async def redrive(self, run_id: str) -> RunRecord:
        async with self._executor.transaction():
            run = await self._lock_run(run_id)
            redrivable = run.state is RunState.DEAD_LETTERED and (
                run.reason in REDRIVABLE_REASONS
                # Dead-lettered over a call whose outcome did get stored (its commit's
                # answer was lost): the journal leaves nothing for an operator to decide.
                or (
                    run.reason is Reason.INTERRUPTED_WRITE and await self._open_call(run_id) is None
                )
            )
            if not redrivable:
                hint = (
                    "; an interrupted write needs `resolve` (did the call apply?)"
                    if run.reason is Reason.INTERRUPTED_WRITE
                    else ""
                )
                raise IllegalTransition(
                    f"run {run_id} is {_state_text(run)}: only a run dead-lettered "
                    "not_retryable or retries_exhausted, or interrupted_write with its "
                    f"call's outcome recorded, can be redriven{hint}"
                )
            return await self._reopen(run, Event.REDRIVE, reset_requeues=True)

    async def resolve(
        self, run_id: str, *, applied: bool, operator: str, note: str | None = None
    ) -> RunRecord:
        q = self._queries
        async with self._executor.transaction():
            run = await self._lock_run(run_id)
            if (
                run.state is not RunState.DEAD_LETTERED
                or run.reason is not Reason.INTERRUPTED_WRITE
            ):
                raise IllegalTransition(
                    f"run {run_id} is {_state_text(run)}: only a run dead-lettered "
                    "interrupted_write waits for a resolution"
                )
            last = await self._open_call(run_id)
            if last is None:
                raise IllegalTransition(
                    f"run {run_id} has no interrupted call to resolve: its journal records "
                    "the outcome of its last call; `redrive` puts it back in the queue"
                )
            output = {
                "resolution": "applied" if applied else "not_applied",
                "resolved_by": operator,
                "note": note,
            }
            resolved = await self._executor.fetch_all(
                q["resolve_step"],
                {
                    "run_id": run_id,
                    "seq": last["seq"],
                    "status": (StepStatus.SUCCEEDED if applied else StepStatus.FAILED).value,
                    "output_json": json.dumps(output, separators=(",", ":")),
                    "error": None
                    if applied
                    else "the operator recorded that the call did not apply",
                    "resolved_by": operator,
                    "started": StepStatus.STARTED.value,
                    "now": self._now(),
                },
            )
            if len(resolved) != 1:
                raise StoreError(f"the interrupted call of run {run_id} changed meanwhile")
            return await self._reopen(run, Event.RESOLVE, reset_requeues=False)
