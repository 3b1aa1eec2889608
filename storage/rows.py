"""Rows as the model's types: how each table's row reads back, and how a set of rows is sent."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.lifecycle import Reason, RunMode, RunState, StepKind, StepStatus
from leaseward.runtime.model import (
    Decision,
    HumanRequest,
    PurgedRun,
    RequestKind,
    RunRecord,
    StepInfo,
    WorkerInfo,
    load_json,
)
from leaseward.storage.executor import Row

__all__ = [
    "json_set",
    "optional",
    "purged_from_row",
    "request_from_row",
    "run_from_row",
    "step_from_row",
    "worker_from_row",
]


def optional(kind: Any, value: Any) -> Any:
    return None if value is None else kind(value)


def run_from_row(row: Row) -> RunRecord:
    return RunRecord(
        id=row["id"],
        agent=row["agent"],
        mode=RunMode(row["mode"]),
        state=RunState(row["state"]),
        reason=optional(Reason, row["reason"]),
        failure_class=optional(FailureClass, row["failure_class"]),
        input=load_json(row["input_json"]),
        result=load_json(row["result_json"]),
        error=row["error"],
        epoch=row["epoch"],
        requeues=row["requeues"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        available_at=row["available_at"],
        cancel_requested=bool(row["cancel_requested"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
        idempotency_key=row["idempotency_key"],
    )


def step_from_row(row: Row) -> StepInfo:
    return StepInfo(
        run_id=row["run_id"],
        seq=row["seq"],
        epoch=row["epoch"],
        kind=StepKind(row["kind"]),
        tool=row["tool"],
        call_id=row["call_id"],
        effect=optional(ToolEffect, row["effect"]),
        status=StepStatus(row["status"]),
        idempotency_key=row["idempotency_key"],
        arguments=load_json(row["arguments_json"]),
        output=load_json(row["output_json"]),
        error=row["error"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        resolved_by=row["resolved_by"],
        resolved_at=row["resolved_at"],
    )


def request_from_row(row: Row) -> HumanRequest:
    return HumanRequest(
        run_id=row["run_id"],
        agent=row["agent"],
        seq=row["seq"],
        position=row["position"],
        call_id=row["call_id"],
        kind=RequestKind(row["kind"]),
        tool=row["tool"],
        effect=ToolEffect(row["effect"]),
        arguments=load_json(row["arguments_json"]),
        arguments_digest=row["arguments_digest"],
        epoch=row["epoch"],
        requested_at=row["requested_at"],
        expires_at=row["expires_at"],
        decision=optional(Decision, row["decision"]),
        operator=row["operator"],
        note=row["note"],
        value=load_json(row["value_json"]),
        decided_at=row["decided_at"],
        age_seconds=max(0.0, row["now"] - row["requested_at"]),
    )


def worker_from_row(row: Row) -> WorkerInfo:
    return WorkerInfo(
        id=row["id"],
        host=row["host"],
        pid=row["pid"],
        agents=tuple(json.loads(row["agents_json"])),
        started_at=row["started_at"],
        heartbeat_at=row["heartbeat_at"],
        heartbeat_age_seconds=max(0.0, row["now"] - row["heartbeat_at"]),
        stale_after_seconds=row["stale_after_seconds"],
    )


def purged_from_row(key: Row) -> PurgedRun:
    return PurgedRun(
        run_id=key["run_id"],
        agent=key["agent"],
        idempotency_key=key["idempotency_key"],
        state=RunState(key["final_state"]),
        reason=optional(Reason, key["final_reason"]),
        finished_at=key["finished_at"],
        purged_at=key["purged_at"],
    )


def json_set(rows: Iterable[dict[str, Any] | list[Any]]) -> str:
    """A set of rows as the one JSON parameter a set statement reads them from.

    Not ASCII-escaped: text a database cannot store (a lone surrogate) stays
    as it is, so the driver refuses it as a data error instead of the database
    storing something else.
    """
    return json.dumps(list(rows), ensure_ascii=False, separators=(",", ":"))
