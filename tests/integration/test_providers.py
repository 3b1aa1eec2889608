"""Both HTTP adapters against a real HTTP server on 127.0.0.1 that speaks their APIs.

Every answer is scripted (tests/model_server.py): tool calls, plain answers,
each error class, bodies that are not JSON, slow answers, connections dropped.
Nothing here leaves the loopback interface.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any, Protocol

import pytest

from leaseward import (
    FailureClass,
    Message,
    ModelSettings,
    ProviderError,
    ProviderReply,
    ProviderRequest,
    Role,
    ToolCall,
    ToolSpec,
    Usage,
    classify,
)
from leaseward.providers import MAX_PAUSED_TURNS, AnthropicMessages, OpenAIChat, endpoint
from tests.integration.support import capture_logs, events
from tests.model_server import (
    ModelServer,
    Reply,
    anthropic_error,
    anthropic_message,
    model_server,
    openai_completion,
    openai_error,
)

pytestmark = pytest.mark.anyio

KEY = "sk-loopback-7d1e93a0c2"
TIMEOUT_SECONDS = 10.0
"""Long enough for a loaded machine's loopback server: only a test of timeouts times out."""
SHORT_TIMEOUT_SECONDS = 0.5
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = (ToolSpec("weather", "The weather in a city.", SCHEMA),)
QUESTION = (Message(Role.SYSTEM, "Be brief."), Message(Role.USER, "Weather in Oslo?"))

Provider = OpenAIChat | AnthropicMessages


class MakeProvider(Protocol):
    def __call__(
        self, server: ModelServer, *, timeout_seconds: float = TIMEOUT_SECONDS
    ) -> Provider: ...


def openai(
    server: ModelServer, *, timeout_seconds: float = TIMEOUT_SECONDS, **settings: Any
) -> OpenAIChat:
    return OpenAIChat(
        "gpt-loopback",
        base_url=f"{server.base_url}/v1",
        api_key=KEY,
        timeout_seconds=timeout_seconds,
        **settings,
    )


def anthropic(
    server: ModelServer, *, timeout_seconds: float = TIMEOUT_SECONDS, **settings: Any
) -> AnthropicMessages:
    return AnthropicMessages(
        "claude-loopback",
        base_url=server.base_url,
        api_key=KEY,
        timeout_seconds=timeout_seconds,
        **settings,
    )


def ask(
    messages: tuple[Message, ...] = QUESTION, settings: ModelSettings | None = None
) -> ProviderRequest:
    return ProviderRequest("run-1", "forecaster", messages, TOOLS, settings or ModelSettings())


