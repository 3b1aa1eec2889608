"""Agents, the app that holds them, and the model-provider protocol."""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from leaseward.runtime.effects import ToolEffectResolver
from leaseward.runtime.encoding import holdable
from leaseward.runtime.errors import ConfigurationError, ToolDefinitionError, UnknownAgent
from leaseward.runtime.messages import ModelSettings, ProviderReply, ProviderRequest, Role, ToolSpec
from leaseward.runtime.timeouts import checked_timeout
from leaseward.runtime.tool_sources import ListedTool, ToolSource
from leaseward.runtime.tools import Tool, ToolSet

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_PROVIDER_TIMEOUT_SECONDS",
    "Agent",
    "App",
    "Provider",
    "ScriptedProvider",
]

DEFAULT_MAX_STEPS = 20
DEFAULT_PROVIDER_TIMEOUT_SECONDS = 60.0


@runtime_checkable
class Provider(Protocol):
    """A model provider. ``timeout_seconds`` is an optional attribute."""

    async def complete(self, request: ProviderRequest) -> ProviderReply: ...


ScriptedReply = ProviderReply | Callable[[ProviderRequest], ProviderReply]


class ScriptedProvider:
    """Answers turn k with ``replies[k]``, k being the assistant turns already in the request.

    Because k is read from the request, a resumed run gets the same answer for
    the same turn, whatever happened to the process that asked before. A reply
    may also be a callable of the request; a single callable answers every turn.
    """

    def __init__(
        self,
        replies: Sequence[ScriptedReply] | Callable[[ProviderRequest], ProviderReply],
        *,
        timeout_seconds: float = DEFAULT_PROVIDER_TIMEOUT_SECONDS,
    ) -> None:
        if not callable(replies) and (
            isinstance(replies, str | bytes) or not isinstance(replies, Sequence)
        ):
            # A string is a sequence too: each of its characters would be a turn's reply.
            raise ConfigurationError(
                f"a scripted provider's replies are a list, one reply per turn, or a "
                f"function of the request, not {replies!r}"
            )
        if not callable(replies):
            wrong = next(
                (r for r in replies if not callable(r) and not isinstance(r, ProviderReply)),
                None,
            )
            if wrong is not None:
                raise ConfigurationError(
                    "a scripted provider's replies are ProviderReply values or functions of "
                    f"the request, such as ProviderReply(text='hello'), not {reprlib.repr(wrong)}"
                )
        self._replies = replies
        self.timeout_seconds = timeout_seconds
        self.calls = 0

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        self.calls += 1
        if callable(self._replies):
            return self._replies(request)
        turn = sum(1 for message in request.messages if message.role is Role.ASSISTANT)
        if turn >= len(self._replies):
            raise ConfigurationError(
                f"the scripted provider has {len(self._replies)} replies and was asked for turn "
                f"{turn + 1}"
            )
        reply = self._replies[turn]
        return reply(request) if callable(reply) else reply


