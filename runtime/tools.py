"""Tools: the ``@tool`` decorator, the ``Tool`` protocol, and what a call is given."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, overload, runtime_checkable

import attrs
import msgspec
import structlog

from leaseward.runtime.effects import ToolEffect, declared_effect
from leaseward.runtime.encoding import holdable
from leaseward.runtime.errors import ToolDefinitionError, ToolError
from leaseward.runtime.results import EncodedResult, ResultEncoder, result_encoder
from leaseward.runtime.schema import (
    ToolArguments,
    check_schema_fits,
    schema_arguments,
    signature_arguments,
    takes_context,
)
from leaseward.runtime.timeouts import checked_timeout

__all__ = [
    "DEFAULT_TOOL_TIMEOUT_SECONDS",
    "ApprovalPolicy",
    "AskHuman",
    "BoundTool",
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolSet",
    "ask_human",
    "bind_tool",
    "tool",
]

DEFAULT_TOOL_TIMEOUT_SECONDS = 30.0


class ToolContext(msgspec.Struct, frozen=True):
    """What a tool call knows about itself.

    ``idempotency_key`` is the same on every execution of the same call, so a
    write tool can hand it to the system it changes and let that system refuse
    a repeat. ``log`` has the run and the call bound; its events go to the
    ``logging`` logger ``leaseward.run``, like the run's own.
    """

    run_id: str
    epoch: int
    call_id: str
    idempotency_key: str
    log: structlog.stdlib.BoundLogger
    lease_remaining: Callable[[], float] = lambda: 0.0
    """Seconds this worker's lease has left now, measured on its monotonic clock."""

    @property
    def fencing_token(self) -> int:
        """The lease epoch: it grows with every claim of the run, so a system that
        remembers the highest token it saw for ``run_id`` can refuse a write from a
        worker that lost its lease (a paused process waking up)."""
        return self.epoch


ApprovalPolicy = Callable[[Mapping[str, Any]], bool]
"""Given a call's arguments, whether a person must approve it (e.g. charges over an amount)."""


@runtime_checkable
class Tool(Protocol):
    """A class-based tool. ``effect``, ``description``, ``timeout_seconds``,
    ``requires_approval`` (a bool or an ApprovalPolicy) and ``approval_timeout_seconds``
    are optional attributes; a tool that declares no effect is ``ToolEffect.READ_ONLY``
    and one that declares nothing about approval runs without it."""

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...

    async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any: ...


ToolFunction = Callable[..., Awaitable[Any]]


@attrs.frozen
class FunctionTool:
    """An ``async def`` made into a tool by ``@tool``; awaiting it with a call's JSON arguments
    checks them and calls the function with the values its annotations ask for (and the
    context first, if it takes one)."""

    function: ToolFunction
    name: str
    description: str
    effect: ToolEffect
    timeout_seconds: float
    arguments: ToolArguments
    requires_approval: bool | ApprovalPolicy = False
    approval_timeout_seconds: float | None = None
    takes_context: bool = True

    @property
    def parameters(self) -> Mapping[str, Any]:
        return self.arguments.schema

    async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any:
        given = self.arguments.parse(arguments)
        if self.takes_context:
            return await self.function(ctx, **given)
        return await self.function(**given)


def _check_name(name: Any, owner: Any) -> None:
    # Journaled with each call, and matched against the model's call names, which are
    # kept as text every store holds: a name that is not would match no call.
    if not isinstance(name, str) or not name or not holdable(name):
        raise ToolDefinitionError(
            f"{owner!r}: a tool's name must be a non-empty string without a NUL character "
            f"or a lone surrogate, not {name!r}"
        )


def _check_description(description: Any, owner: str) -> None:
    if not isinstance(description, str):
        raise ToolDefinitionError(
            f"tool {owner!r}: description must be a string (the model reads it), "
            f"not {description!r}"
        )


def _fitting_schema(function: ToolFunction, parameters: Mapping[str, Any]) -> ToolArguments:
    arguments = schema_arguments(parameters)
    check_schema_fits(function, arguments.schema)
    return arguments


def _approval(
    owner: str, requires: Any, timeout: Any
) -> tuple[bool | ApprovalPolicy, float | None]:
    if not isinstance(requires, bool) and not callable(requires):
        raise ToolDefinitionError(
            f"tool {owner!r}: requires_approval must be True, False or a function of the "
            f"arguments, not {requires!r}"
        )
    if timeout is None:
        return requires, None
    # Its expiry is stored as a time, in JSON too: infinity could not be, and a call
    # that needed approval then could never park.
    return requires, checked_timeout(
        f"tool {owner!r}: approval_timeout_seconds",
        timeout,
        error=ToolDefinitionError,
        or_none=True,
    )