async def failure_of(provider: Provider, request: ProviderRequest | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider.complete(request or ask())
    assert KEY not in str(caught.value)
    return caught.value


# -- OpenAI chat completions -------------------------------------------------------------


async def test_openai_plain_answer() -> None:
    async with model_server() as server, openai(server) as provider:
        server.script(Reply(body=openai_completion("Sunny.", usage=(31, 4))))
        reply = await provider.complete(ask())

    assert reply == ProviderReply(
        "Sunny.", (), usage=Usage(31, 4), model="loopback-model-0613", stop_reason="stop"
    )
    (sent,) = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["content-type"] == "application/json"
    assert sent.json["model"] == "gpt-loopback"
    assert sent.json["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
    ]
    assert sent.json["tools"][0]["function"]["name"] == "weather"
    assert sent.json["tools"][0]["function"]["parameters"] == SCHEMA


async def test_openai_several_tool_calls_in_one_turn() -> None:
    calls = [
        ("call_a", "weather", {"city": "Oslo"}),
        ("call_b", "weather", {"city": "Rome"}),
        ("call_c", "weather", '{"city": Bergen'),
    ]
    async with model_server() as server, openai(server) as provider:
        server.script(Reply(body=openai_completion(None, calls)))
        reply = await provider.complete(ask())

    assert reply.text is None
    assert reply.stop_reason == "tool_calls"
    assert reply.tool_calls == (
        ToolCall("weather", {"city": "Oslo"}, "call_a"),
        ToolCall("weather", {"city": "Rome"}, "call_b"),
        ToolCall("weather", {}, "call_c", invalid_arguments='{"city": Bergen'),
    )


async def test_one_provider_serves_agents_with_their_own_settings() -> None:
    async with model_server() as server:
        provider = openai(server, temperature=0.7, max_tokens=500, extra_body={"seed": 1})
        server.script(Reply(body=openai_completion("a")), Reply(body=openai_completion("b")))
        await provider.complete(ask())
        tuned = ModelSettings("gpt-other", temperature=0.0, extra_body={"user": "u-1"})
        await provider.complete(ask(settings=tuned))
        await provider.aclose()

    first, second = (request.json for request in server.requests)
    assert (first["model"], first["temperature"], first["max_tokens"], first["seed"]) == (
        "gpt-loopback",
        0.7,
        500,
        1,
    )
    assert (second["model"], second["temperature"], second["max_tokens"]) == ("gpt-other", 0.0, 500)
    assert (second["seed"], second["user"]) == (1, "u-1")


async def test_extra_headers_go_with_every_request() -> None:
    async with model_server() as server:
        provider = openai(server, extra_headers={"x-gateway-route": "eu"})
        server.script(Reply(body=openai_completion("ok")))
        await provider.complete(ask())
    assert server.requests[0].headers["x-gateway-route"] == "eu"


async def test_an_endpoint_that_needs_no_key_gets_no_authorization(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with model_server() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.base_url}/v1")
        provider = OpenAIChat("llama3.2")
        server.script(Reply(body=openai_completion("ok")))
        assert (await provider.complete(ask())).text == "ok"
    assert "authorization" not in server.requests[0].headers


@pytest.mark.parametrize(
    ("finish_reason", "failure"),
    [("length", FailureClass.CONFIGURATION), ("content_filter", FailureClass.CLIENT_ERROR)],
)
async def test_openai_unfinished_replies_fail_for_what_they_are(
    finish_reason: str, failure: FailureClass
) -> None:
    async with model_server() as server:
        server.script(Reply(body=openai_completion("The answer is", finish_reason=finish_reason)))
        error = await failure_of(openai(server, max_tokens=3))
    assert classify(error) is failure
    assert f"{server.base_url}/v1/chat/completions" in error.message


# -- Anthropic messages --------------------------------------------------------------------


async def test_anthropic_plain_answer_with_the_system_prompt_apart() -> None:
    async with model_server() as server, anthropic(server) as provider:
        server.script(Reply(body=anthropic_message("Sunny.", usage=(40, 3))))
        reply = await provider.complete(ask())

    assert reply == ProviderReply(
        "Sunny.", (), usage=Usage(40, 3), model="claude-loopback-20250101", stop_reason="end_turn"
    )
    (sent,) = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    assert sent.json["system"] == "Be brief."
    assert sent.json["messages"] == [{"role": "user", "content": "Weather in Oslo?"}]
    assert sent.json["tools"] == [
        {"name": "weather", "input_schema": SCHEMA, "description": "The weather in a city."}
    ]
    assert sent.json["max_tokens"] == 4096


async def test_anthropic_tool_use_blocks_and_tool_results_with_is_error() -> None:
    calls = [("toolu_1", "weather", {"city": "Oslo"}), ("toolu_2", "weather", {"city": "Rome"})]
    async with model_server() as server, anthropic(server) as provider:
        server.script(
            Reply(body=anthropic_message("Checking.", calls)),
            Reply(body=anthropic_message("Rain in Oslo; Rome is unknown.")),
        )
        first = await provider.complete(ask())
        history = (
            *QUESTION,
            Message(Role.ASSISTANT, first.text, tool_calls=first.tool_calls),
            Message(Role.TOOL, '"rain"', tool_call_id="toolu_1", name="weather"),
            Message(
                Role.TOOL,
                '{"error": "no station"}',
                tool_call_id="toolu_2",
                name="weather",
                is_error=True,
            ),
        )
        second = await provider.complete(ask(history))

    assert first.tool_calls == (
        ToolCall("weather", {"city": "Oslo"}, "toolu_1"),
        ToolCall("weather", {"city": "Rome"}, "toolu_2"),
    )
    assert second.text == "Rain in Oslo; Rome is unknown."
    sent = server.requests[1].json["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Rome"}},
        ],
    }
    assert sent[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": '"rain"',
                "is_error": False,
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": '{"error": "no station"}',
                "is_error": True,
            },
        ],
    }


