"""Printed tables: runs, calls waiting for a person, workers; and the small formats
(times, ages, counts) every printed line shares."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from leaseward.runtime.encoding import DIGEST_SHOWN, shown
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.lifecycle import RunState
from leaseward.runtime.messages import Usage
from leaseward.runtime.runs import RunInfo
from leaseward.runtime.workers import WorkerInfo

__all__ = [
    "APPROVAL_ARGUMENTS_CHARS",
    "RUN_COLUMNS",
    "age",
    "count",
    "print_approvals",
    "print_runs",
    "print_workers",
    "run_row",
    "shortened",
    "shown",
    "table",
    "timestamp",
    "tokens",
]

SHOWN_CHARS = 80
"""How much of a call's arguments a line prints."""


def tokens(usage: Usage) -> str:
    return f"{usage.input_tokens:,} in, {usage.output_tokens:,} out"


def timestamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def shortened(text: str, limit: int = SHOWN_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as columns two spaces apart, each as wide as its widest cell: cells as
    ``shown`` prints them, for an agent's or a tool's name is anyone's text."""
    rows = [[shown(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


RUN_COLUMNS = ("RUN", "STATE", "REASON", "MODE", "AGENT", "EPOCH", "REQUEUES", "CREATED")


def run_row(run: RunInfo) -> tuple[str, ...]:
    return (
        run.id,
        run.state.value,
        "-" if run.reason is None else run.reason.value,
        run.mode.value,
        run.agent,
        str(run.epoch),
        str(run.requeues),
        timestamp(run.created_at),
    )


def print_runs(runs: Sequence[RunInfo], unserved: frozenset[str] = frozenset()) -> None:
    """Runs as a table, each queued run no live worker serves marked so, and each running
    one whose lease ran out, as the console marks them (a list carries no store clock:
    this host's stands in)."""
    if not runs:
        print("no runs")
        return
    header, *lines = table([RUN_COLUMNS, *(run_row(r) for r in runs)])
    print(header)
    now = time.time()
    for run, line in zip(runs, lines, strict=True):
        note = ""
        if run.state is RunState.QUEUED and run.agent in unserved:
            note = f"  no live worker serves {shown(run.agent)}"
        elif (
            run.state is RunState.RUNNING
            and run.lease_expires_at is not None
            and run.lease_expires_at <= now
        ):
            note = "  lease expired"
        print(line + note)


def age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s ago"
    minutes = int(seconds) // 60
    if minutes >= 24 * 60:
        return f"{minutes // (24 * 60)}d{minutes // 60 % 24}h ago"
    if minutes >= 60:
        return f"{minutes // 60}h{minutes % 60}m ago"
    return f"{minutes}m{int(seconds) % 60}s ago"


def count(number: int, noun: str, plural: str | None = None) -> str:
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


_APPROVAL_COLUMNS = (
    "RUN",
    "CALL",
    "DIGEST",
    "AGENT",
    "TOOL",
    "EFFECT",
    "WAITS FOR",
    "AGE",
    "ARGUMENTS",
)
APPROVAL_ARGUMENTS_CHARS = 120
"""How much of a call's arguments the approvals table prints; `show` prints them whole."""


def print_approvals(requests: Sequence[HumanRequest]) -> None:
    if not requests:
        print("nothing waits for a person")
        return
    arguments = [json.dumps(r.arguments, ensure_ascii=False) for r in requests]
    rows = [
        (
            r.run_id,
            r.call_id,
            r.arguments_digest[:DIGEST_SHOWN],
            r.agent,
            r.tool,
            r.effect.value,
            r.kind.value,
            age(r.age_seconds),
            shortened(text, APPROVAL_ARGUMENTS_CHARS),
        )
        for r, text in zip(requests, arguments, strict=True)
    ]
    for line in table([_APPROVAL_COLUMNS, *rows]):
        print(line)
    if any(len(text) > APPROVAL_ARGUMENTS_CHARS for text in arguments):
        print(
            f"arguments cut to {APPROVAL_ARGUMENTS_CHARS} characters: `leaseward show RUN` "
            "prints a waiting call's whole"
        )


_WORKER_COLUMNS = ("WORKER", "HOST", "PID", "AGENTS", "STARTED", "HEARTBEAT", "STATUS")


def print_workers(workers: Sequence[WorkerInfo]) -> None:
    if not workers:
        print("no workers")
        return
    rows = [
        (
            w.id,
            w.host,
            str(w.pid),
            ",".join(w.agents) or "-",
            timestamp(w.started_at),
            age(w.heartbeat_age_seconds),
            w.status,
        )
        for w in workers
    ]
    for line in table([_WORKER_COLUMNS, *rows]):
        print(line)