def _make_function_tool(
    function: ToolFunction,
    *,
    name: str | None,
    description: str | None,
    effect: ToolEffect,
    timeout_seconds: float,
    parameters: Mapping[str, Any] | None,
    requires_approval: bool | ApprovalPolicy,
    approval_timeout_seconds: float | None,
) -> FunctionTool:
    if not inspect.iscoroutinefunction(function):
        raise ToolDefinitionError(f"a tool must be an async function, not {function!r}")
    tool_name = function.__name__ if name is None else name
    _check_name(tool_name, function)
    if description is not None:
        _check_description(description, tool_name)
    if not isinstance(effect, ToolEffect):
        raise ToolDefinitionError(f"tool {tool_name!r}: effect must be a ToolEffect member")
    requires, approval_timeout = _approval(tool_name, requires_approval, approval_timeout_seconds)
    return FunctionTool(
        function=function,
        name=tool_name,
        description=description if description is not None else inspect.getdoc(function) or "",
        effect=effect,
        timeout_seconds=checked_timeout(
            f"tool {tool_name!r}: timeout_seconds", timeout_seconds, error=ToolDefinitionError
        ),
        arguments=(
            signature_arguments(function)
            if parameters is None
            else _fitting_schema(function, parameters)
        ),
        requires_approval=requires,
        approval_timeout_seconds=approval_timeout,
        takes_context=takes_context(function),
    )


@overload
def tool(function: ToolFunction, /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    effect: ToolEffect = ToolEffect.READ_ONLY,
    timeout_seconds: float = DEFAULT_TOOL_TIMEOUT_SECONDS,
    parameters: Mapping[str, Any] | None = None,
    requires_approval: bool | ApprovalPolicy = False,
    approval_timeout_seconds: float | None = None,
) -> Callable[[ToolFunction], FunctionTool]: ...


def tool(
    function: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effect: ToolEffect = ToolEffect.READ_ONLY,
    timeout_seconds: float = DEFAULT_TOOL_TIMEOUT_SECONDS,
    parameters: Mapping[str, Any] | None = None,
    requires_approval: bool | ApprovalPolicy = False,
    approval_timeout_seconds: float | None = None,
) -> FunctionTool | Callable[[ToolFunction], FunctionTool]:
    """Make ``async def f(ctx: ToolContext, ...)`` a tool; ``@tool`` alone declares a read.

    The first parameter receives the context only if it is named ``ctx`` or annotated
    ToolContext: ``async def f(city: str)`` is a plain tool, each of its parameters an
    argument the model sends.

    ``requires_approval`` (True, or a function of the arguments that says so per call)
    makes every call wait for a person's approval before it executes; an undecided
    request expires as a rejection after ``approval_timeout_seconds`` (the agent's
    when None, and never when both are None).
    """

    def decorate(fn: ToolFunction) -> FunctionTool:
        return _make_function_tool(
            fn,
            name=name,
            description=description,
            effect=effect,
            timeout_seconds=timeout_seconds,
            parameters=parameters,
            requires_approval=requires_approval,
            approval_timeout_seconds=approval_timeout_seconds,
        )

    if isinstance(function, ToolEffect):
        raise ToolDefinitionError(
            f"a tool's effect is given by name: @tool(effect=ToolEffect.{function.name})"
        )
    if isinstance(function, str):
        raise ToolDefinitionError(f"a tool's name is given by name: @tool(name={function!r})")
    return decorate(function) if function is not None else decorate


@attrs.frozen
class BoundTool:
    """A tool as the runtime uses it, its optional attributes resolved once."""

    name: str
    description: str
    arguments: ToolArguments
    timeout_seconds: float
    effect: ToolEffect
    implementation: Callable[[ToolContext, Mapping[str, Any]], Awaitable[Any]]
    """Called as ``implementation(ctx, checked)`` with the keyword arguments that
    ``arguments.parse`` made of what the model sent: a call's arguments are checked once."""
    requires_approval: bool | ApprovalPolicy = False
    approval_timeout_seconds: float | None = None
    asks_human: bool = False
    """Its calls are answered by a person (``ask_human``), never executed."""
    results: ResultEncoder | None = None
    """How its results become JSON; None encodes them by value."""
    source_json: str | None = None
    """Where a tool listed from a server came from and how its effect was decided
    (``ToolProvenance``), journaled with each of its calls."""

    @property
    def parameters(self) -> Mapping[str, Any]:
        return self.arguments.schema

    def encode_result(self, result: Any, *, returned: bool) -> EncodedResult:
        """A call's result as JSON, for the journal and the model. A write that ``returned``
        ran: whatever it returned, the model is told it succeeded (G13). One that raised
        ToolError is told its ``{"error": message}``, as much of the message as fits."""
        encoder = self.results or ResultEncoder(self.name)
        error = result.get("error") if not returned and isinstance(result, Mapping) else None
        if isinstance(error, str):
            return encoder.encode_error(error)
        return encoder.encode(result, applied=returned and self.effect.is_write)

    def needs_approval(self, arguments: Mapping[str, Any]) -> bool:
        policy = self.requires_approval
        if not callable(policy):
            return policy
        try:
            return bool(policy(arguments))
        except Exception:
            # A policy that cannot decide must not wave the call through: a person does.
            return True