async def test_anthropic_paused_turn_is_continued_in_the_same_step() -> None:
    paused = anthropic_message("Searching", stop_reason="pause_turn", usage=(50, 10))
    async with model_server() as server, anthropic(server) as provider:
        server.script(
            Reply(body=paused),
            Reply(body=anthropic_message(" done.", [("t", "weather", {"city": "Oslo"})])),
        )
        reply = await provider.complete(ask())

    assert reply.text == "Searching done."
    assert reply.tool_calls == (ToolCall("weather", {"city": "Oslo"}, "t"),)
    assert reply.usage == Usage(70, 17)
    assert reply.stop_reason == "tool_use"
    continued = server.requests[1].json["messages"]
    assert continued[-1] == {"role": "assistant", "content": paused["content"]}


async def test_anthropic_turn_paused_too_often_is_a_server_error() -> None:
    paused = Reply(body=anthropic_message("...", stop_reason="pause_turn"))
    async with model_server() as server:
        server.script(*[paused] * (MAX_PAUSED_TURNS + 1))
        error = await failure_of(anthropic(server))
    assert classify(error) is FailureClass.SERVER_ERROR
    assert len(server.requests) == MAX_PAUSED_TURNS + 1


@pytest.mark.parametrize(
    ("stop_reason", "failure"),
    [("max_tokens", FailureClass.CONFIGURATION), ("refusal", FailureClass.CLIENT_ERROR)],
)
async def test_anthropic_unfinished_replies_fail_for_what_they_are(
    stop_reason: str, failure: FailureClass
) -> None:
    async with model_server() as server:
        server.script(Reply(body=anthropic_message("I", stop_reason=stop_reason)))
        error = await failure_of(anthropic(server))
    assert classify(error) is failure


# -- every error class, both APIs -------------------------------------------------------------

ERRORS = [
    # (status, openai body, anthropic body, class)
    (429, openai_error("Slow down", "requests", "rate_limit_exceeded"),
     anthropic_error("rate_limit_error", "Slow down"), FailureClass.RATE_LIMIT),
    (500, openai_error("Oops", "server_error"),
     anthropic_error("api_error", "Oops"), FailureClass.SERVER_ERROR),
    (503, openai_error("Unavailable", "server_error"),
     anthropic_error("api_error", "Unavailable"), FailureClass.SERVER_ERROR),
    (529, openai_error("Overloaded", "server_error"),
     anthropic_error("overloaded_error", "Overloaded"), FailureClass.SERVER_ERROR),
    (400, openai_error("Bad messages", "invalid_request_error"),
     anthropic_error("invalid_request_error", "Bad messages"), FailureClass.CLIENT_ERROR),
    (404, openai_error("No such model", "invalid_request_error", "model_not_found"),
     anthropic_error("not_found_error", "No such model"), FailureClass.CLIENT_ERROR),
    (413, openai_error("Too large", "invalid_request_error"),
     anthropic_error("request_too_large", "Too large"), FailureClass.CLIENT_ERROR),
    (422, {"detail": [{"msg": "field required"}]},
     anthropic_error("invalid_request_error", "Unprocessable"), FailureClass.CLIENT_ERROR),
    (401, openai_error("Incorrect API key", "invalid_request_error", "invalid_api_key"),
     anthropic_error("authentication_error", "invalid x-api-key"), FailureClass.AUTH),
    (403, openai_error("Not allowed", "permission_error"),
     anthropic_error("permission_error", "Not allowed"), FailureClass.AUTH),
    (429, openai_error("You exceeded your quota", "insufficient_quota", "insufficient_quota"),
     anthropic_error("credit_balance_exhausted", "Your credit balance is too low"),
     FailureClass.CONFIGURATION),
    (429, openai_error("Spend limit reached", "requests", "enforced_spend_limit_reached"),
     anthropic_error("enforced_spend_limit_reached", "Spend limit reached"),
     FailureClass.CONFIGURATION),
]  # fmt: skip

