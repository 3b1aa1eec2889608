"""The --json documents: the API objects' fields, with the few explicit exceptions."""

from __future__ import annotations

import json

import attrs

from leaseward.cli.json_output import request_json, run_json, step_json, worker_json
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.human_requests import Decision, HumanRequest, RequestKind
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import Reason, RunMode, RunState, StepKind, StepStatus
from leaseward.runtime.runs import RunInfo
from leaseward.runtime.workers import WorkerInfo


def test_a_run_is_its_fields_less_what_only_the_timeline_shows() -> None:
    run = RunInfo(
        id="r1", agent="payer", mode=RunMode.QUEUED, state=RunState.DEAD_LETTERED,
        reason=Reason.INTERRUPTED_WRITE, failure_class=FailureClass.CONNECTION,
        result={"ok": True}, epoch=2, requeues=1, created_at=1.5, finished_at=2.5,
        input={"amount": 5}, error="boom", idempotency_key="k", lease_owner="w",
        lease_expires_at=9.0, available_at=3.0, read_at=4.0,
    )  # fmt: skip
    assert run_json(run) == {
        "id": "r1", "agent": "payer", "mode": "queued", "state": "dead_lettered",
        "reason": "interrupted_write", "failure_class": "connection", "result": {"ok": True},
        "input": {"amount": 5}, "error": "boom", "epoch": 2, "requeues": 1, "created_at": 1.5,
        "finished_at": 2.5, "idempotency_key": "k", "cancel_requested": False,
    }  # fmt: skip
    assert type(run_json(run)["state"]) is str


def test_a_step_leaves_out_its_run_and_keeps_its_output_as_stored() -> None:
    step = StepInfo(
        run_id="r1", seq=3, epoch=1, kind=StepKind.TOOL, tool="charge", call_id="c1",
        effect=ToolEffect.NON_IDEMPOTENT_WRITE, status=StepStatus.STARTED,
        idempotency_key="k", arguments={"amount": [1, 2]}, output=None, error=None,
        started_at=1.0, finished_at=None,
    )  # fmt: skip
    document = step_json(step)
    assert "run_id" not in document
    assert document["arguments"] == {"amount": [1, 2]}
    assert (document["effect"], document["status"]) == ("non_idempotent_write", "started")
    assert document.keys() == {
        "seq", "epoch", "kind", "tool", "call_id", "effect", "status", "idempotency_key",
        "arguments", "output", "error", "started_at", "finished_at", "resolved_by",
        "resolved_at", "source",
    }  # fmt: skip


def test_a_request_names_its_turn_and_a_worker_says_whether_it_is_live() -> None:
    request = HumanRequest(
        run_id="r1", agent="payer", seq=4, position=0, call_id="c1", kind=RequestKind.APPROVAL,
        tool="charge", effect=ToolEffect.NON_IDEMPOTENT_WRITE, arguments={}, arguments_digest="d",
        epoch=1, requested_at=1.0, expires_at=None, decision=Decision.APPROVED,
        operator="alice", note=None, value=None, decided_at=2.0, age_seconds=3.0,
    )  # fmt: skip
    document = request_json(request)
    assert document["turn_seq"] == 4
    assert {"seq", "position", "epoch"}.isdisjoint(document)
    assert document["decision"] == "approved"
    worker = WorkerInfo(
        id="w", host="h", pid=7, agents=("a", "b"), started_at=1.0, heartbeat_at=2.0,
        heartbeat_age_seconds=0.5, stale_after_seconds=10.0,
    )  # fmt: skip
    assert json.loads(json.dumps(worker_json(worker)))["agents"] == ["a", "b"]
    assert worker_json(worker)["live"] is worker.live
    assert (worker_json(worker)["status"], worker_json(worker)["draining_since"]) == ("live", None)
    draining = attrs.evolve(worker, draining_since=1.5)
    assert (worker_json(draining)["status"], worker_json(draining)["draining_since"]) == (
        "draining",
        1.5,
    )
