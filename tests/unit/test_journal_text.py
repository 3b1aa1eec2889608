"""Text and JSON as the journal holds them: always valid UTF-8, the same after a resume."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from leaseward.cli.json_output import json_document
from leaseward.runtime.conversation import (
    idempotency_key,
    normalize_reply,
    pending_calls,
    reply_from_json,
    reply_to_json,
)
from leaseward.runtime.encoding import MAX_JSON_DEPTH, dump_json, load_json, shown, valid_text
from leaseward.runtime.errors import InvalidInput, ProviderError
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import Event, StepKind, StepStatus
from leaseward.runtime.messages import ProviderReply, ToolCall
from leaseward.runtime.settlements import Settlement

LONE = "\ud83d"
# Any code point, lone surrogates and NUL included: what a decoded model reply may hold.
any_text = st.text(
    st.characters(codec=None, exclude_categories=())
    | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
    | st.just("\x00"),
    max_size=12,
)


def nested(depth: int) -> Any:
    """``depth`` lists, one inside the other."""
    value: Any = None
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        (LONE, "\\ud83d"),
        (f"a{LONE}b", "a\\ud83db"),
        ("\udc00", "\\udc00"),
        ("\ud83d\ude00", "\U0001f600"),  # a pair split in two code points is one character
        ("nul\x00here", "nul\\x00here"),
        ("plain ünïcödé 😀", "plain ünïcödé 😀"),
    ],
)
def test_valid_text_escapes_what_no_store_can_hold(text: str, cleaned: str) -> None:
    assert valid_text(text) == cleaned


@given(any_text)
def test_what_a_terminal_or_a_page_is_given_is_utf_8_and_says_the_same(text: str) -> None:
    # A lone surrogate loaded back from the journal has no UTF-8: `leaseward show` and the
    # console's pages of it raised instead of printing it.
    shown(text).encode()
    assert shown(shown(text)) == shown(text)
    document = json_document({"said": [text]})
    document.encode()
    assert json.loads(document) == {"said": [text]}


@given(any_text)
def test_valid_text_is_utf8_free_of_nul_and_stable(text: str) -> None:
    cleaned = valid_text(text)
    cleaned.encode()
    assert "\x00" not in cleaned
    assert valid_text(cleaned) == cleaned


@given(st.recursive(any_text, lambda inner: st.lists(inner, max_size=3), max_leaves=6))
def test_dump_json_is_utf8_and_loads_back_exactly(value: Any) -> None:
    text = dump_json({"value": value})
    text.encode()
    assert load_json(text) == {"value": value}
    assert dump_json(load_json(text)) == text


def test_dump_json_keeps_plain_unicode_unescaped() -> None:
    assert dump_json("ünï 😀") == '"ünï 😀"'
    assert dump_json(LONE) == '"\\ud83d"'


def test_dump_json_counts_the_escaped_size_against_the_limit() -> None:
    with pytest.raises(InvalidInput, match="over the 12-byte limit"):
        dump_json(LONE * 3, limit=12)


def test_dump_json_refuses_values_nested_too_deep_to_read_back() -> None:
    assert load_json(dump_json(nested(MAX_JSON_DEPTH))) == nested(MAX_JSON_DEPTH)
    with pytest.raises(InvalidInput, match=f"more than {MAX_JSON_DEPTH} levels"):
        dump_json(nested(MAX_JSON_DEPTH + 1))
    with pytest.raises(InvalidInput, match="levels deep"):
        dump_json({"deep": nested(100_000)}, what="the run input")


def test_dump_json_refuses_a_value_that_contains_itself() -> None:
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(InvalidInput, match="contains itself"):
        dump_json(looped)


@given(
    st.builds(
        ProviderReply,
        text=st.none() | any_text,
        tool_calls=st.lists(
            st.builds(
                ToolCall,
                name=any_text,
                arguments=st.dictionaries(any_text, any_text, max_size=2),
                call_id=any_text,
            ),
            max_size=3,
        ),
    )
)
def test_a_normalized_reply_comes_back_from_the_journal_with_the_same_keys(
    reply: ProviderReply,
) -> None:
    out = normalize_reply(reply, 3)
    journaled = dump_json(reply_to_json(out))
    journaled.encode()
    resumed = reply_from_json(json.loads(journaled))
    assert resumed == out
    for call in out.tool_calls:
        call.name.encode()
        call.call_id.encode()
    assert [p.idempotency_key for p in pending_calls("r", 3, resumed)] == [
        idempotency_key("r", 3, index, call.call_id) for index, call in enumerate(out.tool_calls)
    ]


@pytest.mark.parametrize(("name", "call_id"), [(3, "c"), ("n", None), (None, "")])
def test_a_tool_call_whose_name_or_id_is_not_text_is_the_providers_error(
    name: Any, call_id: Any
) -> None:
    with pytest.raises(ProviderError, match="not str"):
        ToolCall(name, {}, call_id)


def test_error_texts_are_made_storable() -> None:
    step = StepWrite(seq=0, kind=StepKind.TOOL, status=StepStatus.FAILED, error=f"bad {LONE}")
    assert step.error == "bad \\ud83d"
    # The copies a call's record goes through clean the error they are given too: the
    # words of a tool that raised reach the journal so.
    intent = StepWrite(seq=1, kind=StepKind.TOOL, status=StepStatus.STARTED)
    raised = msgspec.structs.replace(intent, settles=True, error=f"raised {LONE}")
    assert raised.error == "raised \\ud83d"
    ended = intent.ended(StepStatus.FAILED, None, f"\x00{LONE}", settles=True)
    assert ended.error == "\\x00\\ud83d"
    assert Settlement(Event.FAIL, error="\x00").error == "\\x00"
    assert Settlement(Event.FAIL).error is None