class Agent:
    """A named loop of provider turns and tool calls, at most ``max_steps`` provider turns.

    ``approval_timeout_seconds`` is how long a call of its tools that requires approval
    waits for a decision before it expires as a rejection, for tools that set none.
    ``model_settings`` go with every request the agent makes; what they leave
    None, the provider's own settings decide.

    ``tools`` may hold ToolSources (an MCP server) beside tools: a runtime lists them
    when it starts and offers the model what they list, with the agent's own tools.
    """

    def __init__(
        self,
        name: str,
        provider: Provider,
        tools: Iterable[Any] = (),
        instructions: str = "",
        max_steps: int = DEFAULT_MAX_STEPS,
        model_settings: ModelSettings | None = None,
        *,
        approval_timeout_seconds: float | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or not holdable(name):
            # Each run stores its agent's name: one no store can hold could never run.
            raise ConfigurationError(
                f"an agent's name must be a non-empty string without a NUL character or a "
                f"lone surrogate, not {name!r}"
            )
        if not isinstance(provider, Provider):
            raise ConfigurationError(f"agent {name!r}: the provider has no async complete()")
        complete = provider.complete
        if inspect.isroutine(complete) and not inspect.iscoroutinefunction(complete):
            # Its reply could not be awaited: every run of the agent would fail on it.
            raise ConfigurationError(
                f"agent {name!r}: the provider's complete() must be async: "
                "async def complete(self, request)"
            )
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ConfigurationError(f"agent {name!r}: max_steps must be a positive integer")
        if approval_timeout_seconds is not None:
            approval_timeout_seconds = checked_timeout(
                f"agent {name!r}: approval_timeout_seconds", approval_timeout_seconds, or_none=True
            )
        if model_settings is not None and not isinstance(model_settings, ModelSettings):
            raise ConfigurationError(
                f"agent {name!r}: model_settings must be a ModelSettings, "
                f"not {type(model_settings).__name__}"
            )
        if isinstance(tools, str | Tool | ToolSource):
            raise ToolDefinitionError(
                f"agent {name!r}: tools is a list, tools=[tool, ...], "
                f"not one {type(tools).__name__}"
            )
        if not isinstance(instructions, str):
            raise ConfigurationError(
                f"agent {name!r}: instructions must be a string (the model reads them), "
                f"not {instructions!r}"
            )
        self.name = name
        self.provider = provider
        given = list(tools)
        self.sources = tuple(t for t in given if isinstance(t, ToolSource))
        self._own_tools = tuple(t for t in given if not isinstance(t, ToolSource))
        self._own_tool_set = ToolSet(self._own_tools)
        self._set_tools(self._own_tool_set)
        self.instructions = instructions
        self.max_steps = max_steps
        # For its tools that declare none of their own: how long a request may wait.
        self.approval_timeout_seconds = (
            None if approval_timeout_seconds is None else float(approval_timeout_seconds)
        )
        self.model_settings = model_settings if model_settings is not None else ModelSettings()
        self.provider_timeout_seconds = checked_timeout(
            f"agent {name!r}: the provider's timeout_seconds",
            getattr(provider, "timeout_seconds", DEFAULT_PROVIDER_TIMEOUT_SECONDS),
        )

    def _set_tools(self, tools: ToolSet) -> None:
        self.tools = tools
        self.effects = ToolEffectResolver(tools)
        self.tool_specs = tuple(ToolSpec(t.name, t.description, t.parameters) for t in tools)

    def has_own_tool(self, name: str) -> bool:
        """Whether one of the tools the agent was given (not one a source listed) is
        named ``name``."""
        return self._own_tool_set.get(name) is not None

    def use_listed_tools(self, listed: Iterable[ListedTool]) -> None:
        """Offer the model the tools its sources listed, beside its own (replacing any
        listed before): called by a runtime once it has listed every source."""
        self._set_tools(ToolSet((*self._own_tools, *listed)))

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, tools={[t.name for t in self.tools]})"


class App:
    """The agents one runtime can execute."""

    def __init__(self, agents: Iterable[Agent]) -> None:
        if isinstance(agents, str | Agent) or not isinstance(agents, Iterable):
            raise ConfigurationError(
                f"App takes a list of agents, App([agent, ...]), not one {type(agents).__name__}"
            )
        self._agents: dict[str, Agent] = {}
        for agent in agents:
            if not isinstance(agent, Agent):
                raise ConfigurationError(f"{agent!r} is not an Agent")
            if agent.name in self._agents:
                raise ConfigurationError(f"two agents are named {agent.name!r}")
            self._agents[agent.name] = agent

    def agent(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(sorted(self._agents)) or "none"
            raise UnknownAgent(f"unknown agent {name!r} (known: {known})") from None

    @property
    def agents(self) -> tuple[Agent, ...]:
        return tuple(self._agents.values())
