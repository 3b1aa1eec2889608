"""The invariants of the proof scenarios, counted from the tools' ledger and the store.

Each count must be 0:

* ``lost``: runs accepted but missing, or not terminal once the workers are done;
* ``twice``: extra executions of a ``NON_IDEMPOTENT_WRITE`` call (G2);
* ``no_intent``: write executions with no journal row of their call at their epoch (G3);
* ``unrecorded``: completed runs over a write execution whose call has no settled row (G4);
* ``two_holders``: executions of one run that were live at the same moment in two
  processes, or that started after a newer epoch of the run had started one (G6, G7);
* ``bad_executed``: calls the runtime had to refuse (invalid arguments) that ran anyway.

"Live" takes the process's history from the driver: a process is not live while
it is stopped, nor after it died, nor in its first RESUME_GRACE_SECONDS once
continued. A process continued (SIGCONT) first runs its event loop's overdue
callbacks: a call in flight when it was stopped may end, and one admitted just
before it was stopped (between the admission check and the tool's first line) may
start, before its keeper cuts them off. No runtime can prevent either, as no check
can be made at the instant of the act; what must not happen is a stale call going
on, or starting, after that. So a paused worker's call that resumes after another
worker took over is not counted, nor one that starts in those first moments (it is
taken as admitted when the process was stopped), but one that starts or runs on
after them is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from leaseward import RunState, StepKind, StepStatus
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.runs import RunRecord
from leaseward.storage import open_store
from tests.proof.proof_app import BAD_CALL_ID

TERMINAL = {RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED, RunState.DEAD_LETTERED}
NAMES = ("lost", "twice", "no_intent", "unrecorded", "two_holders", "bad_executed")
# The first moments of a continued process (see above): its loop's overdue callbacks
# and its keeper's cut-off take milliseconds on a loaded machine (5-8 ms seen).
RESUME_GRACE_SECONDS = 0.1


@attrs.define
class ProcessLife:
    """What the driver did to one worker process: when it was stopped, continued, killed."""

    pauses: list[tuple[float, float]] = attrs.Factory(list)
    died: float | None = None

    def live(self, start: float, end: float) -> list[tuple[float, float]]:
        """The parts of [start, end] during which the process was running, less the
        first moments after each time it was continued."""
        end = min(end, self.died) if self.died is not None else end
        parts = [(start, end)]
        for stop, cont in self.pauses:
            back = cont + RESUME_GRACE_SECONDS
            parts = [
                piece
                for a, b in parts
                for piece in ((a, min(b, stop)), (max(a, back), b))
                if piece[0] < piece[1]
            ]
        return [(a, b) for a, b in parts if a < b]

    def admitted(self, start: float) -> float:
        """When a call that started at ``start`` may have been admitted: when the process
        was stopped, for one that started in its first moments back."""
        for stop, cont in self.pauses:
            if stop <= start <= cont + RESUME_GRACE_SECONDS:
                return stop
        return start


@attrs.frozen
class Journal:
    runs: dict[str, RunRecord | None]
    steps: dict[str, list[StepInfo]]


async def read_journal(url: str, run_ids: Iterable[str]) -> Journal:
    store = await open_store(url)
    try:
        runs: dict[str, RunRecord | None] = {}
        steps: dict[str, list[StepInfo]] = {}
        for run_id in run_ids:
            runs[run_id] = await store.get_run(run_id)
            steps[run_id] = await store.list_steps(run_id)
    finally:
        await store.aclose()
    return Journal(runs, steps)


def _executions(ledger: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per execution: its start line, with the time it ended (if it did)."""
    ends = {
        (line["run_id"], line["call_id"], line["epoch"], line["pid"]): line["t"]
        for line in ledger
        if line["ev"] == "end"
    }
    return [
        {**line, "end": ends.get((line["run_id"], line["call_id"], line["epoch"], line["pid"]))}
        for line in ledger
        if line["ev"] == "start"
    ]


def count(
    ledger: Sequence[dict[str, Any]],
    journal: Journal,
    lives: dict[int, ProcessLife],
    *,
    now: float,
) -> dict[str, int]:
    """Every invariant's count for the runs of ``journal`` (the runs that were submitted)."""
    executions = _executions(ledger)
    tally = dict.fromkeys(NAMES, 0)
    tally["lost"] = sum(
        1 for run in journal.runs.values() if run is None or run.state not in TERMINAL
    )
    per_call: dict[tuple[str, str], int] = defaultdict(int)
    for ex in executions:
        if ex["call_id"] == BAD_CALL_ID:
            tally["bad_executed"] += 1
        if ex["effect"] == "non_idempotent":
            per_call[(ex["run_id"], ex["call_id"])] += 1
        if ex["effect"] != "read_only":
            rows = journal.steps.get(ex["run_id"], [])
            if not any(
                s.kind is StepKind.TOOL and s.call_id == ex["call_id"] and s.epoch == ex["epoch"]
                for s in rows
            ):
                tally["no_intent"] += 1
    tally["twice"] = sum(n - 1 for n in per_call.values() if n > 1)
    for run_id, run in journal.runs.items():
        if run is None or run.state is not RunState.COMPLETED:
            continue
        settled = {
            s.call_id
            for s in journal.steps[run_id]
            if s.kind is StepKind.TOOL and s.status is not StepStatus.STARTED
        }
        written = {
            ex["call_id"]
            for ex in executions
            if ex["run_id"] == run_id and ex["effect"] != "read_only"
        }
        tally["unrecorded"] += len(written - settled)
    tally["two_holders"] = _two_holders(executions, lives, now)
    return tally


def _two_holders(
    executions: list[dict[str, Any]], lives: dict[int, ProcessLife], now: float
) -> int:
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ex in executions:
        by_run[ex["run_id"]].append(ex)
    bad = 0
    for group in by_run.values():
        group.sort(key=lambda ex: ex["t"])
        for i, later in enumerate(group):
            earlier_ones = group[:i]
            admitted = _admitted(later, lives)
            if any(e["epoch"] > later["epoch"] and e["t"] < admitted for e in earlier_ones):
                bad += 1
                continue
            later_live = _live(later, lives, now)
            if any(
                e["pid"] != later["pid"] and _overlap(_live(e, lives, now), later_live)
                for e in earlier_ones
            ):
                bad += 1
    return bad


def _admitted(ex: dict[str, Any], lives: dict[int, ProcessLife]) -> float:
    life = lives.get(ex["pid"])
    return life.admitted(ex["t"]) if life is not None else float(ex["t"])


def _live(
    ex: dict[str, Any], lives: dict[int, ProcessLife], now: float
) -> list[tuple[float, float]]:
    end = ex["end"] if ex["end"] is not None else now
    life = lives.get(ex["pid"])
    return life.live(ex["t"], end) if life is not None else [(ex["t"], end)]


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> bool:
    return any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b)
