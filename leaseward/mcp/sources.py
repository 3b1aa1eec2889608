"""Listing the MCP servers of an app's agents at worker start, and their tools as the
runtime calls them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import mcp.types as mcp_types
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from leaseward.mcp import FENCING_TOKEN_META, IDEMPOTENCY_KEY_META
from leaseward.mcp.connection import ResultRefused, ServerConnection
from leaseward.mcp.effects import decide_effect, is_destructive
from leaseward.mcp.servers import MCPServer
from leaseward.runtime.agents import Agent, App
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import holdable
from leaseward.runtime.errors import ConfigurationError, ToolDefinitionError, ToolError
from leaseward.runtime.logs import get_logger
from leaseward.runtime.schema import schema_arguments
from leaseward.runtime.tool_sources import ListedTool, ToolProvenance
from leaseward.runtime.tools import ToolContext

__all__ = ["WriteReportedError", "listed_tool", "serving_sources"]

log = get_logger("leaseward.mcp")

# The agents whose listed tools an open runtime of this process serves: the tools are
# bound to that runtime's sessions, which end when it closes.
_served: set[Agent] = set()


def _result_value(result: mcp_types.CallToolResult) -> Any:
    """What the model is told a call returned: its structured content if it has some,
    else its text (a list of blocks when there are several, or content other than text)."""
    if result.structured_content is not None:
        return result.structured_content
    blocks = result.content
    if all(isinstance(block, mcp_types.TextContent) for block in blocks):
        texts = [block.text for block in blocks if isinstance(block, mcp_types.TextContent)]
        return texts[0] if len(texts) == 1 else texts
    return [block.model_dump(by_alias=True, exclude_none=True, mode="json") for block in blocks]


class WriteReportedError(Exception):
    """A non-idempotent write answered with ``isError`` by a server that does not say its
    errors change nothing: the call may have applied, so it is settled as interrupted."""


def _error_text(result: mcp_types.CallToolResult) -> str:
    texts = [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
    return "\n".join(texts) or "the tool reported an error"


def listed_tool(
    server: MCPServer, connection: ServerConnection, tool: mcp_types.Tool
) -> ListedTool:
    """``tool`` as the runtime calls it, its effect decided now, from the code first."""
    annotations = (
        None
        if tool.annotations is None
        else tool.annotations.model_dump(by_alias=True, exclude_none=True, mode="json")
    )
    effect, decided_by = decide_effect(
        tool.name, annotations, effects=server.effects, trusted=server.trusted
    )
    name = tool.name

    # A handler that raised after its effect is an error result too. Told to the model,
    # a non-idempotent write's error would be asked for again under a new key: it is
    # settled as interrupted instead, for an operator to resolve, unless the server says
    # its errors change nothing. Any other call is made again under its own key at worst.
    errors_applied_nothing = (
        effect is not ToolEffect.NON_IDEMPOTENT_WRITE or server.errors_apply_nothing
    )

    async def call(ctx: ToolContext, /, **arguments: Any) -> Any:
        meta = {IDEMPOTENCY_KEY_META: ctx.idempotency_key, FENCING_TOKEN_META: ctx.fencing_token}
        try:
            result = await connection.call(name, arguments, meta)
        except ResultRefused as exc:
            if effect is ToolEffect.NON_IDEMPOTENT_WRITE:
                # It ran: told to the model as failed, it would be asked for again. Raised,
                # it is settled as interrupted, for an operator to resolve.
                raise
            raise ToolError(str(exc)) from exc
        if result.is_error:
            if errors_applied_nothing:
                raise ToolError(_error_text(result))
            raise WriteReportedError(
                f"MCP server {server.name!r} answered the call of {name} with an error "
                f"({_error_text(result)}); the write may have applied before it failed"
            )
        return _result_value(result)

    return ListedTool(
        name=name,
        description=tool.description or "",
        parameters=tool.input_schema,
        effect=effect,
        provenance=ToolProvenance(server.name, decided_by, annotations),
        call=call,
        timeout_seconds=server.timeout_seconds,
        requires_approval=(
            server.approve_destructive
            and effect.is_write
            and is_destructive(annotations if server.trusted else None)
        ),
    )


@asynccontextmanager
async def serving_sources(app: App) -> AsyncIterator[None]:
    """Connect to every MCP server of the app's agents, give each agent the tools its
    servers list, and keep the sessions until the block ends.

    A server that cannot be listed stops the start: a worker that offered the model
    fewer tools than the code declared would run differently from its peers.
    """
    agents = [agent for agent in app.agents if agent.sources]
    busy = next((agent for agent in agents if agent in _served), None)
    if busy is not None:
        # Listed again here, its tools would be bound to this runtime's sessions, and the
        # other runtime's calls would find them closed once this one ends.
        raise ConfigurationError(
            f"agent {busy.name!r} is served by another open Runtime of this process, whose "
            "sessions with its MCP servers carry its calls: give each Runtime its own Agent"
        )
    _served.update(agents)
    # Both raised outside the task group, which would wrap them in an exception group:
    # the caller sees them as they are, as with an app that has no MCP server.
    raised: Exception | None = None
    try:
        async with anyio.create_task_group() as task_group:
            connections: list[ServerConnection] = []
            try:
                problem = await _list_sources(app, task_group, connections)
                if problem is None:
                    try:
                        yield
                    except Exception as exc:
                        raised = exc
            finally:
                for connection in connections:
                    connection.close()
    finally:
        _served.difference_update(agents)
    if raised is not None:
        raise raised
    if problem is not None:
        raise problem


async def _list_sources(
    app: App, task_group: anyio.abc.TaskGroup, connections: list[ServerConnection]
) -> ConfigurationError | None:
    for agent in app.agents:
        listed: list[ListedTool] = []
        named: set[str] = set()
        for source in agent.sources:
            if not isinstance(source, MCPServer):
                return ConfigurationError(
                    f"agent {agent.name!r}: {source!r} is a tool source this runtime "
                    "cannot list (an MCPServer is)"
                )
            if source.name in named:
                # The journal names a call's server by its name: two of one name would
                # leave an operator unable to tell which one a call went to.
                return ConfigurationError(
                    f"agent {agent.name!r}: MCP server {source.name!r} is given twice, or two "
                    "servers have that name"
                )
            named.add(source.name)
            connection = ServerConnection(source, task_group)
            connections.append(connection)
            try:
                tools = await connection.list_tools()
            except Exception as exc:
                return ConfigurationError(
                    f"agent {agent.name!r}: the tools of MCP server {source.name!r} "
                    f"could not be listed: {exc}"
                )
            for tool in tools:
                # Checked here, where the server and the tool can still be named: the
                # agent, given them all at once, could say only what was wrong.
                problem = _unusable(agent, source, tool, listed)
                if problem is not None:
                    return problem
                listed.append(listed_tool(source, connection, tool))
            unlisted = sorted(set(source.effects) - {tool.name for tool in tools})
            if unlisted:
                # A misspelt name leaves the tool it meant to a trusted server's
                # annotations, which may call a non-idempotent write idempotent.
                log.warning(
                    "mcp.effect_unlisted", agent=agent.name, server=source.name, tools=unlisted
                )
        agent.use_listed_tools(listed)
    return None


def _unusable(
    agent: Agent, server: MCPServer, tool: mcp_types.Tool, listed: list[ListedTool]
) -> ConfigurationError | None:
    """Why the agent cannot offer ``tool`` beside what it has, or None."""
    if not tool.name:
        return ConfigurationError(
            f"agent {agent.name!r}: MCP server {server.name!r} lists a tool with no name"
        )
    where = f"agent {agent.name!r}: MCP server {server.name!r} lists the tool {tool.name!r}"
    if not holdable(tool.name):
        # Refused here, not when the agent is given its tools, whose error would name
        # neither the server nor the agent and come out wrapped in an exception group.
        return ConfigurationError(
            f"{where}, whose name holds a NUL or a lone surrogate: no store can journal its calls"
        )
    taken = next((other for other in listed if other.name == tool.name), None)
    if taken is not None and taken.provenance.source == server.name:
        return ConfigurationError(f"{where} twice")
    if taken is not None:
        return ConfigurationError(f"{where}, and MCP server {taken.provenance.source!r} does too")
    if agent.has_own_tool(tool.name):
        return ConfigurationError(f"{where}, and the agent has a tool of its own named so")
    try:
        schema_arguments(tool.input_schema)
    except ToolDefinitionError as exc:
        return ConfigurationError(f"{where}, which it cannot offer: {exc.message}")
    if tool.output_schema is not None:
        # Checked as the SDK checks it, once a call has run: every call would apply its
        # effect, then fail (a write dead-lettered for an operator).
        try:
            validator_for(tool.output_schema).check_schema(tool.output_schema)
        except SchemaError as exc:
            at = "#" + "".join(f"/{part}" for part in exc.absolute_path)
            return ConfigurationError(
                f"{where}, whose output schema is invalid, so every result of it would be "
                f"refused: at {at}: {exc.message}"
            )
    return None