MAKERS: list[tuple[str, MakeProvider]] = [
    ("openai", openai),
    ("anthropic", anthropic),
]


@pytest.mark.parametrize(("api", "make"), MAKERS, ids=[name for name, _ in MAKERS])
@pytest.mark.parametrize(
    ("status", "openai_body", "anthropic_body", "failure"),
    ERRORS,
    ids=[f"{e[0]}-{e[3].value}" for e in ERRORS],
)
async def test_error_answers_get_their_failure_class(
    api: str,
    make: MakeProvider,
    status: int,
    openai_body: Any,
    anthropic_body: Any,
    failure: FailureClass,
) -> None:
    body = openai_body if api == "openai" else anthropic_body
    async with model_server() as server:
        server.script(Reply(status, body))
        error = await failure_of(make(server))
    assert classify(error) is failure
    assert f"HTTP {status}" in error.message
    assert error.retry_after_seconds is None
    # One call, no retry inside it: retrying is the runtime's decision.
    assert len(server.requests) == 1


@pytest.mark.parametrize(("api", "make"), MAKERS, ids=[name for name, _ in MAKERS])
@pytest.mark.parametrize(
    ("headers", "seconds"),
    [({"retry-after": "7"}, 7.0), ({"retry-after-ms": "2500"}, 2.5), ({}, None)],
)
async def test_a_rate_limit_carries_retry_after(
    api: str,
    make: MakeProvider,
    headers: dict[str, str],
    seconds: float | None,
) -> None:
    body = (
        openai_error("Slow down", "requests")
        if api == "openai"
        else anthropic_error("rate_limit_error", "Slow down")
    )
    async with model_server() as server:
        server.script(Reply(429, body, headers=headers))
        error = await failure_of(make(server))
    assert classify(error) is FailureClass.RATE_LIMIT
    assert error.retry_after_seconds == seconds


@pytest.mark.parametrize(("api", "make"), MAKERS, ids=[name for name, _ in MAKERS])
@pytest.mark.parametrize(
    ("status", "hint"),
    [
        (401, "check the API key (api_key= or {variable})"),
        (403, "check that the API key may use this model"),
        (404, "check the model name and that base_url is the API's root"),
    ],
)
async def test_a_refused_call_says_which_setting_to_fix(
    api: str, make: MakeProvider, status: int, hint: str
) -> None:
    variable = "OPENAI_API_KEY" if api == "openai" else "ANTHROPIC_API_KEY"
    async with model_server() as server:
        server.script(Reply(status, raw=b"Not Found"))
        error = await failure_of(make(server))
    assert hint.format(variable=variable) in error.message


async def test_a_401_without_a_key_says_that_none_was_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with model_server() as server:
        server.script(Reply(401, openai_error("Missing bearer", "invalid_request_error")))
        provider = OpenAIChat("m", base_url=f"{server.base_url}/v1", timeout_seconds=2)
        error = await failure_of(provider)
    assert "no API key was sent: pass api_key= or OPENAI_API_KEY" in error.message


