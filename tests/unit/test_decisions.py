"""Which request a decision is for, and the refusals with the words a person reads."""

from __future__ import annotations

from typing import Any

import pytest

from leaseward.runtime.decisions import kind_decided, request_to_decide
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.errors import (
    AmbiguousRequest,
    NothingToDecide,
    RequestDecided,
    RequestExpired,
    RequestsClosed,
    UnknownRequestCall,
    WrongRequestKind,
)
from leaseward.runtime.human_requests import Decision, HumanRequest, RequestKind
from leaseward.runtime.lifecycle import Reason, RunMode, RunState
from leaseward.runtime.runs import RunRecord


def run(state: RunState, reason: Reason | None = None) -> RunRecord:
    return RunRecord(
        id="run-1",
        agent="agent",
        mode=RunMode.QUEUED,
        state=state,
        reason=reason,
        failure_class=None,
        input="hi",
        result=None,
        error=None,
        epoch=1,
        requeues=0,
        lease_owner=None,
        lease_expires_at=None,
        available_at=0.0,
        cancel_requested=False,
        created_at=0.0,
        updated_at=0.0,
        finished_at=None,
    )


def request(call_id: str, seq: int = 1, **changes: Any) -> HumanRequest:
    fields: dict[str, Any] = {
        "run_id": "run-1",
        "agent": "agent",
        "seq": seq,
        "position": 0,
        "call_id": call_id,
        "kind": RequestKind.APPROVAL,
        "tool": "refund",
        "effect": ToolEffect.NON_IDEMPOTENT_WRITE,
        "arguments": {},
        "arguments_digest": "digest",
        "epoch": 1,
        "requested_at": 0.0,
        "expires_at": None,
        "decision": None,
        "operator": None,
        "note": None,
        "value": None,
        "decided_at": None,
        "age_seconds": 0.0,
    }
    fields.update(changes)
    return HumanRequest(**fields)


WAITING = run(RunState.WAITING_FOR_APPROVAL)
APPROVAL = RequestKind.APPROVAL


def test_a_decision_answers_the_kind_of_request_it_is_for() -> None:
    assert kind_decided(Decision.ANSWERED) is RequestKind.INPUT
    assert kind_decided(Decision.APPROVED) is RequestKind.APPROVAL
    assert kind_decided(Decision.REJECTED) is RequestKind.APPROVAL


def test_the_only_pending_request_needs_no_call_id() -> None:
    only = request("c1")
    assert request_to_decide(WAITING, [only], None, APPROVAL) is only


def test_several_pending_requests_need_the_call_named() -> None:
    with pytest.raises(AmbiguousRequest) as refused:
        request_to_decide(WAITING, [request("c1"), request("c2")], None, APPROVAL)
    assert refused.value.pending == ("c1", "c2")
    assert refused.value.message == "run run-1 waits for 2 approvals; name the call (c1, c2)"


def test_the_newest_request_of_a_call_id_is_the_live_one() -> None:
    old = request("c1", seq=1, decision=Decision.APPROVED, operator="ann")
    new = request("c1", seq=3)
    assert request_to_decide(WAITING, [old, new], "c1", APPROVAL) is new


def test_an_unknown_call_names_the_pending_ones() -> None:
    with pytest.raises(UnknownRequestCall) as refused:
        request_to_decide(WAITING, [request("c1")], "zz", APPROVAL)
    assert refused.value.message == "run run-1 has no request for call 'zz' (pending: c1)"


def test_an_input_request_is_not_approved() -> None:
    asking = request("c1", kind=RequestKind.INPUT)
    with pytest.raises(WrongRequestKind) as refused:
        request_to_decide(run(RunState.WAITING_FOR_INPUT), [asking], "c1", APPROVAL)
    assert (refused.value.asked, refused.value.sent) == ("input", "approval")
    assert refused.value.message == (
        "call c1 of run run-1 asks for input, not approval: send_input (leaseward reply) decides it"
    )


def test_a_decided_request_changes_nothing() -> None:
    decided = request("c1", decision=Decision.REJECTED, operator="ann")
    with pytest.raises(RequestDecided) as refused:
        request_to_decide(WAITING, [decided], "c1", APPROVAL)
    assert refused.value.message == (
        "call c1 of run run-1 was already rejected by ann; nothing changed"
    )


def test_an_expired_request_says_when_it_expired() -> None:
    expired = request("c1", decision=Decision.EXPIRED, expires_at=60.0)
    with pytest.raises(RequestExpired) as refused:
        request_to_decide(WAITING, [expired], "c1", APPROVAL)
    assert refused.value.expires_at == 60.0


def test_a_run_waiting_for_nothing_reminds_of_its_last_decision() -> None:
    decided = request("c1", decision=Decision.APPROVED, operator="ann")
    with pytest.raises(NothingToDecide) as refused:
        request_to_decide(run(RunState.QUEUED), [decided], None, APPROVAL)
    assert refused.value.last is not None
    assert refused.value.message == (
        "run run-1 is queued: it waits for no approval "
        "(call c1 of run run-1 was already approved by ann)"
    )


def test_a_finished_run_refuses_its_expired_request_as_expired() -> None:
    expired = request("c1", decision=Decision.EXPIRED, expires_at=60.0)
    with pytest.raises(RequestExpired):
        request_to_decide(run(RunState.FAILED), [expired], None, APPROVAL)


def test_a_run_that_left_waiting_decides_none_of_its_requests() -> None:
    cancelled = run(RunState.CANCELLED, Reason.CANCELLED)
    with pytest.raises(RequestsClosed) as refused:
        request_to_decide(cancelled, [request("c1")], "c1", APPROVAL)
    assert refused.value.message == (
        "run run-1 is cancelled (cancelled): its requests can no longer be decided"
    )
