"""Every timeout follows one rule, wherever it is set: a number of seconds greater than
0 and at most a year. Infinity is refused everywhere: the keeper renews a call's lease
for as long as its worker lives, so a call without a finite timeout could hold its run
for ever, and a drain waiting for it would never end."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from leaseward import (
    Agent,
    ConfigurationError,
    ScriptedProvider,
    ToolContext,
    ToolDefinitionError,
    ToolEffect,
    tool,
)
from leaseward.mcp import MCPServer
from leaseward.providers import AnthropicMessages, OpenAIChat
from leaseward.runtime.clock import MAX_DURATION_SECONDS
from leaseward.runtime.timeouts import TIMEOUT_RULE
from leaseward.runtime.tools import bind_tool


async def _lookup(ctx: ToolContext) -> None:
    pass


class _ClassTool:
    name = "lookup"
    description = "looks up"
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    effect = ToolEffect.READ_ONLY

    def __init__(self, timeout: Any) -> None:
        self.timeout_seconds = timeout

    async def __call__(self, ctx: ToolContext) -> None:
        pass


# Each place a timeout is set, and the words that name it in the refusal.
PLACES: dict[str, tuple[Callable[[Any], object], str]] = {
    "a tool's": (lambda t: tool(timeout_seconds=t)(_lookup), "tool '_lookup': timeout_seconds"),
    "a class-based tool's": (
        lambda t: bind_tool(_ClassTool(t)),
        "tool 'lookup': timeout_seconds",
    ),
    "a tool's approval": (
        lambda t: tool(requires_approval=True, approval_timeout_seconds=t)(_lookup),
        "tool '_lookup': approval_timeout_seconds",
    ),
    "an agent's approval": (
        lambda t: Agent("a", ScriptedProvider([]), approval_timeout_seconds=t),
        "agent 'a': approval_timeout_seconds",
    ),
    "a provider's": (
        lambda t: Agent("a", ScriptedProvider([], timeout_seconds=t)),
        "agent 'a': the provider's timeout_seconds",
    ),
    "OpenAIChat's": (
        lambda t: OpenAIChat("m", api_key="k", timeout_seconds=t),
        "timeout_seconds",
    ),
    "AnthropicMessages'": (
        lambda t: AnthropicMessages("m", api_key="k", timeout_seconds=t),
        "timeout_seconds",
    ),
    "an MCP server's calls": (
        lambda t: MCPServer.http("billing", "http://127.0.0.1:1/mcp", timeout_seconds=t),
        "MCP server 'billing': timeout_seconds",
    ),
    "an MCP server's connection": (
        lambda t: MCPServer.http("billing", "http://127.0.0.1:1/mcp", connect_timeout_seconds=t),
        "MCP server 'billing': connect_timeout_seconds",
    ),
}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize(
    "timeout", [math.inf, MAX_DURATION_SECONDS + 1, 0, -1, math.nan, True, "30"], ids=repr
)
def test_every_timeout_is_a_finite_positive_number_of_seconds(place: str, timeout: Any) -> None:
    make, named = PLACES[place]
    with pytest.raises(ConfigurationError) as refused:
        make(timeout)
    assert refused.value.message.startswith(f"{named} must be {TIMEOUT_RULE}")
    assert refused.value.message.endswith(f"not {timeout!r}")


@pytest.mark.parametrize("place", PLACES)
def test_a_timeout_of_up_to_a_year_is_taken(place: str) -> None:
    make, _ = PLACES[place]
    make(0.001)
    make(MAX_DURATION_SECONDS)


def test_a_tools_refusal_is_a_tool_definition_error() -> None:
    with pytest.raises(ToolDefinitionError):
        tool(timeout_seconds=math.inf)(_lookup)
    with pytest.raises(ToolDefinitionError):
        tool(requires_approval=True, approval_timeout_seconds=math.inf)(_lookup)