async def test_an_overloaded_anthropic_endpoint_also_says_when_to_come_back() -> None:
    async with model_server() as server:
        server.script(
            Reply(
                529, anthropic_error("overloaded_error", "Overloaded"), headers={"retry-after": "3"}
            )
        )
        error = await failure_of(anthropic(server))
    assert classify(error) is FailureClass.SERVER_ERROR
    assert error.retry_after_seconds == 3.0


async def test_a_quota_error_never_asks_for_a_retry() -> None:
    async with model_server() as server:
        server.script(
            Reply(
                429,
                openai_error("No quota", "insufficient_quota", "insufficient_quota"),
                headers={"retry-after": "1"},
            )
        )
        error = await failure_of(openai(server))
    assert error.retry_after_seconds is None
    assert not classify(error).retryable
    assert "quota" in error.message


# -- bodies that are not replies --------------------------------------------------------------


@pytest.mark.parametrize(("api", "make"), MAKERS, ids=[name for name, _ in MAKERS])
@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, raw=b"<html>gateway</html>"),
        Reply(200, raw=b'{"choices": [{"message": '),
        Reply(200, raw=b""),
        Reply(200, {"unexpected": True}),
        Reply(502, raw=b"<html>Bad Gateway</html>"),
        Reply(200, raw=b"not gzip at all", headers={"content-encoding": "gzip"}),
    ],
    ids=["html", "cut-json", "empty", "wrong-shape", "html-502", "bad-gzip"],
)
async def test_a_body_that_is_no_reply_is_a_server_error(
    api: str, make: MakeProvider, reply: Reply
) -> None:
    async with model_server() as server:
        server.script(reply)
        error = await failure_of(make(server))
    assert classify(error) is FailureClass.SERVER_ERROR


@pytest.mark.parametrize(("api", "make"), MAKERS, ids=[name for name, _ in MAKERS])
@pytest.mark.parametrize(
    ("body", "failure", "words"),
    [
        (
            {"error": {"message": "Upstream timed out", "code": 502}},
            FailureClass.SERVER_ERROR,
            "Upstream timed out",
        ),
        (
            {"error": {"message": "Rate limit exceeded: free-models-per-day", "code": 429}},
            FailureClass.RATE_LIMIT,
            "free-models-per-day",
        ),
        (
            anthropic_error("overloaded_error", "Overloaded"),
            FailureClass.SERVER_ERROR,
            "(overloaded_error): Overloaded",
        ),
        (
            openai_error("No credits", "insufficient_quota", "insufficient_quota"),
            FailureClass.CONFIGURATION,
            "No credits",
        ),
    ],
    ids=["upstream-502", "upstream-429", "anthropic-shape", "quota"],
)
async def test_an_error_in_a_200_body_says_what_went_wrong(
    api: str,
    make: MakeProvider,
    body: Any,
    failure: FailureClass,
    words: str,
) -> None:
    async with model_server() as server:
        server.script(Reply(200, body))
        error = await failure_of(make(server))
    assert classify(error) is failure
    assert words in error.message


@pytest.mark.parametrize(
    ("page", "shown"),
    [
        (
            b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title><style>h1{x:y}</style>"
            b"</head><body><center><h1>502 Bad Gateway</h1></center><hr>nginx</body></html>",
            "answered HTTP 502: 502 Bad Gateway",
        ),
        (
            b"<html><body><script>track()</script><p>Upstream &amp; proxy down</p></body></html>",
            "answered HTTP 502: Upstream & proxy down",
        ),
    ],
    ids=["title", "no-title"],
)
async def test_an_html_error_page_shows_its_words_not_its_markup(page: bytes, shown: str) -> None:
    async with model_server() as server:
        server.script(Reply(502, raw=page, headers={"content-type": "text/html"}))
        error = await failure_of(openai(server))
    assert classify(error) is FailureClass.SERVER_ERROR
    assert error.message.endswith(shown)


