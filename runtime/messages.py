"""The conversation's values: messages, the calls a model asks for, and what a provider
is asked and replies."""

from __future__ import annotations

import enum
import json
import math
import reprlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeGuard

import attrs
import msgspec

from leaseward.runtime.encoding import MAX_ARGUMENTS_DEPTH, check_shape, dump_json
from leaseward.runtime.errors import ConfigurationError, InvalidInput, ProviderError

__all__ = [
    "Message",
    "ModelSettings",
    "ProviderReply",
    "ProviderRequest",
    "Role",
    "ToolCall",
    "ToolSpec",
    "Usage",
]

_SHOWN_CHARS = 80


class Role(enum.StrEnum):
    """Who wrote a message of the conversation a provider is sent."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON has")


def _finite(digits: str) -> float:
    value = float(digits)
    if not math.isfinite(value):
        shown = digits if len(digits) <= _SHOWN_CHARS else digits[: _SHOWN_CHARS - 3] + "..."
        raise ValueError(f"{shown} is not a number JSON has: it is past a float's range")
    return value


# Python's reader takes NaN and Infinity, and 1e999 for an infinite float: arguments that
# held one could not be journaled with the reply that asked for them, and the run would
# end over what a model wrote, where any other text that is no JSON gets the model an
# error result it can act on.
_MODEL_JSON = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def _read_arguments(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """A model's argument text as a dict, or None and why it is not one."""
    if not text.strip():
        # Some endpoints send no text at all for a call without arguments.
        return {}, None
    try:
        value = _MODEL_JSON.decode(text)
        check_shape(value, "they", MAX_ARGUMENTS_DEPTH)
    except InvalidInput:
        return None, f"they are nested more than {MAX_ARGUMENTS_DEPTH} levels deep"
    except (ValueError, RecursionError, TypeError) as exc:
        return None, f"they are not JSON ({exc})"
    if not isinstance(value, dict):
        return None, f"they are a JSON {type(value).__name__}, not an object"
    return value, None


@attrs.frozen
class ToolCall:
    """A call the model asked for. A provider builds these from the model's reply."""

    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    call_id: str = ""
    invalid_arguments: str | None = None
    """The model's argument text when it is not a JSON object (``arguments`` is then
    empty): the call is not made, and the model gets an error result saying why."""

    @classmethod
    def from_text(cls, name: str, text: str, call_id: str = "") -> ToolCall:
        """A call whose arguments arrived as JSON text, as chat-completion APIs send them."""
        arguments, _ = _read_arguments(text)
        if arguments is None:
            return cls(name, {}, call_id, invalid_arguments=text)
        return cls(name, arguments, call_id)

    @classmethod
    def from_decoded(cls, name: str, value: Any, call_id: str = "") -> ToolCall:
        """A call whose arguments came decoded, a value inside the provider's JSON answer:
        held to what their text is held to, since the reader of the answer lets through
        what no journal holds (NaN, Infinity, nesting too deep)."""
        return cls.from_text(name, json.dumps(value), call_id)

    @property
    def arguments_problem(self) -> str | None:
        """Why the model's arguments could not be read, or None when they could."""
        if self.invalid_arguments is None:
            return None
        return _read_arguments(self.invalid_arguments)[1] or "they are not a JSON object"

    def __attrs_post_init__(self) -> None:
        # Found later, a wrong type fails deep inside leaseward with a message about
        # dicts; found here, it names the provider's call that carried it.
        for field, value in (("name", self.name), ("call id", self.call_id)):
            if not isinstance(value, str):
                raise ProviderError(
                    f"a tool call from the provider has a {field} of type "
                    f"{type(value).__name__}, not str: {_shown(value)}"
                )
        if self.invalid_arguments is not None and not isinstance(self.invalid_arguments, str):
            raise ProviderError(
                f"tool call {self.name!r}: invalid_arguments is the model's argument text, "
                f"a str, not {type(self.invalid_arguments).__name__}"
            )
        if not isinstance(self.arguments, Mapping):
            hint = (
                " (decode the JSON text a model API returns into a dict first)"
                if isinstance(self.arguments, str | bytes)
                else ""
            )
            call = f" (call id {self.call_id!r})" if self.call_id else ""
            raise ProviderError(
                f"tool call {self.name!r}{call} from the provider has arguments of type "
                f"{type(self.arguments).__name__}, not a mapping of names to values: "
                f"{_shown(self.arguments)}{hint}"
            )


# Bounded in depth and length: the value is a provider's, so it may be huge or
# nested deeper than repr() can recurse.
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel = 4
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHOWN_CHARS


def _shown(value: Any) -> str:
    shown = _SHORT_REPR.repr(value)
    return shown if len(shown) <= _SHOWN_CHARS else shown[: _SHOWN_CHARS - 3] + "..."


