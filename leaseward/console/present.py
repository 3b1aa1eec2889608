"""What the pages show of runs, steps and requests, drawn from the same lines as the CLI's
timeline; everything here is plain text, which the templates escape."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from leaseward.cli.json_output import total_usage
from leaseward.cli.tables import age, count, shortened, shown, timestamp, tokens
from leaseward.cli.timeline import cancel_line, interrupted_call, lease_lines, step_details, took
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import RunState, StepStatus
from leaseward.runtime.runs import RunInfo

__all__ = [
    "StepView",
    "cancel_line",
    "interrupted_call",
    "json_text",
    "lease_expired",
    "run_lease",
    "run_standing",
    "step_views",
    "time_to_expiry",
    "usage_line",
]


def json_text(value: Any) -> str:
    """A JSON value in full, as it is stored (the expanded view of a step)."""
    lines = json.dumps(value, ensure_ascii=False, indent=2).split("\n")
    return "\n".join(shown(line) for line in lines)


def lease_expired(run: RunInfo, now: float | None) -> bool:
    """A running run whose lease ran out, on the store's clock where the run was read
    with it (one run), else on ``now`` (a list of runs carries no clock of its own)."""
    clock = run.read_at if run.read_at is not None else now
    return (
        run.state is RunState.RUNNING
        and run.lease_expires_at is not None
        and clock is not None
        and run.lease_expires_at <= clock
    )


def run_standing(run: RunInfo, now: float | None = None) -> str | None:
    """Why a run needs a look, if it does: the class its row is marked with."""
    if run.state in (RunState.WAITING_FOR_APPROVAL, RunState.WAITING_FOR_INPUT):
        return "waits-for-person"
    if run.state is RunState.DEAD_LETTERED:
        return "dead-letter"
    if lease_expired(run, now):
        return "lease-expired"
    return None


@attrs.frozen
class StepView:
    """One journal row as the timeline draws it."""

    step: StepInfo
    name: str
    took: str
    details: tuple[str, ...]
    arguments: str | None
    arguments_short: str | None
    result: str | None
    result_short: str | None
    intent: str | None
    """For a write: when its intent was recorded and what became of it."""


def _write_course(step: StepInfo) -> str | None:
    if step.effect is None or not step.effect.is_write:
        return None
    intent = f"intent recorded {timestamp(step.started_at)}"
    if step.status is StepStatus.STARTED:
        return f"{intent}; no outcome recorded"
    when = "" if step.finished_at is None else f" {timestamp(step.finished_at)}"
    return f"{intent}; outcome {step.status.value}{when}"


def step_views(steps: Sequence[StepInfo]) -> list[StepView]:
    views = []
    for step in steps:
        arguments = None if step.arguments is None else json.dumps(step.arguments)
        result = None if step.output is None else json.dumps(step.output)
        views.append(
            StepView(
                step=step,
                name="provider" if step.tool is None else shown(step.tool),
                took=took(step),
                # The row shows the arguments once, where they open in full.
                details=tuple(shown(line) for line in step_details(step, arguments=False)),
                arguments=None if arguments is None else json_text(step.arguments),
                arguments_short=None if arguments is None else shown(shortened(arguments)),
                result=None if result is None else json_text(step.output),
                result_short=None if result is None else shown(shortened(result)),
                intent=_write_course(step),
            )
        )
    return views


def usage_line(steps: Sequence[StepInfo]) -> str | None:
    total = total_usage(steps)
    if total is None:
        return None
    usage, turns = total
    return f"{tokens(usage)} in total, over {count(turns, 'provider turn')}"


def time_to_expiry(request: HumanRequest) -> str:
    """How long a pending request has left, on the store's clock."""
    if request.expires_at is None:
        return "never expires"
    left = request.expires_at - (request.requested_at + request.age_seconds)
    if left <= 0:
        return "expired"
    return "expires in " + age(left).removesuffix(" ago")


def run_lease(run: RunInfo, steps: Sequence[StepInfo]) -> list[str]:
    return [shown(line) for line in lease_lines(run, steps)]