async def _call_function(tool: FunctionTool, ctx: ToolContext, checked: Mapping[str, Any]) -> Any:
    if tool.takes_context:
        return _awaited(tool.name, await tool.function(ctx, **checked))
    return _awaited(tool.name, await tool.function(**checked))


async def _call_tool(candidate: Tool, ctx: ToolContext, checked: Mapping[str, Any]) -> Any:
    return _awaited(candidate.name, await candidate(ctx, **checked))


_PLAIN_RESULTS = frozenset({str, dict, list, tuple, int, float, bool, type(None)})


def _awaited(name: str, result: Any) -> Any:
    """``result``, unless it is an awaitable the tool forgot to await: taken for a result
    that is not JSON, a write's call would be journaled as succeeded, its effect never
    made. Raised, the call failed; a write's, which may have done something before it
    returned, waits for an operator as after any exception."""
    # Most results are plain JSON: asking the Awaitable ABC of each costs a step more.
    if type(result) in _PLAIN_RESULTS or not inspect.isawaitable(result):
        return result
    if inspect.iscoroutine(result):
        # It will never run: closed, it does not warn that it was never awaited.
        result.close()
    raise ToolDefinitionError(
        f"tool {name!r} returned a {type(result).__name__} instead of its result: an await "
        "is missing in it"
    )


def bind_tool(candidate: Any) -> BoundTool:
    if isinstance(candidate, type):
        # A class has a name, parameters and a __call__ of its own: it makes instances.
        raise ToolDefinitionError(
            f"{candidate.__name__} is a class: give a tool an instance of it "
            f"({candidate.__name__}()), not the class"
        )
    if not isinstance(candidate, Tool):
        raise ToolDefinitionError(
            f"{candidate!r} is not a tool: decorate it with @tool, or give its class a "
            "name, parameters and an async __call__"
        )
    if not isinstance(candidate, FunctionTool) and not inspect.iscoroutinefunction(
        type(candidate).__call__
    ):
        # A plain __call__ would run the call, write and all, and then fail on its await:
        # a write whose effect was made, dead-lettered for an operator.
        raise ToolDefinitionError(
            f"tool {getattr(candidate, 'name', candidate)!r}: its class's __call__ must be "
            "an async def"
        )
    name = candidate.name
    _check_name(name, candidate)
    description = getattr(candidate, "description", "") or ""
    _check_description(description, name)
    timeout = getattr(candidate, "timeout_seconds", DEFAULT_TOOL_TIMEOUT_SECONDS)
    requires, approval_timeout = _approval(
        name,
        getattr(candidate, "requires_approval", False),
        getattr(candidate, "approval_timeout_seconds", None),
    )
    implementation: Callable[[ToolContext, Mapping[str, Any]], Awaitable[Any]]
    if isinstance(candidate, FunctionTool):
        arguments = candidate.arguments
        implementation = functools.partial(_call_function, candidate)
        returns: Callable[..., Any] = candidate.function
    else:
        returns = type(candidate).__call__
        arguments = schema_arguments(candidate.parameters)
        # The tool gets the arguments as they were checked: a null that a model in strict
        # mode sent for a property it left out is dropped, as for a function tool.
        implementation = functools.partial(_call_tool, candidate)
    return BoundTool(
        name=name,
        description=str(description),
        arguments=arguments,
        timeout_seconds=checked_timeout(
            f"tool {name!r}: timeout_seconds", timeout, error=ToolDefinitionError
        ),
        effect=declared_effect(candidate),
        implementation=implementation,
        requires_approval=requires,
        approval_timeout_seconds=approval_timeout,
        asks_human=getattr(candidate, "asks_human", False) is True,
        results=result_encoder(name, returns),
        source_json=_provenance_json(candidate),
    )


def _provenance_json(candidate: Any) -> str | None:
    provenance = getattr(candidate, "provenance", None)
    as_json = getattr(provenance, "as_json", None)
    return None if as_json is None else str(as_json())


class AskHuman:
    """The built-in tool ``ask_human(question)``: give it to an agent, and a call of it
    parks the run in ``waiting_for_input`` with the question, holding no worker, until
    someone answers (``send_input`` or ``leaseward reply``); the answer is the result."""

    name = "ask_human"
    description = "Ask a person a question and wait for the answer, which is this call's result."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"question": {"type": "string"}},
        "required": ["question"],
        "additionalProperties": False,
    }
    effect = ToolEffect.READ_ONLY
    asks_human = True

    async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any:
        # The runtime answers these calls from the journal; reaching here means it was
        # called outside one.
        raise ToolError("ask_human is answered by a person through leaseward, not called")


ask_human = AskHuman()


class ToolSet:
    """An agent's tools by name."""

    def __init__(self, tools: Iterable[Any]) -> None:
        self._tools: dict[str, BoundTool] = {}
        for candidate in tools:
            bound = bind_tool(candidate)
            if bound.name in self._tools:
                raise ToolDefinitionError(f"two tools are named {bound.name!r}")
            self._tools[bound.name] = bound

    def get(self, name: str) -> BoundTool | None:
        return self._tools.get(name)

    def __iter__(self) -> Iterator[BoundTool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)
