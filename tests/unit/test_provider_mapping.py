"""The HTTP adapters' pure parts: requests built, replies read, errors classed, keys hidden."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest

from leaseward import (
    Agent,
    ConfigurationError,
    Message,
    ModelSettings,
    ProviderError,
    ProviderReply,
    ProviderRequest,
    Role,
    ScriptedProvider,
    ToolCall,
    ToolSpec,
    Usage,
)
from leaseward.providers import AnthropicMessages, OpenAIChat
from leaseward.providers.anthropic import (
    DEFAULT_ANTHROPIC_MAX_TOKENS,
    messages_reply,
    messages_request,
)
from leaseward.providers.endpoint import (
    ApiError,
    BadReply,
    Secret,
    api_key_from,
    error_details,
    failure_class_for,
    retry_after_seconds,
)
from leaseward.providers.openai import chat_reply, chat_request
from leaseward.runtime.failures import FailureClass

KEY = "sk-test-4f9a7c1e0b2d"
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER = ToolSpec("weather", "The weather in a city.", SCHEMA)
SETTINGS = ModelSettings(model="m-1")

# A conversation with every kind of message: a call that ran, one refused because its
# arguments were not JSON, and the answer after both.
CONVERSATION = (
    Message(Role.SYSTEM, "Be brief."),
    Message(Role.USER, "Weather in Oslo and Rome?"),
    Message(
        Role.ASSISTANT,
        None,
        tool_calls=(
            ToolCall("weather", {"city": "Oslo"}, "c1"),
            ToolCall("weather", {}, "c2", invalid_arguments='{"city": Rome}'),
        ),
    ),
    Message(Role.TOOL, '"rain"', tool_call_id="c1", name="weather"),
    Message(Role.TOOL, '{"error": "not JSON"}', tool_call_id="c2", name="weather", is_error=True),
)


def request(
    messages: tuple[Message, ...] = CONVERSATION,
    tools: tuple[ToolSpec, ...] = (WEATHER,),
    settings: ModelSettings = SETTINGS,
) -> ProviderRequest:
    return ProviderRequest("run-1", "forecaster", messages, tools, settings)


# -- OpenAI chat completions -------------------------------------------------------------


def test_a_chat_request_carries_the_conversation_and_the_tools() -> None:
    body = chat_request(request(), SETTINGS)
    assert body == {
        "model": "m-1",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Oslo and Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        # The text the model wrote goes back exactly as it wrote it.
                        "function": {"name": "weather", "arguments": '{"city": Rome}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": '"rain"'},
            {"role": "tool", "tool_call_id": "c2", "content": '{"error": "not JSON"}'},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    # Closed, with every property required: its strict form is itself.
                    "parameters": SCHEMA,
                    "description": "The weather in a city.",
                    "strict": True,
                },
            }
        ],
    }


def test_a_chat_request_carries_the_settings() -> None:
    settings = ModelSettings("m-2", temperature=0.3, max_tokens=99, extra_body={"seed": 7})
    body = chat_request(request(tools=(WEATHER,)), settings)
    assert (body["model"], body["temperature"], body["max_tokens"], body["seed"]) == (
        "m-2",
        0.3,
        99,
        7,
    )


OPTIONAL_UNIT = ToolSpec(
    "forecast",
    "",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
        "required": ["city"],
    },
)
# An object whose keys the schema does not name: strict mode has no form for it.
TAGS = ToolSpec(
    "tag",
    "",
    {
        "type": "object",
        "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}},
        "required": ["tags"],
    },
)


def test_strict_tools_get_their_strict_form_and_the_rest_go_as_they_are() -> None:
    strict, loose = chat_request(request(tools=(OPTIONAL_UNIT, TAGS)), SETTINGS)["tools"]
    forecast = strict["function"]
    assert forecast["strict"] is True
    assert forecast["parameters"]["required"] == ["city", "unit"]
    assert forecast["parameters"]["additionalProperties"] is False
    assert {"type": "null"} in forecast["parameters"]["properties"]["unit"]["anyOf"]
    assert "strict" not in loose["function"]
    assert loose["function"]["parameters"] == TAGS.parameters


def test_strict_false_sends_every_schema_as_it_is() -> None:
    tools = chat_request(request(tools=(OPTIONAL_UNIT, TAGS)), SETTINGS, strict=False)["tools"]
    assert [tool["function"]["parameters"] for tool in tools] == [
        OPTIONAL_UNIT.parameters,
        TAGS.parameters,
    ]
    assert all("strict" not in tool["function"] for tool in tools)


def test_a_chat_request_without_tools_sends_none() -> None:
    body = chat_request(request(tools=()), SETTINGS)
    assert "tools" not in body
    assert "temperature" not in body and "max_tokens" not in body


def completion(message: dict[str, Any], finish_reason: str = "stop", **extra: Any) -> Any:
    return {"choices": [{"message": message, "finish_reason": finish_reason}], **extra}


def test_a_chat_reply_maps_text_calls_usage_and_model() -> None:
    data = completion(
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "w", "arguments": "{}"}},
                {"id": "b", "function": {"name": "w", "arguments": '{"city": "Oslo"}'}},
                {"id": "c", "function": {"name": "w", "arguments": "not json"}},
                {"id": "d", "function": {"name": "w", "arguments": "[1, 2]"}},
                {"id": "e", "function": {"name": "w", "arguments": ""}},
                {"id": "f", "function": {"name": "w", "arguments": {"city": "Rome"}}},
            ],
        },
        "tool_calls",
        usage={"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        model="m-1-0613",
    )
    reply = chat_reply(data, SETTINGS)
    assert reply == ProviderReply(
        "Looking.",
        (
            ToolCall("w", {}, "a"),
            ToolCall("w", {"city": "Oslo"}, "b"),
            ToolCall("w", {}, "c", invalid_arguments="not json"),
            ToolCall("w", {}, "d", invalid_arguments="[1, 2]"),
            ToolCall("w", {}, "e"),
            ToolCall("w", {"city": "Rome"}, "f"),
        ),
        usage=Usage(100, 20),
        model="m-1-0613",
        stop_reason="tool_calls",
    )


def test_a_chat_reply_without_usage_or_model_falls_back_to_the_request() -> None:
    reply = chat_reply(
        completion({"content": [{"type": "text", "text": "a"}, {"text": "b"}]}), SETTINGS
    )
    assert (reply.text, reply.usage, reply.model, reply.stop_reason) == ("ab", None, "m-1", "stop")


@pytest.mark.parametrize(
    ("finish_reason", "failure", "words"),
    [
        ("length", FailureClass.CONFIGURATION, "max_tokens=50"),
        ("content_filter", FailureClass.CLIENT_ERROR, "content filter"),
    ],
)
def test_an_unfinished_chat_reply_is_a_failure_of_its_own(
    finish_reason: str, failure: FailureClass, words: str
) -> None:
    data = completion({"content": "The answer is"}, finish_reason)
    with pytest.raises(BadReply, match=words) as caught:
        chat_reply(data, ModelSettings("m", max_tokens=50))
    assert caught.value.failure_class is failure
    assert not failure.retryable


def test_a_refusal_is_a_client_error() -> None:
    with pytest.raises(BadReply, match="refused: no") as caught:
        chat_reply(completion({"content": None, "refusal": "no"}), SETTINGS)
    assert caught.value.failure_class is FailureClass.CLIENT_ERROR


def test_a_legacy_function_call_is_not_taken_for_a_plain_answer() -> None:
    legacy = {"content": None, "function_call": {"name": "weather", "arguments": "{}"}}
    with pytest.raises(BadReply, match="legacy function_call") as caught:
        chat_reply(completion(legacy, "function_call"), SETTINGS)
    assert caught.value.failure_class is FailureClass.CONFIGURATION


def test_a_long_refusal_is_shown_bounded_on_one_line() -> None:
    refusal = "I cannot help with that.\n" * 5000
    with pytest.raises(BadReply) as caught:
        chat_reply(completion({"content": None, "refusal": refusal}), SETTINGS)
    shown = str(caught.value)
    assert len(shown) < 400 and "\n" not in shown
    assert shown.startswith("the model refused: I cannot help with that. I cannot")


@pytest.mark.parametrize(
    "data",
    [
        [],
        {},
        {"choices": []},
        {"choices": [1]},
        {"choices": [{"finish_reason": "stop"}]},
        completion({"content": 5}),
        completion({"tool_calls": {"id": "a"}}),
        completion({"tool_calls": [{"id": "a"}]}),
        completion({"tool_calls": [{"id": "a", "function": {"arguments": "{}"}}]}),
        completion({"tool_calls": [{"id": 7, "function": {"name": "w"}}]}),
    ],
)
def test_an_answer_that_is_no_chat_completion_is_a_server_error(data: Any) -> None:
    with pytest.raises(BadReply, match="not a chat completion") as caught:
        chat_reply(data, SETTINGS)
    assert caught.value.failure_class is FailureClass.SERVER_ERROR


# -- Anthropic messages ---------------------------------------------------------------------


def test_a_messages_request_puts_the_system_prompt_apart_and_results_in_one_user_turn() -> None:
    body = messages_request(request(), SETTINGS)
    assert body == {
        "model": "m-1",
        "max_tokens": DEFAULT_ANTHROPIC_MAX_TOKENS,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Weather in Oslo and Rome?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "c2", "name": "weather", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": '"rain"',
                        "is_error": False,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "c2",
                        "content": '{"error": "not JSON"}',
                        "is_error": True,
                    },
                ],
            },
        ],
        "tools": [
            {"name": "weather", "input_schema": SCHEMA, "description": "The weather in a city."}
        ],
    }


def test_a_messages_request_sends_no_text_block_of_only_whitespace() -> None:
    call = ToolCall("weather", {"city": "Oslo"}, "c1")
    messages = (
        Message(Role.USER, "Weather?"),
        Message(Role.ASSISTANT, "\n\n", tool_calls=(call,)),
        Message(Role.TOOL, '"rain"', tool_call_id="c1", name="weather"),
        Message(Role.ASSISTANT, " "),
        Message(Role.USER, "And now?"),
    )
    sent = messages_request(request(messages), SETTINGS)["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Oslo"}}],
    }
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "user"]


def test_a_messages_request_carries_the_settings() -> None:
    settings = ModelSettings("m-3", temperature=0.5, max_tokens=64, extra_body={"top_k": 3})
    messages = (Message(Role.USER, "hi"), Message(Role.ASSISTANT, "Hello."))
    body = messages_request(request(messages, tools=()), settings)
    assert body == {
        "model": "m-3",
        "max_tokens": 64,
        "temperature": 0.5,
        "top_k": 3,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
        ],
    }


def anthropic(content: list[Any], stop_reason: str = "end_turn", **extra: Any) -> Any:
    return {"type": "message", "content": content, "stop_reason": stop_reason, **extra}


def test_a_messages_reply_maps_text_tool_use_usage_and_model() -> None:
    data = anthropic(
        [
            {"type": "text", "text": "Checking "},
            {"type": "thinking", "thinking": "..."},
            {"type": "text", "text": "both."},
            {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "t2", "name": "weather", "input": "Rome"},
        ],
        "tool_use",
        model="claude-x",
        usage={
            "input_tokens": 10,
            "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": 1000,
            "output_tokens": 30,
        },
    )
    assert messages_reply(data, SETTINGS) == ProviderReply(
        "Checking both.",
        (
            ToolCall("weather", {"city": "Oslo"}, "t1"),
            ToolCall("weather", {}, "t2", invalid_arguments='"Rome"'),
        ),
        usage=Usage(1110, 30),
        model="claude-x",
        stop_reason="tool_use",
        reasoning=({"type": "thinking", "thinking": "..."},),
    )


def test_thinking_goes_back_first_in_its_turn_and_a_strange_block_is_passed_over() -> None:
    thinking = {"type": "thinking", "thinking": "Oslo first.", "signature": "c2ln"}
    redacted = {"type": "redacted_thinking", "data": "ZW5j"}
    call = {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}
    reply = messages_reply(
        anthropic([{"type": ["odd"]}, call, thinking, redacted], "tool_use"), SETTINGS
    )
    assert reply.reasoning == (thinking, redacted)
    turn = Message(Role.ASSISTANT, None, tool_calls=reply.tool_calls, reasoning=reply.reasoning)
    body = messages_request(request((Message(Role.USER, "hi"), turn), tools=()), SETTINGS)
    assert body["messages"][1] == {"role": "assistant", "content": [thinking, redacted, call]}


@pytest.mark.parametrize(
    ("stop_reason", "failure", "words"),
    [
        ("max_tokens", FailureClass.CONFIGURATION, "max_tokens=4096"),
        ("model_context_window_exceeded", FailureClass.CONFIGURATION, "context window"),
        ("refusal", FailureClass.CLIENT_ERROR, "refused"),
    ],
)
def test_an_unfinished_messages_reply_is_a_failure_of_its_own(
    stop_reason: str, failure: FailureClass, words: str
) -> None:
    with pytest.raises(BadReply, match=words) as caught:
        messages_reply(anthropic([{"type": "text", "text": "I"}], stop_reason), SETTINGS)
    assert caught.value.failure_class is failure


@pytest.mark.parametrize(
    "data",
    [
        "x",
        {},
        anthropic([1]),
        anthropic([{"type": "tool_use", "id": "t", "input": {}}]),
        anthropic([{"type": "tool_use", "id": 3, "name": "w", "input": {}}]),
    ],
)
def test_an_answer_that_is_no_message_is_a_server_error(data: Any) -> None:
    with pytest.raises(BadReply, match="not a Messages API message") as caught:
        messages_reply(data, SETTINGS)
    assert caught.value.failure_class is FailureClass.SERVER_ERROR


# -- errors, Retry-After, keys --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"error": {"message": "slow", "type": "requests", "code": "rate_limit_exceeded"}},
            ApiError("slow", ("requests", "rate_limit_exceeded")),
        ),
        (
            {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
            ApiError("busy", ("overloaded_error",)),
        ),
        ({"error": "bad gateway"}, ApiError("bad gateway")),
        (
            {"object": "error", "message": "no model", "type": "NotFoundError"},
            ApiError("no model", ("NotFoundError",)),
        ),
        ({"detail": "Not Found"}, ApiError("Not Found")),
        ({"error": {"code": 400}}, ApiError()),
        (["x"], ApiError()),
        (None, ApiError()),
    ],
)
def test_error_details_read_each_api_and_gateway_form(body: Any, expected: ApiError) -> None:
    assert error_details(body) == expected


@pytest.mark.parametrize(
    ("status", "failure"),
    [
        (429, FailureClass.RATE_LIMIT),
        (500, FailureClass.SERVER_ERROR),
        (502, FailureClass.SERVER_ERROR),
        (503, FailureClass.SERVER_ERROR),
        (529, FailureClass.SERVER_ERROR),
        (400, FailureClass.CLIENT_ERROR),
        (404, FailureClass.CLIENT_ERROR),
        (413, FailureClass.CLIENT_ERROR),
        (422, FailureClass.CLIENT_ERROR),
        (401, FailureClass.AUTH),
        (403, FailureClass.AUTH),
    ],
)
def test_statuses_map_to_the_failure_classes(status: int, failure: FailureClass) -> None:
    assert failure_class_for(status, ApiError()) is failure


@pytest.mark.parametrize(
    "kinds",
    [
        ("insufficient_quota",),
        ("invalid_request_error", "credit_balance_exhausted"),
        ("enforced_spend_limit_reached",),
    ],
)
def test_an_exhausted_quota_is_not_a_rate_limit(kinds: tuple[str, ...]) -> None:
    failure = failure_class_for(429, ApiError("no money", kinds))
    assert failure is FailureClass.CONFIGURATION
    assert not failure.retryable


NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9.0),
        (
            {"retry-after": format_datetime(datetime.fromtimestamp(NOW + 42, UTC), usegmt=True)},
            42.0,
        ),
        ({"retry-after": format_datetime(datetime.fromtimestamp(NOW - 42, UTC), usegmt=True)}, 0.0),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "tomorrow"}, None),
        ({}, None),
    ],
)
def test_retry_after_reads_seconds_milliseconds_and_dates(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after_seconds(headers, NOW) == (
        None if seconds is None else pytest.approx(seconds)
    )


def test_a_secret_never_shows_itself() -> None:
    secret = Secret(KEY)
    assert KEY not in repr(secret) and KEY not in str(secret) and KEY not in f"{secret}"
    assert secret.reveal() == KEY
    assert (
        secret.redact(f"Incorrect API key provided: {KEY}.") == "Incorrect API key provided: ***."
    )


def test_the_key_comes_from_the_argument_else_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOME_KEY", f"  {KEY}\n")
    assert api_key_from("sk-arg", "SOME_KEY").reveal() == "sk-arg"  # type: ignore[union-attr]
    assert api_key_from(None, "SOME_KEY").reveal() == KEY  # type: ignore[union-attr]
    monkeypatch.setenv("SOME_KEY", "")
    assert api_key_from(None, "SOME_KEY") is None
    monkeypatch.delenv("SOME_KEY")
    assert api_key_from(None, "SOME_KEY") is None


def test_a_key_no_header_can_carry_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigurationError, match="characters an HTTP header") as caught:
        api_key_from("sk-ä-secret-part", "SOME_KEY")
    assert "secret-part" not in str(caught.value)


# -- the adapters' settings ----------------------------------------------------------------


@pytest.fixture
def no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_provider_env")
def test_repr_names_the_model_and_url_never_the_key() -> None:
    openai = OpenAIChat("gpt-x", api_key=KEY)
    anthropic = AnthropicMessages("claude-x", api_key=KEY)
    assert (
        repr(openai)
        == "OpenAIChat(model='gpt-x', url='https://api.openai.com/v1/chat/completions')"
    )
    assert repr(anthropic) == (
        "AnthropicMessages(model='claude-x', url='https://api.anthropic.com/v1/messages')"
    )
    for provider in (openai, anthropic):
        assert KEY not in repr(provider) and KEY not in repr(vars(provider))


@pytest.mark.usefixtures("no_provider_env")
def test_the_endpoint_and_key_come_from_the_usual_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1/")
    assert "localhost:11434/v1/chat/completions" in repr(OpenAIChat("llama"))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/")
    assert "127.0.0.1:9/v1/messages" in repr(AnthropicMessages("claude"))


@pytest.mark.usefixtures("no_provider_env")
def test_an_azure_style_query_is_kept_and_never_shown() -> None:
    provider = OpenAIChat(
        "gpt-x",
        base_url="https://gw.example/openai/deployments/d1?api-version=2024-06-01",
        api_key=KEY,
    )
    assert repr(provider) == (
        "OpenAIChat(model='gpt-x', url='https://gw.example/openai/deployments/d1/chat/completions')"
    )


@pytest.mark.usefixtures("no_provider_env")
@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: OpenAIChat("gpt-x"), "needs an API key.*OPENAI_API_KEY"),
        (lambda: AnthropicMessages("claude-x"), "needs an API key.*ANTHROPIC_API_KEY"),
        (lambda: OpenAIChat(None, base_url="http://h/v1"), "needs a model"),  # type: ignore[arg-type]
        (lambda: OpenAIChat("", base_url="http://h/v1"), "model must be a non-empty"),
        (lambda: OpenAIChat("m", base_url="localhost:8000/v1"), "http:// or https://"),
        (lambda: OpenAIChat("m", base_url="http://h/v1", timeout_seconds=0), "timeout_seconds"),
        (lambda: OpenAIChat("m", base_url="http://h/v1", temperature=-1), "temperature"),
        (lambda: AnthropicMessages("m", base_url="http://h", max_tokens=0), "max_tokens"),
        (
            lambda: OpenAIChat("m", base_url="http://h/v1", extra_body={"x": math.nan}),
            "extra_body",
        ),
        (
            lambda: OpenAIChat("m", base_url="http://h/v1", extra_headers={"x": 1}),  # type: ignore[dict-item]
            "extra_headers",
        ),
        (
            lambda: OpenAIChat("m", base_url="http://h/v1", extra_headers={"x-team": "café"}),
            "value of 'x-team'.*cannot carry",
        ),
        (
            lambda: AnthropicMessages("m", base_url="http://h", extra_headers={"x": "a\r\nb: c"}),
            "value of 'x'.*cannot carry",
        ),
        (
            lambda: OpenAIChat("m", base_url="http://h/v1", extra_headers={"x team": "v"}),
            "'x team' is not an HTTP header name",
        ),
        (
            lambda: AnthropicMessages("m", base_url="http://h", extra_headers=[("a", "b")]),  # type: ignore[arg-type]
            "extra_headers must map header names",
        ),
    ],
)
def test_bad_settings_get_one_clear_error(make: Any, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        make()


# -- the kernel's part: settings, calls, usage -------------------------------------------


def test_agent_settings_override_the_providers_and_merge_extra_fields() -> None:
    defaults = ModelSettings("base", temperature=0.7, max_tokens=100, extra_body={"a": 1, "b": 1})
    mine = ModelSettings(temperature=0.0, extra_body={"b": 2})
    assert mine.over(defaults) == ModelSettings("base", 0.0, 100, {"a": 1, "b": 2})
    assert ModelSettings().over(defaults) == defaults


def test_model_settings_cannot_be_changed_in_passing() -> None:
    extra = {"a": 1}
    settings = ModelSettings(extra_body=extra)
    extra["a"] = 2
    assert settings.extra_body == {"a": 1}
    with pytest.raises(TypeError):
        settings.extra_body["a"] = 3  # type: ignore[index]


def test_a_tool_call_from_text_keeps_text_that_is_no_json_object() -> None:
    assert ToolCall.from_text("f", '{"a": 1}', "c") == ToolCall("f", {"a": 1}, "c")
    assert ToolCall.from_text("f", " ", "c") == ToolCall("f", {}, "c")
    broken = ToolCall.from_text("f", '{"a": ', "c")
    assert (broken.arguments, broken.invalid_arguments) == ({}, '{"a": ')
    assert broken.arguments_problem is not None and "not JSON" in broken.arguments_problem
    listed = ToolCall.from_text("f", "[1]", "c")
    assert listed.arguments_problem == "they are a JSON list, not an object"
    for text in ('{"a": NaN}', '{"a": [Infinity]}', '{"a": 1e999}', '{"a": -1E400}'):
        unnumbered = ToolCall.from_text("f", text, "c")
        assert (unnumbered.arguments, unnumbered.invalid_arguments) == ({}, text)
        assert "not a number JSON has" in (unnumbered.arguments_problem or "")
    assert ToolCall.from_text("f", '{"a": 1e308, "b": -2.5}', "c").arguments == {
        "a": 1e308,
        "b": -2.5,
    }
    long_number = "9" * 400 + ".0"
    problem = ToolCall.from_text("f", f'{{"a": {long_number}}}', "c").arguments_problem or ""
    assert "not a number JSON has" in problem and len(problem) < 200
    deepest = '{"a": ' + "[" * 196 + "]" * 196 + "}"
    assert ToolCall.from_text("f", deepest, "c").arguments_problem is None
    too_deep = ToolCall.from_text("f", '{"a": ' + "[" * 197 + "]" * 197 + "}", "c")
    assert too_deep.arguments_problem == "they are nested more than 197 levels deep"


def test_a_tool_call_from_decoded_arguments_is_held_to_their_text() -> None:
    assert ToolCall.from_decoded("f", {"a": [1, {"b": None}]}, "c") == ToolCall(
        "f", {"a": [1, {"b": None}]}, "c"
    )
    unnumbered = ToolCall.from_decoded("f", {"a": float("nan")}, "c")
    assert (unnumbered.arguments, unnumbered.invalid_arguments) == ({}, '{"a": NaN}')
    listed = ToolCall.from_decoded("f", [1], "c")
    assert listed.arguments_problem == "they are a JSON list, not an object"
    assert ToolCall.from_decoded("f", None, "c").invalid_arguments == "null"
    assert ToolCall("f", {"a": 1}).arguments_problem is None


def test_a_tool_call_refuses_arguments_text_that_is_no_string() -> None:
    with pytest.raises(ProviderError, match="invalid_arguments"):
        ToolCall("f", {}, "c", invalid_arguments=b"{}")  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [-1, 1.5, True, "3", None])
def test_usage_counts_are_token_counts(count: Any) -> None:
    with pytest.raises(ProviderError, match="count of tokens"):
        Usage(input_tokens=count)


def test_an_agent_takes_model_settings_only_as_model_settings() -> None:
    provider = ScriptedProvider([])
    assert Agent("a", provider).model_settings == ModelSettings()
    tuned = ModelSettings("m", temperature=0.1)
    assert Agent("a", provider, model_settings=tuned).model_settings is tuned
    with pytest.raises(ConfigurationError, match="model_settings must be a ModelSettings"):
        Agent("a", provider, model_settings={"model": "m"})  # type: ignore[arg-type]


def test_usage_read_from_json_needs_two_counts() -> None:
    assert Usage.read(3, 0) == Usage(3, 0)
    for bad in [(None, 1), (1, -1), ("1", 1), (True, 1), (1.0, 1)]:
        assert Usage.read(*bad) is None


def test_usage_adds_up() -> None:
    assert Usage(1, 2) + Usage(10, 20) == Usage(11, 22)