def _tool_call_tuple(calls: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    # A provider of one's own builds these: what it got wrong is said here, in its words,
    # rather than by an AttributeError where the run first reads a call.
    kind = type(calls)
    # A tuple or a list, nearly always: the ABCs' checks are for what else comes.
    if (
        kind is not tuple
        and kind is not list
        and (isinstance(calls, str | bytes | Mapping) or not isinstance(calls, Iterable))
    ):
        raise ProviderError(
            f"the tool calls of a provider's reply are a list of ToolCall, not a "
            f"{type(calls).__name__}: {_shown(calls)}"
        )
    given = tuple(calls)
    for call in given:
        if type(call) is not ToolCall and not isinstance(call, ToolCall):
            raise ProviderError(
                f"a tool call of a provider's reply is a {type(call).__name__}, not a "
                f"ToolCall: {_shown(call)}"
            )
    return given


def _reply_text(owner: Any, attribute: attrs.Attribute[str | None], value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise ProviderError(
            f"the text of a provider's reply is a {type(value).__name__}, not a string: "
            f"{_shown(value)}"
        )


def _reply_usage(owner: Any, attribute: attrs.Attribute[Usage | None], value: Any) -> None:
    if value is not None and not isinstance(value, Usage):
        raise ProviderError(
            f"the usage of a provider's reply is a {type(value).__name__}, not a Usage: "
            f"{_shown(value)}"
        )


def _reasoning_tuple(blocks: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    blocks = tuple(blocks)
    for block in blocks:
        if not isinstance(block, Mapping):
            raise ProviderError(
                f"a reasoning block from the provider is a {type(block).__name__}, "
                f"not a mapping: {_shown(block)}"
            )
    return blocks


class Message(msgspec.Struct, frozen=True):
    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    """For a tool result: the call failed, was refused, or did not apply."""
    reasoning: tuple[Mapping[str, Any], ...] = ()
    """For a model's message: its reasoning blocks, as ``ProviderReply.reasoning``."""


@attrs.frozen
class ToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]


def _check_settings(settings: ModelSettings) -> None:
    if settings.model is not None and (not isinstance(settings.model, str) or not settings.model):
        raise ConfigurationError(f"model must be a non-empty string, not {settings.model!r}")
    temperature = settings.temperature
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature < math.inf
    ):
        raise ConfigurationError(f"temperature must be a number of 0 or more, not {temperature!r}")
    max_tokens = settings.max_tokens
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ConfigurationError(f"max_tokens must be a positive integer, not {max_tokens!r}")
    if not isinstance(settings.extra_body, Mapping):
        raise ConfigurationError(
            f"extra_body must be a mapping of field names to JSON values, "
            f"not {type(settings.extra_body).__name__}"
        )
    try:
        dump_json(dict(settings.extra_body), what="extra_body")
    except InvalidInput as exc:
        raise ConfigurationError(exc.message) from None


def _read_only_copy(value: Any) -> Any:
    # Settings are shared by every request of an agent: nobody may change them in passing.
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else value


@attrs.frozen
class ModelSettings:
    """What to ask the model with; a field left None keeps the provider's own setting.

    An agent carries its settings on every request, so one provider object
    serves agents that want different models or temperatures.
    """

    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    extra_body: Mapping[str, Any] = attrs.field(factory=dict, converter=_read_only_copy)
    """Fields added to the request body as they are, over the provider's own."""

    def __attrs_post_init__(self) -> None:
        _check_settings(self)

    def over(self, defaults: ModelSettings) -> ModelSettings:
        """These settings, with ``defaults`` filling what they leave None."""
        return ModelSettings(
            model=defaults.model if self.model is None else self.model,
            temperature=defaults.temperature if self.temperature is None else self.temperature,
            max_tokens=defaults.max_tokens if self.max_tokens is None else self.max_tokens,
            extra_body={**defaults.extra_body, **self.extra_body},
        )


class ProviderRequest(msgspec.Struct, frozen=True):
    run_id: str
    agent: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    model_settings: ModelSettings = ModelSettings()


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _token_count(owner: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    if not _is_count(value):
        raise ProviderError(
            f"the provider's {attribute.name} must be a count of tokens, not {_shown(value)}"
        )


@attrs.frozen
class Usage:
    """The tokens one provider turn cost."""

    input_tokens: int = attrs.field(default=0, validator=_token_count)
    output_tokens: int = attrs.field(default=0, validator=_token_count)

    @classmethod
    def read(cls, input_tokens: Any, output_tokens: Any) -> Usage | None:
        """The usage in two values read from JSON; None unless both are counts of tokens."""
        if not (_is_count(input_tokens) and _is_count(output_tokens)):
            return None
        return cls(input_tokens, output_tokens)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


@attrs.frozen
class ProviderReply:
    text: str | None = attrs.field(default=None, validator=_reply_text)
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tool_call_tuple)
    usage: Usage | None = attrs.field(default=None, validator=_reply_usage)
    model: str | None = None
    """The model that answered, as the provider names it."""
    stop_reason: str | None = None
    """Why the model stopped, in the provider's words (``stop``, ``tool_use``, ...)."""
    reasoning: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_reasoning_tuple)
    """The model's reasoning as the provider's API gave it (Anthropic's ``thinking``
    and ``redacted_thinking`` blocks, signatures included), journaled with the turn and
    sent back with it as they came: an API that signs them refuses a conversation
    that drops or changes them."""
