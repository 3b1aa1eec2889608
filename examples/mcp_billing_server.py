"""A small MCP server for examples/mcp_agent.py: a shop's billing system.

It speaks MCP over stdin and stdout (``python examples/mcp_billing_server.py``),
written with the official ``mcp`` package. ``create_invoice`` keeps the
idempotency key leaseward sends in the request's ``_meta`` and answers a repeat
of a key with the invoice it already made: a server that honours the key can
deduplicate whatever happens to the client.
"""

from __future__ import annotations

import itertools
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("billing")
invoices: dict[str, str] = {}
numbers = itertools.count(1001)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def order_total(order_id: str) -> int:
    """The order's total, in cents."""
    return 4200


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
async def mark_paid(order_id: str) -> str:
    """Set the order's status to paid."""
    return f"{order_id} is paid"


@server.tool()
async def create_invoice(order_id: str, amount_cents: int, ctx: Context[Any, Any]) -> str:
    """Create an invoice for the order."""
    key = str((ctx.request_context.meta or {}).get("leaseward/idempotency-key", ""))
    if key not in invoices:
        invoices[key] = f"INV-{next(numbers)} for {order_id}: {amount_cents} cents"
    return invoices[key]


if __name__ == "__main__":
    server.run("stdio")
