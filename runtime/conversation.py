"""Rebuilding a run's conversation from its journal, so a resumed run repeats nothing (G8)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import msgspec

from leaseward.runtime.encoding import MAX_ARGUMENTS_DEPTH, check_shape, dump_json, valid_text
from leaseward.runtime.errors import InvalidInput
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import StepKind, StepStatus
from leaseward.runtime.messages import Message, ProviderReply, Role, ToolCall, Usage

__all__ = [
    "Conversation",
    "PendingCall",
    "assistant_message",
    "idempotency_key",
    "input_message",
    "normalize_reply",
    "pending_calls",
    "rebuild",
    "reply_from_json",
    "reply_to_json",
    "run_usage",
    "tool_message",
    "usage_from_json",
    "with_unjournalable_arguments_refused",
]


def idempotency_key(run_id: str, turn_seq: int, index: int, call_id: str) -> str:
    """Derived from the journal alone, so every execution of one call computes the same key."""
    material = f"{run_id}\x1f{turn_seq}\x1f{index}\x1f{call_id}".encode()
    return hashlib.sha256(material).hexdigest()[:32]


class PendingCall(msgspec.Struct, frozen=True):
    turn_seq: int
    index: int
    call: ToolCall
    idempotency_key: str
    open_attempt: StepInfo | None = None
    """A ``started`` row of an earlier attempt whose outcome was never recorded."""


@attrs.frozen
class Conversation:
    messages: tuple[Message, ...]
    next_seq: int
    provider_turns: int
    pending: tuple[PendingCall, ...]
    final_reply: ProviderReply | None
    """The last reply, when it asked for no tools: the run is over but not yet settled."""


def input_message(value: Any) -> Message:
    content = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return Message(Role.USER, content)


def assistant_message(reply: ProviderReply) -> Message:
    return Message(
        Role.ASSISTANT, reply.text, tool_calls=reply.tool_calls, reasoning=reply.reasoning
    )


def tool_message(call: ToolCall, output: Any, *, is_error: bool = False) -> Message:
    content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return Message(Role.TOOL, content, tool_call_id=call.call_id, name=call.name, is_error=is_error)


def normalize_reply(reply: ProviderReply, turn_seq: int) -> ProviderReply:
    """Give every call an id unique within its turn, so journal rows can name their call.

    Names and ids go to the journal's text columns, so they are made text every
    store holds (``valid_text``). The text and arguments go in as JSON, which
    holds any string. Either way the journal gives back exactly this reply.
    """
    if _normal(reply.tool_calls):
        return reply
    seen: set[str] = set()
    # Ids the model chose later in this reply must not be taken by a generated one.
    given = {valid_text(call.call_id) for call in reply.tool_calls if call.call_id}
    calls: list[ToolCall] = []
    for index, call in enumerate(reply.tool_calls):
        call_id = valid_text(call.call_id)
        if not call_id or call_id in seen:
            call_id = f"call_{turn_seq}_{index}"
            while call_id in seen or call_id in given:
                call_id += "_"
        seen.add(call_id)
        calls.append(
            ToolCall(
                valid_text(call.name),
                dict(call.arguments),
                call_id,
                invalid_arguments=call.invalid_arguments,
            )
        )
    return attrs.evolve(reply, tool_calls=tuple(calls))


def _normal(calls: Sequence[ToolCall]) -> bool:
    """Whether ``normalize_reply`` would leave these calls as they are: what a provider
    gives nearly always, so the reply is kept instead of copied call by call."""
    ids = set()
    for call in calls:
        call_id = call.call_id
        if (
            not call_id
            or call_id in ids
            or valid_text(call_id) != call_id
            or valid_text(call.name) != call.name
            or type(call.arguments) is not dict
        ):
            return False
        ids.add(call_id)
    return True


def _call_to_json(call: ToolCall) -> dict[str, Any]:
    data = {"name": call.name, "arguments": dict(call.arguments), "call_id": call.call_id}
    if call.invalid_arguments is not None:
        data["invalid_arguments"] = call.invalid_arguments
    return data


def with_unjournalable_arguments_refused(reply: ProviderReply) -> ProviderReply:
    """``reply``, each call whose arguments no journal holds (a NaN, an object that is
    not JSON, nesting too deep for the reply's record) made a call with invalid
    arguments: the model is told so, as for argument text that is not JSON, instead of
    the whole turn failing the run."""
    calls: list[ToolCall] = []
    for call in reply.tool_calls:
        arguments = dict(call.arguments)
        try:
            check_shape(arguments, "the arguments", MAX_ARGUMENTS_DEPTH)
            dump_json(arguments)
            calls.append(call)
        except InvalidInput:
            calls.append(
                ToolCall(call.name, {}, call.call_id, invalid_arguments=_as_text(call.arguments))
            )
    return attrs.evolve(reply, tool_calls=tuple(calls))


def _as_text(arguments: Mapping[str, Any]) -> str:
    try:
        return json.dumps(dict(arguments), default=lambda value: f"<{type(value).__name__}>")
    except (RecursionError, ValueError):
        return "<arguments nested too deep to write>"


def reply_to_json(reply: ProviderReply, *, latency_ms: float | None = None) -> dict[str, Any]:
    """The provider step's record: the reply, and what it cost when that is known.

    Keys with nothing to say are left out, so journals written before they
    existed read back the same.
    """
    data: dict[str, Any] = {
        "text": reply.text,
        "tool_calls": [_call_to_json(call) for call in reply.tool_calls],
    }
    if reply.model is not None:
        data["model"] = reply.model
    if reply.usage is not None:
        data["usage"] = {
            "input_tokens": reply.usage.input_tokens,
            "output_tokens": reply.usage.output_tokens,
        }
    if reply.stop_reason is not None:
        data["stop_reason"] = reply.stop_reason
    if reply.reasoning:
        data["reasoning"] = [dict(block) for block in reply.reasoning]
    if latency_ms is not None:
        data["latency_ms"] = latency_ms
    return data


def run_usage(steps: Iterable[StepInfo]) -> Usage:
    """The tokens of every provider turn in a journal that recorded its usage."""
    found = (usage_from_json(step.output) for step in steps if step.kind is StepKind.PROVIDER)
    return sum((usage for usage in found if usage is not None), Usage())


def usage_from_json(data: Any) -> Usage | None:
    """The token usage in a provider step's record, or None when it has none."""
    usage = data.get("usage") if isinstance(data, Mapping) else None
    if not isinstance(usage, Mapping):
        return None
    return Usage.read(usage.get("input_tokens"), usage.get("output_tokens"))


def reply_from_json(data: Mapping[str, Any]) -> ProviderReply:
    return ProviderReply(
        text=data.get("text"),
        tool_calls=tuple(
            ToolCall(
                c["name"],
                c.get("arguments") or {},
                c["call_id"],
                invalid_arguments=c.get("invalid_arguments"),
            )
            for c in data.get("tool_calls", ())
        ),
        usage=usage_from_json(data),
        model=data.get("model"),
        stop_reason=data.get("stop_reason"),
        reasoning=data.get("reasoning", ()),
    )


def pending_calls(run_id: str, turn_seq: int, reply: ProviderReply) -> list[PendingCall]:
    return [
        PendingCall(turn_seq, index, call, idempotency_key(run_id, turn_seq, index, call.call_id))
        for index, call in enumerate(reply.tool_calls)
    ]


def rebuild(
    run_id: str, instructions: str, run_input: Any, steps: Sequence[StepInfo]
) -> Conversation:
    messages: list[Message] = []
    if instructions:
        messages.append(Message(Role.SYSTEM, instructions))
    messages.append(input_message(run_input))
    pending: list[PendingCall] = []
    turns = 0
    last_reply: ProviderReply | None = None
    next_seq = 0
    for step in sorted(steps, key=lambda s: s.seq):
        next_seq = step.seq + 1
        if step.kind is StepKind.PROVIDER:
            if step.status is not StepStatus.SUCCEEDED:
                continue
            last_reply = reply_from_json(step.output)
            turns += 1
            messages.append(assistant_message(last_reply))
            pending = pending_calls(run_id, step.seq, last_reply)
            continue
        position = next((i for i, p in enumerate(pending) if p.call.call_id == step.call_id), None)
        if position is None:
            continue
        if step.status is StepStatus.STARTED:
            pending[position] = msgspec.structs.replace(pending[position], open_attempt=step)
        else:
            messages.append(
                tool_message(
                    pending[position].call,
                    step.output,
                    is_error=step.status is StepStatus.FAILED,
                )
            )
            del pending[position]
    final = last_reply if last_reply is not None and not last_reply.tool_calls else None
    return Conversation(
        messages=tuple(messages),
        next_seq=next_seq,
        provider_turns=turns,
        pending=tuple(pending),
        final_reply=final,
    )
