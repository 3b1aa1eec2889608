"""An agent whose tools come from an MCP server: examples/mcp_billing_server.py, which
the runtime starts over stdio when it opens. Offline: the provider is scripted.

The server is trusted, so its annotations decide the effects of the tools the
code names nothing for: ``order_total`` is read-only, ``mark_paid`` an idempotent
write. ``create_invoice`` has no annotations, and the code says what it is
anyway: a non-idempotent write, never retried after a crash. Run it with
``python examples/mcp_agent.py`` (needs ``pip install 'leaseward[mcp]'``); the
journal printed at the end shows where each call's effect came from.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from leaseward import (
    Agent,
    App,
    ProviderReply,
    Runtime,
    ScriptedProvider,
    StepKind,
    ToolCall,
    ToolEffect,
)
from leaseward.mcp import MCPServer

STORE_URL = "sqlite:///leaseward-mcp.db"
SERVER = Path(__file__).with_name("mcp_billing_server.py")

billing = MCPServer.stdio(
    "billing",
    sys.executable,
    [str(SERVER)],
    trusted=True,
    effects={"create_invoice": ToolEffect.NON_IDEMPOTENT_WRITE},
)

provider = ScriptedProvider(
    [
        ProviderReply(tool_calls=[ToolCall("order_total", {"order_id": "A-1"}, "total")]),
        ProviderReply(
            tool_calls=[
                ToolCall("create_invoice", {"order_id": "A-1", "amount_cents": 4200}, "invoice")
            ]
        ),
        ProviderReply(tool_calls=[ToolCall("mark_paid", {"order_id": "A-1"}, "paid")]),
        ProviderReply(text="A-1 is invoiced and paid"),
    ]
)

app = App([Agent("biller", provider, tools=[billing])])


async def main() -> None:
    async with Runtime.open(STORE_URL, app) as rt:
        run = await rt.run("biller", "invoice order A-1")
        print(f"{run.id}: {run.state.value}: {run.result}")
        for step in await rt.steps(run.id):
            if step.kind is StepKind.TOOL and step.effect is not None:
                decided = (step.source or {}).get("decided_by")
                print(f"  {step.tool}: {step.effect.value} (decided by {decided}) -> {step.output}")


if __name__ == "__main__":
    anyio.run(main)
