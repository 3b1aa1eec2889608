"""Declaring approval on tools, and the pure decision of what a gated call does next (G12)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from leaseward import (
    Agent,
    ConfigurationError,
    Decision,
    HumanRequest,
    RequestKind,
    ScriptedProvider,
    ToolContext,
    ToolDefinitionError,
    ToolEffect,
    ask_human,
    tool,
)
from leaseward.runtime.approvals import GateAction, gate_call
from leaseward.runtime.encoding import arguments_digest
from leaseward.runtime.human_requests import EXPIRED_REASON
from leaseward.runtime.tools import bind_tool


def request(decision: Decision | None = None, **changes: Any) -> HumanRequest:
    base = HumanRequest(
        run_id="r",
        agent="payer",
        seq=0,
        position=0,
        call_id="call-1",
        kind=RequestKind.APPROVAL,
        tool="charge",
        effect=ToolEffect.NON_IDEMPOTENT_WRITE,
        arguments={"amount": 5},
        arguments_digest=arguments_digest({"amount": 5}),
        epoch=1,
        requested_at=100.0,
        expires_at=None,
        decision=decision,
        operator=None if decision is None else "alice",
        note=None,
        value=None,
        decided_at=None if decision is None else 160.0,
        age_seconds=0.0,
    )
    return attrs.evolve(base, **changes)


AMOUNT_5: Mapping[str, Any] = {"amount": 5}


def test_a_call_with_no_request_parks_only_when_a_person_is_needed() -> None:
    plain = gate_call(AMOUNT_5, asks_human=False, needs_approval=False, request=None)
    assert (plain.action, plain.request) == (GateAction.CALL, None)
    approval = gate_call(AMOUNT_5, asks_human=False, needs_approval=True, request=None)
    assert (approval.action, approval.kind) == (GateAction.PARK, RequestKind.APPROVAL)
    question = gate_call(AMOUNT_5, asks_human=True, needs_approval=False, request=None)
    assert (question.action, question.kind) == (GateAction.PARK, RequestKind.INPUT)


def test_an_undecided_request_keeps_the_call_parked_without_asking_again() -> None:
    pending = request()
    gate = gate_call(AMOUNT_5, asks_human=False, needs_approval=True, request=pending)
    assert (gate.action, gate.kind, gate.request) == (
        GateAction.PARK,
        RequestKind.APPROVAL,
        pending,
    )


def test_an_approval_authorises_exactly_the_arguments_it_was_given_for() -> None:
    approved = request(Decision.APPROVED)
    gate = gate_call({"amount": 5}, asks_human=False, needs_approval=True, request=approved)
    assert (gate.action, gate.request) == (GateAction.CALL, approved)
    # Key order is not a difference; any value is.
    other = gate_call({"amount": 50}, asks_human=False, needs_approval=True, request=approved)
    assert other.action is GateAction.REFUSE
    assert other.output == {"error": other.error}
    assert "other arguments" in str(other.error)


def test_a_request_governs_its_call_whatever_the_policy_says_now() -> None:
    approved = request(Decision.APPROVED)
    assert gate_call(AMOUNT_5, asks_human=False, needs_approval=False, request=approved).action is (
        GateAction.CALL
    )
    rejected = request(Decision.REJECTED, note="too much")
    gate = gate_call(AMOUNT_5, asks_human=False, needs_approval=False, request=rejected)
    assert (gate.action, gate.output, gate.error) == (
        GateAction.REFUSE,
        {"error": "rejected by alice: too much"},
        "rejected by alice: too much",
    )


def test_an_expired_request_is_a_rejection_by_nobody() -> None:
    expired = request(Decision.EXPIRED, operator=None, note=EXPIRED_REASON)
    gate = gate_call(AMOUNT_5, asks_human=False, needs_approval=True, request=expired)
    assert (gate.action, gate.output) == (
        GateAction.REFUSE,
        {"error": "rejected: approval expired"},
    )


def test_an_approval_decided_after_its_expiry_is_a_rejection_as_expired() -> None:
    # A store never accepts one now; a database written before that guard may hold one.
    late = request(Decision.APPROVED, expires_at=159.5, decided_at=160.0)
    gate = gate_call(AMOUNT_5, asks_human=False, needs_approval=True, request=late)
    assert (gate.action, gate.request, gate.output, gate.error) == (
        GateAction.REFUSE,
        late,
        {"error": "rejected: approval expired"},
        "rejected: approval expired",
    )
    # Whatever the policy says now: the request governs its call.
    assert gate_call(AMOUNT_5, asks_human=False, needs_approval=False, request=late).action is (
        GateAction.REFUSE
    )


def test_an_approval_decided_at_its_expiry_or_with_none_authorises_the_call() -> None:
    for expires_at in (160.0, None):
        approved = request(Decision.APPROVED, expires_at=expires_at, decided_at=160.0)
        gate = gate_call(AMOUNT_5, asks_human=False, needs_approval=True, request=approved)
        assert (gate.action, gate.request) == (GateAction.CALL, approved)


def test_an_answer_is_the_result_of_a_question() -> None:
    answered = request(Decision.ANSWERED, kind=RequestKind.INPUT, value={"colour": "blue"})
    gate = gate_call({"question": "?"}, asks_human=True, needs_approval=False, request=answered)
    assert (gate.action, gate.output, gate.error) == (
        GateAction.ANSWER,
        {"colour": "blue"},
        None,
    )


def test_the_digest_ignores_key_order_and_nothing_else() -> None:
    assert arguments_digest({"a": 1, "b": [1, 2]}) == arguments_digest({"b": [1, 2], "a": 1})
    assert arguments_digest({"a": 1}) != arguments_digest({"a": 1.0})
    assert arguments_digest({"a": 1}) != arguments_digest({"a": True})


# -- declaring it -----------------------------------------------------------------------------


def test_function_tools_declare_approval_and_a_policy_in_their_code() -> None:
    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    async def always(ctx: ToolContext, amount: int) -> int:
        return amount

    @tool(
        effect=ToolEffect.NON_IDEMPOTENT_WRITE,
        requires_approval=lambda arguments: arguments["amount"] > 100,
        approval_timeout_seconds=60,
    )
    async def over_100(ctx: ToolContext, amount: int) -> int:
        return amount

    @tool
    async def never(ctx: ToolContext, amount: int) -> int:
        return amount

    bound_always, bound_policy, bound_never = map(bind_tool, (always, over_100, never))
    assert bound_always.needs_approval({"amount": 1})
    assert (bound_always.approval_timeout_seconds, bound_policy.approval_timeout_seconds) == (
        None,
        60.0,
    )
    assert not bound_policy.needs_approval({"amount": 100})
    assert bound_policy.needs_approval({"amount": 101})
    # A policy that cannot decide asks a person.
    assert bound_policy.needs_approval({})
    assert not bound_never.needs_approval({"amount": 10**9})
    assert not any(t.asks_human for t in (bound_always, bound_policy, bound_never))


def test_class_tools_declare_approval_as_attributes() -> None:
    class Refund:
        name = "refund"
        parameters: Mapping[str, Any] = {"type": "object", "properties": {}}
        effect = ToolEffect.IDEMPOTENT_WRITE
        requires_approval = True
        approval_timeout_seconds = 3600

        async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any:
            return None

    bound = bind_tool(Refund())
    assert bound.needs_approval({})
    assert bound.approval_timeout_seconds == 3600.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"requires_approval": "yes"}, "requires_approval must be"),
        ({"requires_approval": True, "approval_timeout_seconds": 0}, "approval_timeout_seconds"),
        ({"requires_approval": True, "approval_timeout_seconds": True}, "approval_timeout_seconds"),
        # Its expiry is stored as JSON and a time: infinity parked no run, a year more is a slip.
        (
            {"requires_approval": True, "approval_timeout_seconds": math.inf},
            "approval_timeout_seconds",
        ),
        (
            {"requires_approval": True, "approval_timeout_seconds": 2 * 365 * 24 * 3600},
            "approval_timeout_seconds",
        ),
    ],
)
def test_a_bad_approval_declaration_is_refused_when_the_tool_is_made(
    options: dict[str, Any], message: str
) -> None:
    async def act(ctx: ToolContext) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match=message):
        tool(**options)(act)


def test_ask_human_is_a_read_that_a_person_answers() -> None:
    bound = bind_tool(ask_human)
    assert (bound.name, bound.effect, bound.asks_human) == (
        "ask_human",
        ToolEffect.READ_ONLY,
        True,
    )
    assert bound.parameters["required"] == ["question"]


def test_an_agent_gives_its_tools_an_approval_timeout() -> None:
    provider = ScriptedProvider([])
    assert Agent("a", provider).approval_timeout_seconds is None
    assert Agent("a", provider, approval_timeout_seconds=30).approval_timeout_seconds == 30.0
    for wrong in (-1, math.inf, math.nan, 1e12):
        with pytest.raises(ConfigurationError, match="approval_timeout_seconds"):
            Agent("a", provider, approval_timeout_seconds=wrong)
