"""Tools: the ``@tool`` decorator, the ``Tool`` protocol, and what a call is given."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, overload, runtime_checkable

import attrs
import structlog

from leaseward.runtime.effects import ToolEffect, declared_effect
from leaseward.runtime.errors import ToolDefinitionError
from leaseward.runtime.schema import ToolArguments, schema_arguments, signature_arguments

__all__ = [
    "DEFAULT_TOOL_TIMEOUT_SECONDS",
    "BoundTool",
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolSet",
    "bind_tool",
    "tool",
]

DEFAULT_TOOL_TIMEOUT_SECONDS = 30.0


@attrs.frozen
class ToolContext:
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


@runtime_checkable
class Tool(Protocol):
    """A class-based tool. ``effect``, ``description`` and ``timeout_seconds`` are optional
    attributes; a tool that declares no effect is ``ToolEffect.READ_ONLY``."""

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...

    async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any: ...


ToolFunction = Callable[..., Awaitable[Any]]


@attrs.frozen
class FunctionTool:
    """An ``async def`` made into a tool by ``@tool``; awaiting it with a call's JSON arguments
    checks them and calls the function with the values its annotations ask for."""

    function: ToolFunction
    name: str
    description: str
    effect: ToolEffect
    timeout_seconds: float
    arguments: ToolArguments

    @property
    def parameters(self) -> Mapping[str, Any]:
        return self.arguments.schema

    async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any:
        return await self.function(ctx, **self.arguments.parse(arguments))


def _positive_timeout(owner: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ToolDefinitionError(f"tool {owner!r}: timeout_seconds must be a positive number")
    return float(value)


def _make_function_tool(
    function: ToolFunction,
    *,
    name: str | None,
    description: str | None,
    effect: ToolEffect,
    timeout_seconds: float,
    parameters: Mapping[str, Any] | None,
) -> FunctionTool:
    tool_name = name or function.__name__
    if not inspect.iscoroutinefunction(function):
        raise ToolDefinitionError(f"tool {tool_name!r} must be an async function")
    if not isinstance(effect, ToolEffect):
        raise ToolDefinitionError(f"tool {tool_name!r}: effect must be a ToolEffect member")
    return FunctionTool(
        function=function,
        name=tool_name,
        description=description if description is not None else inspect.getdoc(function) or "",
        effect=effect,
        timeout_seconds=_positive_timeout(tool_name, timeout_seconds),
        arguments=(
            signature_arguments(function) if parameters is None else schema_arguments(parameters)
        ),
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
) -> FunctionTool | Callable[[ToolFunction], FunctionTool]:
    """Make ``async def f(ctx: ToolContext, ...)`` a tool; ``@tool`` alone declares a read."""

    def decorate(fn: ToolFunction) -> FunctionTool:
        return _make_function_tool(
            fn,
            name=name,
            description=description,
            effect=effect,
            timeout_seconds=timeout_seconds,
            parameters=parameters,
        )

    return decorate(function) if function is not None else decorate


@attrs.frozen
class BoundTool:
    """A tool as the runtime uses it, its optional attributes resolved once."""

    name: str
    description: str
    arguments: ToolArguments
    timeout_seconds: float
    effect: ToolEffect
    implementation: Callable[..., Awaitable[Any]]
    """Called as ``implementation(ctx, **arguments)`` with the arguments the model sent."""

    @property
    def parameters(self) -> Mapping[str, Any]:
        return self.arguments.schema


async def _call_checked(
    candidate: Tool, arguments: ToolArguments, ctx: ToolContext, /, **given: Any
) -> Any:
    return await candidate(ctx, **arguments.parse(given))


def bind_tool(candidate: Any) -> BoundTool:
    if not isinstance(candidate, Tool):
        raise ToolDefinitionError(
            f"{candidate!r} is not a tool: it needs a name, parameters and an async __call__"
        )
    name = candidate.name
    if not isinstance(name, str) or not name:
        raise ToolDefinitionError(f"{candidate!r}: a tool's name must be a non-empty string")
    description = getattr(candidate, "description", "") or ""
    timeout = getattr(candidate, "timeout_seconds", DEFAULT_TOOL_TIMEOUT_SECONDS)
    implementation: Callable[..., Awaitable[Any]]
    if isinstance(candidate, FunctionTool):
        arguments = candidate.arguments
        implementation = candidate
    else:
        arguments = schema_arguments(candidate.parameters)
        # The tool gets the arguments as they were checked: a null that a model in strict
        # mode sent for a property it left out is dropped, as for a function tool.
        implementation = functools.partial(_call_checked, candidate, arguments)
    return BoundTool(
        name=name,
        description=str(description),
        arguments=arguments,
        timeout_seconds=_positive_timeout(name, timeout),
        effect=declared_effect(candidate),
        implementation=implementation,
    )


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
