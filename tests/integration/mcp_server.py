"""A real MCP server for the tests, written with the ``mcp`` package's server API.

``python -m tests.integration.mcp_server stdio`` serves over stdin and stdout;
``... http PORT`` serves Streamable HTTP on 127.0.0.1:PORT. Every call appends a
line to the ledger file named by LEDGER (the tool, its arguments, the ``_meta``
it received and this process's id), which the tests read as the server's own
account of what ran. ``ANNOTATIONS=changed`` lists different annotations;
``DROP`` (comma-separated names) leaves tools out of the listing. ``hold_write``
returns once the file named by RELEASE exists. With STARTED naming a file, every
start but the first waits RESTART_DELAY seconds before it serves: a server slow to
come back. NOISE is written to stderr as the server starts. ``... endless-listing
same`` (or ``new``) serves tools whose every page names a next one; ``... odd-results``
tools whose results break their output schemas.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, ToolAnnotations

__all__ = ["ANNOTATED", "ledger_lines", "server"]

LEDGER = os.environ.get("LEDGER", "")
CHANGED = os.environ.get("ANNOTATIONS") == "changed"
RELEASE = os.environ.get("RELEASE", "")
DROPPED = frozenset(filter(None, os.environ.get("DROP", "").split(",")))

ANNOTATED: dict[str, ToolAnnotations | None] = {
    "lookup": ToolAnnotations(read_only_hint=True),
    "set_flag": ToolAnnotations(idempotent_hint=True, destructive_hint=False),
    "delete_record": ToolAnnotations(destructive_hint=True),
    # Changed, it claims to be an idempotent write: a resume must not believe it.
    "create_invoice": ToolAnnotations(idempotent_hint=True) if CHANGED else None,
    "slow_write": None,
    "refuse": ToolAnnotations(read_only_hint=True),
    "charge_then_fail": None,
    "charge_then_raise": None,
    "hold_write": None,
}

server = MCPServer("leaseward-test")


def record(tool: str, arguments: dict[str, Any], ctx: Context[Any, Any]) -> None:
    meta = ctx.request_context.meta
    line = {"tool": tool, "arguments": arguments, "meta": dict(meta or {}), "pid": os.getpid()}
    with open(LEDGER, "a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(line) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())


def ledger_lines(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as ledger:
            return [json.loads(line) for line in ledger if line.strip()]
    except FileNotFoundError:
        return []


def offered(name: str) -> bool:
    return name not in DROPPED


if offered("lookup"):

    @server.tool(annotations=ANNOTATED["lookup"])
    async def lookup(city: str, ctx: Context[Any, Any]) -> str:
        """The weather in a city."""
        record("lookup", {"city": city}, ctx)
        return f"sunny in {city}"


if offered("set_flag"):

    @server.tool(annotations=ANNOTATED["set_flag"])
    async def set_flag(name: str, value: bool, ctx: Context[Any, Any]) -> str:
        """Set a flag to a value."""
        record("set_flag", {"name": name, "value": value}, ctx)
        return f"{name}={value}"


if offered("delete_record"):

    @server.tool(annotations=ANNOTATED["delete_record"])
    async def delete_record(record_id: str, ctx: Context[Any, Any]) -> str:
        """Delete a record."""
        record("delete_record", {"record_id": record_id}, ctx)
        return f"deleted {record_id}"


if offered("create_invoice"):

    @server.tool(annotations=ANNOTATED["create_invoice"])
    async def create_invoice(amount: int, ctx: Context[Any, Any]) -> str:
        """Create an invoice."""
        record("create_invoice", {"amount": amount}, ctx)
        return f"invoice for {amount}"


if offered("slow_write"):

    @server.tool(annotations=ANNOTATED["slow_write"])
    async def slow_write(amount: int, ctx: Context[Any, Any]) -> str:
        """A write that takes its time: the tests kill the server during it."""
        record("slow_write", {"amount": amount}, ctx)
        await anyio.sleep(3600)
        return "never"


if offered("refuse"):

    @server.tool(annotations=ANNOTATED["refuse"])
    async def refuse(reason: str, ctx: Context[Any, Any]) -> str:
        """Always fails, reporting why to the model."""
        record("refuse", {"reason": reason}, ctx)
        raise ToolError(f"refused: {reason}")


if offered("charge_then_fail"):

    @server.tool(annotations=ANNOTATED["charge_then_fail"])
    async def charge_then_fail(amount: int, ctx: Context[Any, Any]) -> str:
        """Applies its charge, then fails the way a crashing handler or a gateway does:
        a JSON-RPC internal error, which does not say whether the charge happened."""
        record("charge_then_fail", {"amount": amount}, ctx)
        raise MCPError(INTERNAL_ERROR, "the handler failed after charging")


if offered("charge_then_raise"):

    @server.tool(annotations=ANNOTATED["charge_then_raise"])
    async def charge_then_raise(amount: int, ctx: Context[Any, Any]) -> str:
        """Applies its charge, then its handler raises: the SDK answers with a result
        marked isError, which does not say whether the charge happened."""
        record("charge_then_raise", {"amount": amount}, ctx)
        raise KeyError("receipt")


if offered("hold_write"):

    @server.tool(annotations=ANNOTATED["hold_write"])
    async def hold_write(amount: int, ctx: Context[Any, Any]) -> str:
        """A write that is under way until the test releases it."""
        record("hold_write", {"amount": amount}, ctx)
        # Another process releases it: no event of this one can say when.
        while True:
            if os.path.exists(RELEASE):
                return f"held {amount}"
            await anyio.sleep(0.01)


async def endless_listing(cursors: str) -> None:
    """A server over stdio whose every page of tools names a next page: always the same
    one, or each time a new one; or one page of tools an agent cannot offer: a tool
    whose input schema is not valid JSON Schema (``bad-schema``), one whose output
    schema is not (``bad-output-schema``), one with no name
    (``no-name``), one whose name holds a NUL (``nul-name``), or one tool twice
    (``twice``)."""
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.types import ListToolsResult, Tool

    pages = itertools.count()

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        schema = {"type": "object", "properties": {"city": {"type": "town"}}}
        if cursors == "bad-schema":
            return ListToolsResult(tools=[Tool(name="lookup", input_schema=schema)])
        if cursors == "bad-output-schema":
            tool = Tool(name="lookup", input_schema={"type": "object"}, output_schema=schema)
            return ListToolsResult(tools=[tool])
        if cursors in ("no-name", "nul-name", "twice"):
            names = {"no-name": [""], "nul-name": ["look\x00up"]}.get(cursors, ["lookup"] * 2)
            return ListToolsResult(
                tools=[Tool(name=name, input_schema={"type": "object"}) for name in names]
            )
        page = Tool(name="lookup", input_schema={"type": "object"})
        cursor = "next" if cursors == "same" else f"page-{next(pages)}"
        return ListToolsResult(tools=[page], next_cursor=cursor)

    endless = Server("leaseward-test-endless", on_list_tools=list_tools)
    async with stdio_server() as (read, write):
        await endless.run(read, write, endless.create_initialization_options())


async def odd_results() -> None:
    """A server over stdio whose tools declare an output schema that each of their results
    breaks: ``count`` (read-only) and ``create_invoice`` (no annotations)."""
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool

    counted = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tools = [
        Tool(name="count", input_schema={"type": "object"}, output_schema=counted),
        Tool(name="create_invoice", input_schema={"type": "object"}, output_schema=counted),
    ]
    tools[0].annotations = ToolAnnotations(read_only_hint=True)

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> CallToolResult:
        with open(LEDGER, "a", encoding="utf-8") as ledger:
            ledger.write(json.dumps({"tool": params.name, "pid": os.getpid()}) + "\n")
        text = TextContent(type="text", text="many")
        return CallToolResult(content=[text], structured_content={"n": "many"})

    odd = Server("leaseward-test-odd-results", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await odd.run(read, write, odd.create_initialization_options())


def slow_to_restart() -> None:
    started = os.environ.get("STARTED")
    if not started:
        return
    restarted = os.path.exists(started)
    with open(started, "a", encoding="utf-8"):
        pass
    if restarted:
        time.sleep(float(os.environ["RESTART_DELAY"]))


if __name__ == "__main__":
    sys.stderr.write(os.environ.get("NOISE", ""))
    sys.stderr.flush()
    slow_to_restart()
    if sys.argv[1] == "endless-listing":
        anyio.run(endless_listing, sys.argv[2])
    elif sys.argv[1] == "odd-results":
        anyio.run(odd_results)
    elif sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
