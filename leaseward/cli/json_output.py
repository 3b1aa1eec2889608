"""The ``--json`` documents: the API objects' own attrs fields, through one converter.

A field added to ``RunInfo``, ``StepInfo``, ``HumanRequest`` or ``WorkerInfo`` shows
in the JSON without a line here. The exceptions are explicit and few: fields that
only serve the printed timeline (a run's lease and its store's clock), or that
identify what the document already names (a step's run, a request's position and
epoch), are left out; a request's ``seq`` is published as ``turn_seq``; a worker
adds whether it is ``live``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Any

import attrs

from leaseward.runtime.conversation import usage_from_json
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import StepKind
from leaseward.runtime.messages import Usage
from leaseward.runtime.runs import RunInfo
from leaseward.runtime.workers import WorkerInfo

__all__ = [
    "json_document",
    "print_json",
    "request_json",
    "run_document",
    "run_json",
    "step_json",
    "total_usage",
    "usage_json",
    "worker_json",
]

_RUN_TIMELINE_ONLY = attrs.filters.exclude(
    attrs.fields(RunInfo).lease_owner,
    attrs.fields(RunInfo).lease_expires_at,
    attrs.fields(RunInfo).available_at,
    attrs.fields(RunInfo).read_at,
)
_STEP_OWN_RUN = attrs.filters.exclude(attrs.fields(StepInfo).run_id)
_REQUEST_INTERNAL = attrs.filters.exclude(
    attrs.fields(HumanRequest).position, attrs.fields(HumanRequest).epoch
)


def _plain(_instance: type, _field: attrs.Attribute[Any] | None, value: Any) -> Any:
    """Enums by their value, tuples as lists: what ``json.dumps`` writes as before."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def _fields(instance: Any, keep: Any = None) -> dict[str, Any]:
    # Values such as a step's output are JSON already: only the attrs object is walked.
    return attrs.asdict(instance, recurse=False, filter=keep, value_serializer=_plain)


def run_json(run: RunInfo) -> dict[str, Any]:
    return _fields(run, _RUN_TIMELINE_ONLY)


def step_json(step: StepInfo) -> dict[str, Any]:
    return _fields(step, _STEP_OWN_RUN)


def request_json(request: HumanRequest) -> dict[str, Any]:
    document = _fields(request, _REQUEST_INTERNAL)
    document["turn_seq"] = document.pop("seq")
    return document


def worker_json(worker: WorkerInfo) -> dict[str, Any]:
    return {**_fields(worker), "live": worker.live, "status": worker.status}


def total_usage(steps: Sequence[StepInfo]) -> tuple[Usage, int] | None:
    """The tokens of every provider turn that recorded its usage, and how many did."""
    found = [
        usage
        for step in steps
        if step.kind is StepKind.PROVIDER and (usage := usage_from_json(step.output)) is not None
    ]
    return (sum(found, Usage()), len(found)) if found else None


def usage_json(steps: Sequence[StepInfo]) -> dict[str, int] | None:
    total = total_usage(steps)
    if total is None:
        return None
    usage, turns = total
    return {**_fields(usage), "provider_turns": turns}


def run_document(
    run: RunInfo, steps: Sequence[StepInfo], requests: Sequence[HumanRequest]
) -> dict[str, Any]:
    """A run with its journal and its requests: ``leaseward show --json``."""
    return {
        **run_json(run),
        "usage": usage_json(steps),
        "steps": [step_json(s) for s in steps],
        "requests": [request_json(r) for r in requests],
    }


def json_document(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON text that any UTF-8 output takes: characters as they are, unless
    a text holds a lone surrogate (decoded JSON may), which no UTF-8 can encode; then
    every character beyond ASCII is a JSON escape, which loads back the same string."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, indent=indent)
    return text


def print_json(value: Any) -> None:
    print(json_document(value))
