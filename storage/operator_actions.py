"""What an operator does to a dead-lettered run: redrive it, or resolve its interrupted call."""

from __future__ import annotations

import json

from leaseward.runtime.errors import StoreError
from leaseward.runtime.lifecycle import (
    TRANSITIONS,
    Event,
    StepStatus,
    source_state,
)
from leaseward.runtime.operator_rules import check_redrive, check_resolve, check_resolved_call
from leaseward.runtime.runs import RunRecord
from leaseward.storage.concern import WORK_CHANNEL, StoreConcern
from leaseward.storage.executor import Row
from leaseward.storage.rows import run_from_row

__all__ = ["OperatorActions"]


class OperatorActions(StoreConcern):
    """Redrive and resolve, each under the run's lock."""

    async def _reopen(
        self, run: RunRecord, event: Event, *, reset_requeues: bool, keep_cancel: bool
    ) -> RunRecord:
        row = await self._executor.fetch_one(
            self._queries["reopen_run"],
            {
                "run_id": run.id,
                "epoch": run.epoch,
                "source": source_state(event).value,
                "target": TRANSITIONS[event][1].value,
                "reset_requeues": reset_requeues,
                "keep_cancel": keep_cancel,
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
            check_redrive(run, call_open=await self._open_call(run_id) is not None)
            # Running it again is the operator's newest word on the run: it outranks a
            # cancel asked before it was dead-lettered.
            return await self._reopen(run, Event.REDRIVE, reset_requeues=True, keep_cancel=False)

    async def resolve(
        self,
        run_id: str,
        *,
        applied: bool,
        operator: str,
        note: str | None = None,
        step: int | None = None,
    ) -> RunRecord:
        q = self._queries
        async with self._executor.transaction():
            run = await self._lock_run(run_id)
            last = await self._open_call(run_id)
            check_resolve(run, call_open=last is not None)
            assert last is not None, "check_resolve refuses a run with no open call"
            check_resolved_call(
                run, step, open_step=last["seq"], call_id=last["call_id"], tool=last["tool"]
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
            # A verdict on one call says nothing of going on: a cancel asked before the run
            # was dead-lettered stops it before its next call, not after more writes.
            return await self._reopen(run, Event.RESOLVE, reset_requeues=False, keep_cancel=True)
