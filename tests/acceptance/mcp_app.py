"""The app ``leaseward daemon --app mcp_app:app`` serves in the acceptance tests: the
agent ``clerk``, whose tools come from the test MCP server (tests/integration/
mcp_server.py) that the daemon runs over stdio, trusted. It looks up the weather
(read-only), creates an invoice (no annotations: a non-idempotent write), then
answers ``billed``. ``DEMO_MCP_LEDGER`` names the server's ledger file; with
``DEMO_MCP_URL``, the server is the one already serving Streamable HTTP there."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from leaseward import Agent, App, ProviderReply, ScriptedProvider, ToolCall
from leaseward.mcp import MCPServer

__all__ = ["app"]

ROOT = Path(__file__).resolve().parents[2]

billing = (
    MCPServer.http("billing", os.environ["DEMO_MCP_URL"], trusted=True)
    if "DEMO_MCP_URL" in os.environ
    else MCPServer.stdio(
        "billing",
        sys.executable,
        ["-m", "tests.integration.mcp_server", "stdio"],
        cwd=str(ROOT),
        env={"LEDGER": os.environ.get("DEMO_MCP_LEDGER", os.devnull)},
        trusted=True,
    )
)
provider = ScriptedProvider(
    [
        ProviderReply(tool_calls=[ToolCall("lookup", {"city": "Oslo"}, "c-lookup")]),
        ProviderReply(tool_calls=[ToolCall("create_invoice", {"amount": 5}, "c-invoice")]),
        ProviderReply(text="billed"),
    ]
)
app = App([Agent("clerk", provider, tools=[billing])])