@pytest.mark.parametrize(("api", "make"), MAKERS, ids=[name for name, _ in MAKERS])
async def test_a_body_over_the_limit_is_not_read_whole(
    api: str, make: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(endpoint, "MAX_ANSWER_BYTES", 64 * 1024)
    huge = "lorem ipsum " * 50_000
    body = openai_completion(huge) if api == "openai" else anthropic_message(huge)
    async with model_server() as server:
        server.script(Reply(body=body))
        error = await failure_of(make(server))
    assert classify(error) is FailureClass.SERVER_ERROR
    assert "with a body over 65,536 bytes" in error.message
    assert len(error.message) < 500


async def test_a_400_without_a_json_body_is_still_a_client_error() -> None:
    async with model_server() as server:
        server.script(Reply(400, raw=b"bad request"))
        error = await failure_of(openai(server))
    assert classify(error) is FailureClass.CLIENT_ERROR
    assert "bad request" in error.message


@pytest.mark.parametrize(("api", "make"), MAKERS, ids=[name for name, _ in MAKERS])
@pytest.mark.parametrize("status", [301, 307, 308])
async def test_a_redirect_is_not_followed_and_names_where_it_points(
    api: str, make: MakeProvider, status: int
) -> None:
    async with model_server() as server:
        server.script(
            Reply(
                status,
                raw=b"<html>Moved</html>",
                headers={"location": "https://elsewhere.invalid/api/chat?token=t0ps3cret"},
            )
        )
        error = await failure_of(make(server))
    assert classify(error) is FailureClass.CONFIGURATION
    assert f"HTTP {status}" in error.message
    assert "https://elsewhere.invalid/api/chat" in error.message
    assert "t0ps3cret" not in error.message
    assert "base_url" in error.message
    assert len(server.requests) == 1


# -- the network failing ------------------------------------------------------------------------


@pytest.mark.parametrize(("api", "make"), MAKERS, ids=[name for name, _ in MAKERS])
async def test_an_answer_slower_than_the_timeout_is_a_connection_failure(
    api: str, make: MakeProvider
) -> None:
    async with model_server() as server:
        server.script(Reply(body=openai_completion("late"), delay_seconds=30))
        began = time.monotonic()
        error = await failure_of(make(server, timeout_seconds=SHORT_TIMEOUT_SECONDS))
        took = time.monotonic() - began
    assert classify(error) is FailureClass.CONNECTION
    assert f"no answer within {SHORT_TIMEOUT_SECONDS:g} s" in error.message
    assert took < 5


@pytest.mark.parametrize(("api", "make"), MAKERS, ids=[name for name, _ in MAKERS])
async def test_a_connection_dropped_mid_answer_is_retried_once_in_the_call(
    api: str, make: MakeProvider
) -> None:
    body = openai_completion("whole") if api == "openai" else anthropic_message("whole")
    async with model_server() as server:
        server.script(Reply(body=body, drop_after_bytes=20), Reply(body=body))
        with capture_logs() as logs:
            reply = await make(server).complete(ask())
    assert reply.text == "whole"
    assert len(server.requests) == 2
    assert events(logs).count("provider.connection_retry") == 1


@pytest.mark.parametrize(("api", "make"), MAKERS, ids=[name for name, _ in MAKERS])
@pytest.mark.parametrize(
    "broken",
    [Reply(body={"a": "long enough body"}, drop_after_bytes=5), Reply(hang_up=True)],
    ids=["mid-body", "no-answer"],
)
async def test_a_connection_that_keeps_dropping_is_a_connection_failure(
    api: str, make: MakeProvider, broken: Reply
) -> None:
    async with model_server() as server:
        server.script(broken, broken)
        error = await failure_of(make(server))
    assert classify(error) is FailureClass.CONNECTION
    assert len(server.requests) == 2


async def test_nobody_listening_is_a_connection_failure() -> None:
    async with model_server() as server:
        port = server.port
    provider = OpenAIChat("m", base_url=f"http://127.0.0.1:{port}/v1", timeout_seconds=2)
    error = await failure_of(provider)
    assert classify(error) is FailureClass.CONNECTION
    assert "ConnectError" in error.message


# -- the key stays secret ----------------------------------------------------------------------


@pytest.mark.parametrize(("api", "make"), MAKERS, ids=[name for name, _ in MAKERS])
async def test_a_key_the_server_echoes_is_masked_in_errors_and_logs(
    api: str, make: MakeProvider
) -> None:
    echo = f"Incorrect API key provided: {KEY}"
    body = (
        openai_error(echo, "invalid_request_error")
        if api == "openai"
        else anthropic_error("authentication_error", echo)
    )
    async with model_server() as server:
        server.script(Reply(body=openai_completion("x"), hang_up=True), Reply(401, body))
        with capture_logs() as logs:
            error = await failure_of(make(server))
    assert classify(error) is FailureClass.AUTH
    assert "Incorrect API key provided: ***" in error.message
    assert logs and KEY not in repr(logs)
    assert KEY not in repr(error.args) and KEY not in repr(error.__cause__)


async def test_nothing_of_the_provider_shows_the_key() -> None:
    async with model_server() as server, openai(server) as provider:
        server.script(Reply(body=openai_completion("ok")))
        await provider.complete(ask())
        shown = [repr(provider), str(vars(provider)), repr(vars(vars(provider)["_endpoint"]))]
    assert all(KEY not in text for text in shown)


async def test_a_key_given_as_an_extra_header_is_as_secret_as_the_api_key() -> None:
    gateway_key = "azure-key-3f9a61c2d4"
    async with model_server() as server:
        provider = OpenAIChat(
            "gpt-loopback",
            base_url=f"{server.base_url}/openai/deployments/d1?api-version=2024-10-21",
            extra_headers={"api-key": gateway_key, "x-team": "blue"},
            timeout_seconds=TIMEOUT_SECONDS,
        )
        server.script(
            Reply(body=openai_completion("x"), hang_up=True),
            Reply(401, openai_error(f"Access denied: bad key {gateway_key}", "invalid_key")),
        )
        with capture_logs() as logs:
            error = await failure_of(provider)
        sent = server.requests[-1].headers
    assert (sent["api-key"], sent["x-team"]) == (gateway_key, "blue")
    assert "bad key ***" in error.message
    shown = [
        repr(logs),
        repr(provider),
        str(vars(provider)),
        repr(vars(vars(provider)["_endpoint"])),
    ]
    assert all(gateway_key not in text for text in shown)


def self_signed_server_context(directory: Path) -> ssl.SSLContext:
    """A TLS server context for 127.0.0.1 whose certificate nobody trusts."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a certificate")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


async def test_a_certificate_that_does_not_verify_is_a_configuration_failure(
    tmp_path: Path,
) -> None:
    async with model_server(tls=self_signed_server_context(tmp_path)) as server:
        server.script(Reply(body=openai_completion("never")))
        error = await failure_of(openai(server))
    assert server.base_url.startswith("https://")
    assert classify(error) is FailureClass.CONFIGURATION
    assert "CERTIFICATE_VERIFY_FAILED" in error.message


async def test_only_the_start_of_an_html_error_page_is_searched_for_its_words() -> None:
    # Its patterns search on from every unclosed tag: over a whole answer of such tags
    # (up to the 32 MiB read) that would hold the event loop for minutes.
    page = b"<html><body>" + b"<script " * 4096 + b"<title>read too far</title></body></html>"
    async with model_server() as server:
        server.script(Reply(502, raw=page, headers={"content-type": "text/html"}))
        error = await failure_of(openai(server))
    assert classify(error) is FailureClass.SERVER_ERROR
    assert "read too far" not in error.message
