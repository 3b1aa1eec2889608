"""Rebuilding the conversation from hand-built journals (G8), and reply normalisation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leaseward.runtime.conversation import (
    idempotency_key,
    input_message,
    normalize_reply,
    rebuild,
    reply_from_json,
    reply_to_json,
)
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import valid_text
from leaseward.runtime.errors import ProviderError
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import StepKind, StepStatus
from leaseward.runtime.messages import Message, ProviderReply, Role, ToolCall, Usage

RUN = "run-1"


def provider_step(
    seq: int, reply: ProviderReply, status: StepStatus = StepStatus.SUCCEEDED
) -> StepInfo:
    return StepInfo(
        run_id=RUN,
        seq=seq,
        epoch=1,
        kind=StepKind.PROVIDER,
        tool=None,
        call_id=None,
        effect=None,
        status=status,
        idempotency_key=None,
        arguments=None,
        output=reply_to_json(reply) if status is StepStatus.SUCCEEDED else None,
        error=None,
        started_at=float(seq),
        finished_at=float(seq),
    )


def tool_step(
    seq: int,
    call: ToolCall,
    status: StepStatus,
    output: Any = None,
    effect: ToolEffect = ToolEffect.IDEMPOTENT_WRITE,
    epoch: int = 1,
) -> StepInfo:
    return StepInfo(
        run_id=RUN,
        seq=seq,
        epoch=epoch,
        kind=StepKind.TOOL,
        tool=call.name,
        call_id=call.call_id,
        effect=effect,
        status=status,
        idempotency_key="k",
        arguments=dict(call.arguments),
        output=output,
        error=None,
        started_at=float(seq),
        finished_at=None if status is StepStatus.STARTED else float(seq),
    )


CALL_A = ToolCall("lookup", {"q": "a"}, "call-a")
CALL_B = ToolCall("charge", {"cents": 5}, "call-b")
TWO_CALLS = ProviderReply(text="working", tool_calls=(CALL_A, CALL_B))


def test_empty_journal() -> None:
    conv = rebuild(RUN, "be nice", "hello", [])
    assert conv.messages == (Message(Role.SYSTEM, "be nice"), Message(Role.USER, "hello"))
    assert conv.next_seq == 0
    assert conv.provider_turns == 0
    assert conv.pending == ()
    assert conv.final_reply is None


def test_no_instructions_means_no_system_message() -> None:
    conv = rebuild(RUN, "", {"order": 7}, [])
    assert conv.messages == (Message(Role.USER, '{"order": 7}'),)


def test_input_message_keeps_strings_and_dumps_the_rest() -> None:
    assert input_message("hé") == Message(Role.USER, "hé")
    assert json.loads(input_message([1, "é"]).content or "") == [1, "é"]
    assert input_message([1, "é"]).content == '[1, "é"]'


def test_provider_step_with_two_calls_leaves_both_pending() -> None:
    conv = rebuild(RUN, "sys", "hi", [provider_step(0, TWO_CALLS)])
    assert conv.next_seq == 1
    assert conv.provider_turns == 1
    assert conv.final_reply is None
    assert conv.messages[-1] == Message(Role.ASSISTANT, "working", tool_calls=(CALL_A, CALL_B))
    assert [p.call for p in conv.pending] == [CALL_A, CALL_B]
    assert [(p.turn_seq, p.index) for p in conv.pending] == [(0, 0), (0, 1)]
    assert [p.idempotency_key for p in conv.pending] == [
        idempotency_key(RUN, 0, 0, "call-a"),
        idempotency_key(RUN, 0, 1, "call-b"),
    ]
    assert all(p.open_attempt is None for p in conv.pending)
    again = rebuild(RUN, "sys", "hi", [provider_step(0, TWO_CALLS)])
    assert again == conv


def test_idempotency_keys_are_deterministic_and_distinct() -> None:
    key = idempotency_key(RUN, 3, 1, "c")
    assert key == idempotency_key(RUN, 3, 1, "c")
    assert len(key) == 32
    int(key, 16)
    others = {
        idempotency_key("run-2", 3, 1, "c"),
        idempotency_key(RUN, 4, 1, "c"),
        idempotency_key(RUN, 3, 2, "c"),
        idempotency_key(RUN, 3, 1, "d"),
        # The separator keeps field boundaries: "1" + "3" is not "13".
        idempotency_key(RUN + "3", 1, 1, "c"),
    }
    assert key not in others
    assert len(others) == 5


def test_a_later_turn_gets_different_keys_for_the_same_call_id() -> None:
    steps = [
        provider_step(0, TWO_CALLS),
        tool_step(1, CALL_A, StepStatus.SUCCEEDED, "x"),
        tool_step(2, CALL_B, StepStatus.SUCCEEDED, "y"),
        provider_step(3, TWO_CALLS),
    ]
    conv = rebuild(RUN, "", "hi", steps)
    assert [p.turn_seq for p in conv.pending] == [3, 3]
    assert conv.pending[0].idempotency_key == idempotency_key(RUN, 3, 0, "call-a")
    assert conv.pending[0].idempotency_key != idempotency_key(RUN, 0, 0, "call-a")
    assert conv.provider_turns == 2


def test_a_settled_tool_row_resolves_its_call() -> None:
    steps = [provider_step(0, TWO_CALLS), tool_step(1, CALL_B, StepStatus.SUCCEEDED, {"ok": 1})]
    conv = rebuild(RUN, "sys", "hi", steps)
    assert [p.call for p in conv.pending] == [CALL_A]
    assert conv.messages[-1] == Message(
        Role.TOOL, '{"ok": 1}', tool_call_id="call-b", name="charge"
    )
    assert conv.next_seq == 2


def test_a_failed_tool_row_also_resolves_its_call_as_an_error_result() -> None:
    steps = [provider_step(0, TWO_CALLS), tool_step(1, CALL_A, StepStatus.FAILED, "bad input")]
    conv = rebuild(RUN, "", "hi", steps)
    assert [p.call for p in conv.pending] == [CALL_B]
    assert conv.messages[-1] == Message(
        Role.TOOL, "bad input", tool_call_id="call-a", name="lookup", is_error=True
    )


def test_all_calls_settled_leaves_nothing_pending_and_no_final_reply() -> None:
    steps = [
        provider_step(0, TWO_CALLS),
        tool_step(1, CALL_A, StepStatus.SUCCEEDED, "x"),
        tool_step(2, CALL_B, StepStatus.SUCCEEDED, "y"),
    ]
    conv = rebuild(RUN, "", "hi", steps)
    assert conv.pending == ()
    assert conv.final_reply is None
    assert [m.role for m in conv.messages] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL]
    assert [m.content for m in conv.messages[2:]] == ["x", "y"]


def test_a_started_row_leaves_the_call_pending_with_its_open_attempt() -> None:
    started = tool_step(1, CALL_B, StepStatus.STARTED, effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    conv = rebuild(RUN, "", "hi", [provider_step(0, TWO_CALLS), started])
    assert [p.call for p in conv.pending] == [CALL_A, CALL_B]
    assert conv.pending[0].open_attempt is None
    assert conv.pending[1].open_attempt == started
    assert conv.pending[1].idempotency_key == idempotency_key(RUN, 0, 1, "call-b")
    assert conv.next_seq == 2
    assert all(m.role is not Role.TOOL for m in conv.messages)


def test_a_re_execution_after_a_started_row_resolves_the_call() -> None:
    steps = [
        provider_step(0, TWO_CALLS),
        tool_step(1, CALL_A, StepStatus.STARTED),
        tool_step(2, CALL_A, StepStatus.SUCCEEDED, "done", epoch=2),
    ]
    conv = rebuild(RUN, "", "hi", steps)
    assert [p.call for p in conv.pending] == [CALL_B]
    assert conv.pending[0].open_attempt is None
    assert conv.messages[-1] == Message(Role.TOOL, "done", tool_call_id="call-a", name="lookup")
    assert conv.next_seq == 3


def test_rebuild_orders_rows_by_seq() -> None:
    steps = [
        tool_step(2, CALL_A, StepStatus.SUCCEEDED, "done"),
        provider_step(0, TWO_CALLS),
        tool_step(1, CALL_A, StepStatus.STARTED),
    ]
    conv = rebuild(RUN, "", "hi", steps)
    assert [p.call for p in conv.pending] == [CALL_B]
    assert conv.next_seq == 3


def test_a_row_for_an_unknown_call_is_ignored() -> None:
    stray = tool_step(1, ToolCall("lookup", {}, "nobody"), StepStatus.SUCCEEDED, "x")
    conv = rebuild(RUN, "", "hi", [provider_step(0, TWO_CALLS), stray])
    assert [p.call for p in conv.pending] == [CALL_A, CALL_B]
    assert all(m.role is not Role.TOOL for m in conv.messages)
    assert conv.next_seq == 2


def test_an_unfinished_provider_step_is_skipped_but_uses_its_seq() -> None:
    conv = rebuild(RUN, "", "hi", [provider_step(0, TWO_CALLS, StepStatus.FAILED)])
    assert conv.provider_turns == 0
    assert conv.pending == ()
    assert conv.messages == (Message(Role.USER, "hi"),)
    assert conv.next_seq == 1


def test_a_final_reply() -> None:
    steps = [
        provider_step(0, ProviderReply("one", (CALL_A,))),
        tool_step(1, CALL_A, StepStatus.SUCCEEDED, "x", effect=ToolEffect.READ_ONLY),
        provider_step(2, ProviderReply("the answer")),
    ]
    conv = rebuild(RUN, "", "hi", steps)
    assert conv.final_reply == ProviderReply("the answer")
    assert conv.pending == ()
    assert conv.provider_turns == 2
    assert conv.next_seq == 3
    assert conv.messages[-1] == Message(Role.ASSISTANT, "the answer")


def test_normalize_reply_fills_missing_and_duplicate_ids() -> None:
    reply = ProviderReply(
        "t",
        (
            ToolCall("a", {"x": 1}, ""),
            ToolCall("b", {}, "id-1"),
            ToolCall("c", {}, "id-1"),
            ToolCall("d", {}, "id-2"),
        ),
    )
    out = normalize_reply(reply, 7)
    assert [c.call_id for c in out.tool_calls] == ["call_7_0", "id-1", "call_7_2", "id-2"]
    assert [c.name for c in out.tool_calls] == ["a", "b", "c", "d"]
    assert out.tool_calls[0].arguments == {"x": 1}
    assert out.text == "t"


def test_normalize_reply_leaves_unique_ids_alone() -> None:
    reply = ProviderReply(None, (CALL_A, CALL_B))
    assert normalize_reply(reply, 0) == reply
    assert normalize_reply(ProviderReply("x"), 0) == ProviderReply("x")


def test_normalize_reply_keeps_the_models_id_when_a_generated_one_would_clash() -> None:
    # The model names its calls; the tool message must answer under the id it chose.
    reply = ProviderReply(None, (ToolCall("a", {}, ""), ToolCall("b", {}, "call_0_0")))
    ids = [c.call_id for c in normalize_reply(reply, 0).tool_calls]
    assert ids[1] == "call_0_0"
    assert len(set(ids)) == 2


def test_normalize_reply_ids_are_unique_when_a_generated_id_was_taken_earlier() -> None:
    reply = ProviderReply(None, (ToolCall("a", {}, "call_0_1"), ToolCall("b", {}, "")))
    ids = [c.call_id for c in normalize_reply(reply, 0).tool_calls]
    assert len(set(ids)) == 2


def test_reply_json_shape() -> None:
    assert reply_to_json(ProviderReply("hi", (CALL_A,))) == {
        "text": "hi",
        "tool_calls": [{"name": "lookup", "arguments": {"q": "a"}, "call_id": "call-a"}],
    }
    assert reply_from_json({"text": None}) == ProviderReply()
    costed = ProviderReply(
        None,
        (ToolCall.from_text("lookup", "{q", "c"),),
        usage=Usage(10, 2),
        model="m-1",
        stop_reason="tool_calls",
    )
    assert reply_to_json(costed, latency_ms=12.5) == {
        "text": None,
        "tool_calls": [
            {"name": "lookup", "arguments": {}, "call_id": "c", "invalid_arguments": "{q"}
        ],
        "model": "m-1",
        "usage": {"input_tokens": 10, "output_tokens": 2},
        "stop_reason": "tool_calls",
        "latency_ms": 12.5,
    }
    assert reply_from_json(
        {"tool_calls": [{"name": "n", "call_id": "c", "arguments": None}]}
    ) == ProviderReply(None, (ToolCall("n", {}, "c"),))


json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
tool_calls = st.builds(
    ToolCall,
    name=st.text(min_size=1, max_size=10),
    arguments=st.dictionaries(st.text(max_size=5), json_values, max_size=3),
    call_id=st.text(max_size=10),
) | st.builds(ToolCall.from_text, name=st.text(min_size=1, max_size=10), text=st.text(max_size=8))
counts = st.integers(min_value=0, max_value=2**40)
replies = st.builds(
    ProviderReply,
    text=st.none() | st.text(max_size=20),
    tool_calls=st.lists(tool_calls, max_size=4),
    usage=st.none() | st.builds(Usage, counts, counts),
    model=st.none() | st.text(max_size=10),
    stop_reason=st.none() | st.text(max_size=10),
)


@given(replies)
def test_reply_json_round_trip(reply: ProviderReply) -> None:
    assert reply_from_json(reply_to_json(reply)) == reply
    # It also survives the journal's JSON text.
    assert reply_from_json(json.loads(json.dumps(reply_to_json(reply)))) == reply


@given(replies, st.integers(min_value=0, max_value=1000))
def test_normalize_reply_keeps_order_names_and_arguments(reply: ProviderReply, turn: int) -> None:
    out = normalize_reply(reply, turn)
    assert (out.text, out.usage, out.model, out.stop_reason) == (
        reply.text,
        reply.usage,
        reply.model,
        reply.stop_reason,
    )
    assert [(c.name, dict(c.arguments), c.invalid_arguments) for c in out.tool_calls] == [
        (valid_text(c.name), dict(c.arguments), c.invalid_arguments) for c in reply.tool_calls
    ]
    assert all(c.call_id for c in out.tool_calls)
    ids = [c.call_id for c in out.tool_calls]
    if len(set(ids)) == len(ids):
        assert normalize_reply(out, turn) == out
    for index, (before, after) in enumerate(zip(reply.tool_calls, out.tool_calls, strict=True)):
        if before.call_id and valid_text(before.call_id) not in ids[:index]:
            assert after.call_id == valid_text(before.call_id)
        else:
            assert after.call_id == f"call_{turn}_{index}"


@pytest.mark.parametrize(
    ("arguments", "call_id", "shown"),
    [
        ('{"to": "a@b.c"}', "call-7", "(call id 'call-7')"),
        ("not a dict", "", "'send_email' from"),
        (["to", "a@b.c"], "c1", "of type list"),
        (None, "c1", "of type NoneType"),
    ],
)
def test_tool_call_arguments_that_are_not_a_mapping_are_the_providers_error(
    arguments: Any, call_id: str, shown: str
) -> None:
    with pytest.raises(ProviderError) as raised:
        ToolCall("send_email", arguments, call_id)
    message = raised.value.message
    assert message.startswith("tool call 'send_email'")
    assert shown in message
    assert "not a mapping" in message
    assert ("decode the JSON text" in message) == isinstance(arguments, str)


def test_tool_call_arguments_shown_in_the_error_are_shortened() -> None:
    with pytest.raises(ProviderError) as raised:
        ToolCall("send_email", "x" * 10_000, "c1")  # type: ignore[arg-type]
    assert len(raised.value.message) < 300
    assert "..." in raised.value.message


def test_tool_call_arguments_nested_past_repr_are_still_named_in_the_error() -> None:
    arguments: Any = "leaf"
    for _ in range(5000):
        arguments = [arguments]
    with pytest.raises(ProviderError) as raised:
        ToolCall("send_email", arguments, "c1")
    assert "of type list" in raised.value.message
    assert len(raised.value.message) < 400


def test_a_turns_reasoning_comes_back_from_the_journal_with_it() -> None:
    thinking = {"type": "thinking", "thinking": "A first.", "signature": "c2ln"}
    turn = ProviderReply("working", (CALL_A,), reasoning=[thinking])
    conv = rebuild(RUN, "", "hi", [provider_step(0, turn)])
    assert conv.messages[-1].reasoning == (thinking,)
    # A journal written before turns had reasoning reads back without any.
    assert "reasoning" not in reply_to_json(TWO_CALLS)
    assert rebuild(RUN, "", "hi", [provider_step(0, TWO_CALLS)]).messages[-1].reasoning == ()


def test_reasoning_that_is_not_a_list_of_mappings_is_the_providers_error() -> None:
    with pytest.raises(ProviderError) as raised:
        ProviderReply("x", reasoning=["thinking"])  # type: ignore[list-item]
    assert "a reasoning block from the provider is a str" in raised.value.message


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"tool_calls": [{"name": "lookup", "arguments": {}}]}, "a tool call .* is a dict"),
        ({"tool_calls": "lookup"}, "tool calls .* a str"),
        ({"tool_calls": None}, "tool calls .* a NoneType"),
        ({"text": {"answer": 1}}, "text .* is a dict"),
        ({"text": b"hi"}, "text .* is a bytes"),
        ({"text": "d", "usage": {"input_tokens": 1}}, "usage .* is a dict"),
    ],
    ids=["call-dict", "calls-str", "calls-none", "text-dict", "text-bytes", "usage-dict"],
)
def test_a_reply_of_the_wrong_shape_is_a_provider_error_saying_what_is_wrong(
    fields: dict[str, Any], fragment: str
) -> None:
    # Raised in the provider's complete(): the run ends not_retryable with these words,
    # where before it ended over an AttributeError, or completed with a dict for its result.
    with pytest.raises(ProviderError, match=fragment):
        ProviderReply(**fields)
