"""What a call gated by a person does next, decided from the journal alone (G12).

An approval is bound to one call: the provider turn that asked for it, its call
id, and the digest of its exact arguments. The RunActor asks ``gate_call`` before
each call of a turn and does what it says; the journal's intent row, written
before an approved call executes, is what consumes the approval.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import msgspec

from leaseward.runtime.encoding import arguments_digest
from leaseward.runtime.human_requests import EXPIRED_REASON, Decision, HumanRequest, RequestKind

__all__ = ["Gate", "GateAction", "decided_late", "gate_call", "refusal"]


class GateAction(enum.StrEnum):
    CALL = "call"
    """Execute the tool (through its intent, if it is a write or was approved)."""
    PARK = "park"
    """Wait for a person: the run leaves its worker until the request is decided."""
    REFUSE = "refuse"
    """Record ``output`` as the call's error result and execute nothing."""
    ANSWER = "answer"
    """Record the person's input as the call's result and execute nothing."""


class Gate(msgspec.Struct, frozen=True):
    action: GateAction
    kind: RequestKind | None = None
    """For PARK: what the person is asked for."""
    request: HumanRequest | None = None
    """The decided request this gate carries out, if any."""
    output: Any = None
    error: str | None = None


def decided_late(request: HumanRequest) -> bool:
    """Whether the request was decided after it had expired.

    The store refuses such a decision and expires the request instead; a journal
    written before it did so may still hold one, and it authorises nothing.
    """
    return (
        request.expires_at is not None
        and request.decided_at is not None
        and request.decided_at > request.expires_at
    )


def refusal(request: HumanRequest) -> str:
    """The error a rejected or expired call returns to the model."""
    if request.decision is Decision.EXPIRED or decided_late(request):
        return f"rejected: {EXPIRED_REASON}"
    return f"rejected by {request.operator}: {request.note}"


def gate_call(
    arguments: Mapping[str, Any],
    *,
    asks_human: bool,
    needs_approval: bool,
    request: HumanRequest | None,
) -> Gate:
    """The next step for one call, given its journaled request (None if it has none).

    A request, once made, governs its call whatever the code now says about the
    tool: a rejection is never overturned by a policy that would not ask today.
    """
    if request is None:
        if asks_human:
            return Gate(GateAction.PARK, RequestKind.INPUT)
        if needs_approval:
            return Gate(GateAction.PARK, RequestKind.APPROVAL)
        return Gate(GateAction.CALL)
    if request.decision is None:
        return Gate(GateAction.PARK, request.kind, request)
    if request.decision is Decision.ANSWERED:
        return Gate(GateAction.ANSWER, request=request, output=request.value)
    if request.decision is Decision.APPROVED and not decided_late(request):
        if arguments_digest(arguments) != request.arguments_digest:
            # The journal cannot change under a request; if it ever did, nobody
            # approved these arguments.
            error = (
                f"the approval of call {request.call_id} was given for other arguments; "
                "nothing was executed"
            )
            return Gate(GateAction.REFUSE, request=request, output={"error": error}, error=error)
        return Gate(GateAction.CALL, request=request)
    error = refusal(request)
    return Gate(GateAction.REFUSE, request=request, output={"error": error}, error=error)
