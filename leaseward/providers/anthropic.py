"""``AnthropicMessages``: Claude models through Anthropic's Messages API."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from leaseward.providers.endpoint import (
    BadReply,
    JsonEndpoint,
    base_and_key,
    check_headers,
    check_timeout,
)
from leaseward.runtime.agents import DEFAULT_PROVIDER_TIMEOUT_SECONDS
from leaseward.runtime.errors import ConfigurationError
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.messages import (
    Message,
    ModelSettings,
    ProviderReply,
    ProviderRequest,
    Role,
    ToolCall,
    ToolSpec,
    Usage,
)

__all__ = [
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_VERSION",
    "DEFAULT_ANTHROPIC_MAX_TOKENS",
    "MAX_PAUSED_TURNS",
    "AnthropicMessages",
    "messages_reply",
    "messages_request",
]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
# The API requires a limit on every request; this one applies when nobody set any.
DEFAULT_ANTHROPIC_MAX_TOKENS = 4096
# How often one provider step continues a turn the API paused (``pause_turn``).
MAX_PAUSED_TURNS = 4
# Extended thinking's blocks: signed, so sent back exactly as they came.
_REASONING_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    # With extended thinking on, the API refuses a turn with tool calls that does not
    # begin with the thinking that led to them.
    blocks: list[dict[str, Any]] = [dict(block) for block in message.reasoning]
    # The API refuses a text block of only whitespace, which a model may write before
    # its tool calls ("\n\n"); dropping it changes nothing the model reads.
    if message.content and not message.content.isspace():
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.call_id, "name": call.name, "input": dict(call.arguments)}
        for call in message.tool_calls
    )
    return blocks


def _conversation(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system prompt, and the messages as the API takes them."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role is Role.SYSTEM:
            system.append(message.content or "")
        elif message.role is Role.ASSISTANT:
            blocks = _assistant_blocks(message)
            # The API refuses an empty assistant message; one says nothing to the model.
            if blocks:
                out.append({"role": "assistant", "content": blocks})
        elif message.role is Role.TOOL:
            result = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content or "",
                "is_error": message.is_error,
            }
            # Every result of one assistant turn goes in the one user message after it.
            previous = out[-1] if out else None
            if (
                previous is not None
                and previous["role"] == "user"
                and isinstance(previous["content"], list)
            ):
                previous["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
        else:
            out.append({"role": "user", "content": message.content or ""})
    return "\n\n".join(part for part in system if part), out


def _tool_json(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec.name, "input_schema": dict(spec.parameters)}
    if spec.description:
        tool["description"] = spec.description
    return tool


def messages_request(request: ProviderRequest, settings: ModelSettings) -> dict[str, Any]:
    """The body of a Messages API call for ``request`` under ``settings``."""
    system, messages = _conversation(request.messages)
    body: dict[str, Any] = {
        "model": settings.model,
        "max_tokens": settings.max_tokens or DEFAULT_ANTHROPIC_MAX_TOKENS,
        "messages": messages,
    }
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [_tool_json(spec) for spec in request.tools]
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    body.update(settings.extra_body)
    return body


def _malformed(why: str) -> BadReply:
    return BadReply(f"the answer is not a Messages API message: {why}")


def _tool_call(block: Mapping[str, Any]) -> ToolCall:
    name = block.get("name")
    call_id = block.get("id") or ""
    if not isinstance(name, str) or not name:
        raise _malformed("a tool_use block has no name")
    if not isinstance(call_id, str):
        raise _malformed(f"tool_use block {name!r} has an id that is not a string")
    return ToolCall.from_decoded(name, block.get("input"), call_id)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _usage(data: Any) -> Usage | None:
    if not isinstance(data, Mapping):
        return None
    # Tokens read from or written to the prompt cache are input tokens too.
    read = sum(
        _count(data.get(name))
        for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    return Usage(input_tokens=read, output_tokens=_count(data.get("output_tokens")))


class _Turn:
    """A model turn, gathered from one answer or, when the API paused it, several."""

    def __init__(self, settings: ModelSettings) -> None:
        self.settings = settings
        self.texts: list[str] = []
        self.calls: list[ToolCall] = []
        self.reasoning: list[dict[str, Any]] = []
        self.usage: Usage | None = None
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.paused_content: list[Any] | None = None
        """The content of a paused answer, which the next request sends back as it is."""

    def add(self, data: Any) -> None:
        """Take in one answer (raises BadReply as ``messages_reply`` says)."""
        if not isinstance(data, Mapping):
            raise _malformed(f"it is a JSON {type(data).__name__}, not an object")
        content = data.get("content")
        if not isinstance(content, list):
            raise _malformed("it has no content list")
        for block in content:
            if not isinstance(block, Mapping):
                raise _malformed("a content block is not an object")
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                self.texts.append(block["text"])
            elif kind == "tool_use":
                self.calls.append(_tool_call(block))
            elif isinstance(kind, str) and kind in _REASONING_BLOCKS:
                self.reasoning.append(dict(block))
        usage = _usage(data.get("usage"))
        if usage is not None:
            self.usage = usage if self.usage is None else self.usage + usage
        model = data.get("model")
        if isinstance(model, str) and model:
            self.model = model
        stop_reason = data.get("stop_reason")
        self.stop_reason = stop_reason if isinstance(stop_reason, str) else None
        self.paused_content = content if stop_reason == "pause_turn" else None
        if stop_reason == "max_tokens":
            limit = self.settings.max_tokens or DEFAULT_ANTHROPIC_MAX_TOKENS
            raise BadReply(
                f"the reply was cut off at its token limit (max_tokens={limit}); raise max_tokens",
                FailureClass.CONFIGURATION,
            )
        if stop_reason == "model_context_window_exceeded":
            # The same conversation fills the same window again: retrying cannot help.
            raise BadReply(
                "the reply was cut off: the conversation filled the model's context window; "
                "use a model with a larger window or shorten the run's input and tool outputs",
                FailureClass.CONFIGURATION,
            )
        if stop_reason == "refusal":
            raise BadReply("the model refused to answer", FailureClass.CLIENT_ERROR)

    def reply(self) -> ProviderReply:
        return ProviderReply(
            text="".join(self.texts) if self.texts else None,
            tool_calls=self.calls,
            usage=self.usage,
            model=self.model or self.settings.model,
            stop_reason=self.stop_reason,
            reasoning=tuple(self.reasoning),
        )


def messages_reply(data: Any, settings: ModelSettings) -> ProviderReply:
    """The reply in one Messages API answer.

    Raises BadReply when the answer is not one (a server error), or is a reply
    the model did not finish: cut off at ``max_tokens`` (a configuration error,
    since the same request would be cut off again) or refused (a client error).
    """
    turn = _Turn(settings)
    turn.add(data)
    return turn.reply()


class AnthropicMessages:
    """A Claude model through Anthropic's Messages API (``/v1/messages``).

    ``base_url`` defaults to ``ANTHROPIC_BASE_URL`` from the environment, else
    Anthropic's; ``api_key`` to ``ANTHROPIC_API_KEY``. The key goes only into
    the ``x-api-key`` header: never into ``repr``, logs, errors or the journal.
    ``max_tokens`` defaults to ``DEFAULT_ANTHROPIC_MAX_TOKENS``, as the API
    requires a limit. A turn the API pauses (``pause_turn``) is continued
    within the same step, at most ``MAX_PAUSED_TURNS`` times.
    """

    provider_name = "anthropic"
    """The ``gen_ai.provider.name`` of its spans (OpenTelemetry's GenAI conventions)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout_seconds: float = DEFAULT_PROVIDER_TIMEOUT_SECONDS,
    ) -> None:
        if model is None:
            raise ConfigurationError("AnthropicMessages needs a model name")
        self.defaults = ModelSettings(
            model=model,
            temperature=temperature,
            max_tokens=max_tokens,
            extra_body=extra_body if extra_body is not None else {},
        )
        self.timeout_seconds = check_timeout(timeout_seconds)
        base, key = base_and_key(
            "AnthropicMessages",
            base_url,
            api_key,
            default_base=ANTHROPIC_BASE_URL,
            base_variable="ANTHROPIC_BASE_URL",
            key_variable="ANTHROPIC_API_KEY",
        )
        self._endpoint = JsonEndpoint(
            "Anthropic Messages endpoint",
            base,
            "/v1/messages",
            headers={"anthropic-version": ANTHROPIC_VERSION, **check_headers(extra_headers)},
            secret=key,
            secret_header=("x-api-key", ""),
            timeout_seconds=self.timeout_seconds,
            key_variable="ANTHROPIC_API_KEY",
        )

    def __repr__(self) -> str:
        return f"AnthropicMessages(model={self.defaults.model!r}, url={self._endpoint.shown_url!r})"

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        settings = request.model_settings.over(self.defaults)
        body = messages_request(request, settings)
        turn = _Turn(settings)
        try:
            for _ in range(MAX_PAUSED_TURNS + 1):
                turn.add(await self._endpoint.post(body))
                if turn.paused_content is None:
                    return turn.reply()
                body = {
                    **body,
                    "messages": [
                        *body["messages"],
                        {"role": "assistant", "content": turn.paused_content},
                    ],
                }
        except BadReply as exc:
            raise self._endpoint.failure(str(exc), exc.failure_class) from None
        raise self._endpoint.failure(
            f"the model paused its turn {MAX_PAUSED_TURNS + 1} times in a row",
            FailureClass.SERVER_ERROR,
        )

    async def aclose(self) -> None:
        """Close this event loop's connections; the provider can still be used afterwards."""
        await self._endpoint.aclose()

    async def __aenter__(self) -> AnthropicMessages:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
