"""``OpenAIChat``: any OpenAI-compatible chat-completions endpoint (OpenAI, Azure-style
gateways, vLLM, Ollama, LiteLLM, OpenRouter)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from leaseward.providers.endpoint import (
    BadReply,
    JsonEndpoint,
    base_and_key,
    check_timeout,
    shortened,
)
from leaseward.runtime.agents import DEFAULT_PROVIDER_TIMEOUT_SECONDS
from leaseward.runtime.errors import ConfigurationError, ToolDefinitionError
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
from leaseward.runtime.schema import strict_schema

__all__ = ["OPENAI_BASE_URL", "OpenAIChat", "chat_reply", "chat_request"]

OPENAI_BASE_URL = "https://api.openai.com/v1"


def _tool_call_json(call: ToolCall) -> dict[str, Any]:
    # Arguments the model sent that were not JSON go back exactly as it wrote them.
    arguments = (
        call.invalid_arguments
        if call.invalid_arguments is not None
        else json.dumps(dict(call.arguments), ensure_ascii=False)
    )
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def _message_json(message: Message) -> dict[str, Any]:
    if message.role is Role.ASSISTANT:
        data: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            data["tool_calls"] = [_tool_call_json(call) for call in message.tool_calls]
        return data
    if message.role is Role.TOOL:
        # The API has no error flag for a tool result: the content says {"error": ...}.
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": message.content or "",
        }
    return {"role": message.role.value, "content": message.content or ""}


def _tool_json(spec: ToolSpec, *, strict: bool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": spec.name, "parameters": dict(spec.parameters)}
    if spec.description:
        function["description"] = spec.description
    if strict:
        try:
            function["parameters"] = strict_schema(spec.parameters)
        except ToolDefinitionError:
            # A schema strict mode has no form for (an object with keys it does not
            # name) goes as it is; the tool's own check still holds the model to it.
            pass
        else:
            function["strict"] = True
    return {"type": "function", "function": function}


def chat_request(
    request: ProviderRequest, settings: ModelSettings, *, strict: bool = True
) -> dict[str, Any]:
    """The body of a chat-completions call for ``request`` under ``settings``; with
    ``strict``, each tool whose schema has a strict form is sent in strict mode."""
    body: dict[str, Any] = {
        "model": settings.model,
        "messages": [_message_json(message) for message in request.messages],
    }
    if request.tools:
        body["tools"] = [_tool_json(spec, strict=strict) for spec in request.tools]
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.max_tokens is not None:
        body["max_tokens"] = settings.max_tokens
    body.update(settings.extra_body)
    return body


def _text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    # Some gateways answer with a list of parts, as requests may send them.
    if isinstance(content, list):
        parts = [
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        ]
        return "".join(parts) if parts else None
    raise _malformed(f"message.content is a JSON {type(content).__name__}")


def _malformed(why: str) -> BadReply:
    return BadReply(f"the answer is not a chat completion: {why}")


def _tool_call(data: Any) -> ToolCall:
    if not isinstance(data, Mapping) or not isinstance(data.get("function"), Mapping):
        raise _malformed("a tool call has no function")
    function = data["function"]
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise _malformed("a tool call's function has no name")
    call_id = data.get("id") or ""
    if not isinstance(call_id, str):
        raise _malformed(f"tool call {name!r} has an id that is not a string")
    arguments = function.get("arguments")
    if arguments is None:
        return ToolCall(name, {}, call_id)
    if isinstance(arguments, str):
        return ToolCall.from_text(name, arguments, call_id)
    # Some servers decode the arguments for us.
    return ToolCall.from_decoded(name, arguments, call_id)


def _usage(data: Any) -> Usage | None:
    if not isinstance(data, Mapping):
        return None
    return Usage.read(data.get("prompt_tokens"), data.get("completion_tokens"))


def chat_reply(data: Any, settings: ModelSettings) -> ProviderReply:
    """The reply in a chat-completions answer.

    Raises BadReply when the answer is not one (a server error), or is a reply the
    model did not finish: cut off at its token limit (``length``: a configuration
    error, since the same request would be cut off again) or withheld by a content
    filter or refused (a client error).
    """
    if not isinstance(data, Mapping):
        raise _malformed(f"it is a JSON {type(data).__name__}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise _malformed("it has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, Mapping):
        raise _malformed("its first choice has no message")
    finish_reason = choice.get("finish_reason")
    if finish_reason == "length":
        limit = (
            f"max_tokens={settings.max_tokens}"
            if settings.max_tokens is not None
            else "the model's own limit; no max_tokens was set"
        )
        raise BadReply(
            f"the reply was cut off at its token limit ({limit}); raise max_tokens",
            FailureClass.CONFIGURATION,
        )
    if finish_reason == "content_filter":
        raise BadReply("a content filter withheld the reply", FailureClass.CLIENT_ERROR)
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        raise BadReply(f"the model refused: {shortened(refusal)}", FailureClass.CLIENT_ERROR)
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _malformed("message.tool_calls is not a list")
    if not raw_calls and message.get("function_call"):
        # Taken as a plain answer, the call would be lost and the run would end as if the
        # model had said nothing; the same server answers the same way on a retry.
        raise BadReply(
            "the answer has a legacy function_call instead of tool_calls; use a server or "
            "model that supports the tools parameter",
            FailureClass.CONFIGURATION,
        )
    model = data.get("model")
    return ProviderReply(
        text=_text(message.get("content")),
        tool_calls=[_tool_call(call) for call in raw_calls],
        usage=_usage(data.get("usage")),
        model=model if isinstance(model, str) and model else settings.model,
        stop_reason=finish_reason if isinstance(finish_reason, str) else None,
    )


class OpenAIChat:
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``base_url`` defaults to ``OPENAI_BASE_URL`` from the environment, else
    OpenAI's; ``api_key`` to ``OPENAI_API_KEY`` (a local server may need none).
    The key goes only into the ``Authorization`` header: never into ``repr``,
    logs, errors or the journal. ``temperature``, ``max_tokens`` and
    ``extra_body`` (fields sent as they are, e.g. ``{"max_completion_tokens":
    1000}`` for models that want that name) are defaults that an agent's
    ``ModelSettings`` override.

    With ``strict`` (the default) each tool goes in OpenAI's strict mode, which
    holds the model's arguments to the tool's schema: its strict form, where an
    optional property is required but nullable, and a null for it counts as
    left out when the tool is called. A tool whose schema has no strict form (a
    mapping with keys it does not name) goes non-strict. ``strict=False`` sends
    every schema as it is, for an endpoint that refuses strict mode.
    """

    provider_name = "openai"
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
        strict: bool = True,
    ) -> None:
        if model is None:
            raise ConfigurationError("OpenAIChat needs a model name")
        self.defaults = ModelSettings(
            model=model,
            temperature=temperature,
            max_tokens=max_tokens,
            extra_body=extra_body if extra_body is not None else {},
        )
        self.timeout_seconds = check_timeout(timeout_seconds)
        self.strict = bool(strict)
        base, key = base_and_key(
            "OpenAIChat",
            base_url,
            api_key,
            default_base=OPENAI_BASE_URL,
            base_variable="OPENAI_BASE_URL",
            key_variable="OPENAI_API_KEY",
        )
        self._endpoint = JsonEndpoint(
            "OpenAI-compatible endpoint",
            base,
            "/chat/completions",
            headers=extra_headers,
            secret=key,
            secret_header=("authorization", "Bearer "),
            timeout_seconds=self.timeout_seconds,
            key_variable="OPENAI_API_KEY",
        )

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.defaults.model!r}, url={self._endpoint.shown_url!r})"

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        settings = request.model_settings.over(self.defaults)
        data = await self._endpoint.post(chat_request(request, settings, strict=self.strict))
        try:
            return chat_reply(data, settings)
        except BadReply as exc:
            raise self._endpoint.failure(str(exc), exc.failure_class) from None

    async def aclose(self) -> None:
        """Close this event loop's connections; the provider can still be used afterwards."""
        await self._endpoint.aclose()

    async def __aenter__(self) -> OpenAIChat:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
