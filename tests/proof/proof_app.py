"""The agents of the proof scenarios, and the ledger their tools keep of what they did.

One agent per effect (``read_only``, ``idempotent``, ``non_idempotent``), each
asking for one call of its tool and then finishing; a run whose input says
``"bad": true`` first asks for a call with invalid arguments, which the runtime
must refuse without executing anything. Every tool execution appends a
``start`` line to the ledger before it does anything and an ``end`` line when
it returns or is cancelled, each flushed and fsynced by the tool itself: the ledger is what
really happened, written independently of the journal it is compared with.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import anyio

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.storage.crash_points import ARMED, crash_point

EFFECTS: dict[str, ToolEffect] = {
    "read_only": ToolEffect.READ_ONLY,
    "idempotent": ToolEffect.IDEMPOTENT_WRITE,
    "non_idempotent": ToolEffect.NON_IDEMPOTENT_WRITE,
}
TOOL_NAMES = {"read_only": "lookup", "idempotent": "reserve", "non_idempotent": "charge"}
CALL_ID = "call-1"
BAD_CALL_ID = "bad-1"
# Short, so that a dead worker's lease (stretched to cover a call: the timeout
# plus twice the margin) expires within a second or two.
TOOL_TIMEOUT_SECONDS = 1.0
PROVIDER_TIMEOUT_SECONDS = 1.0


def append_line(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, durable before this returns: the writer may be killed right after."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The complete lines written so far (a line cut off by a kill is not one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def _reply(request: ProviderRequest) -> ProviderReply:
    turn = sum(1 for message in request.messages if message.role is Role.ASSISTANT)
    user = next(m for m in request.messages if m.role is Role.USER)
    assert user.content is not None
    order = json.loads(user.content)
    name = TOOL_NAMES[order["effect"]]
    script = [ProviderReply(tool_calls=[ToolCall(name, {"amount": order["amount"]}, CALL_ID)])]
    if order.get("bad"):
        script.insert(
            0, ProviderReply(tool_calls=[ToolCall(name, {"amount": "lots"}, BAD_CALL_ID)])
        )
    return script[turn] if turn < len(script) else ProviderReply(text="done")


def order(effect: str, amount: int = 5, *, bad: bool = False) -> dict[str, Any]:
    """The input of a run of ``effect``'s agent."""
    return {"effect": effect, "amount": amount, "bad": bad}


async def _just_renewed(ctx: ToolContext) -> None:
    """Until the lease keeper's next renewal has committed. A process frozen while a
    renewal holds SQLite's write lock would lock every other process out of the file
    (SQLite has one writer), which is not the zombie the proof is about."""
    last = ctx.lease_remaining()
    while (now := ctx.lease_remaining()) <= last:
        last = now
        await anyio.sleep(0.002)


def _make_tool(ledger: Path, effect_name: str, tool_seconds: float) -> Any:
    @tool(
        name=TOOL_NAMES[effect_name],
        effect=EFFECTS[effect_name],
        timeout_seconds=TOOL_TIMEOUT_SECONDS,
    )
    async def act(ctx: ToolContext, amount: int) -> dict[str, Any]:
        line = {
            "run_id": ctx.run_id,
            "call_id": ctx.call_id,
            "epoch": ctx.epoch,
            "effect": effect_name,
            "key": ctx.idempotency_key,
            "pid": os.getpid(),
        }
        append_line(ledger, {**line, "ev": "start", "t": time.time()})
        try:
            if ARMED:
                await _just_renewed(ctx)
            crash_point("in_call")
            await anyio.sleep(tool_seconds)
        finally:
            # A call cancelled (its lease lost, its worker draining) ends here too:
            # only a killed process leaves an execution without an end.
            append_line(ledger, {**line, "ev": "end", "t": time.time()})
        return {"applied": amount}

    return act


def build_app(ledger: Path, *, tool_seconds: float = 0.05) -> App:
    """The three agents (named after their effects), their tools writing to ``ledger``."""
    provider = ScriptedProvider(_reply, timeout_seconds=PROVIDER_TIMEOUT_SECONDS)
    return App(
        [Agent(name, provider, tools=[_make_tool(ledger, name, tool_seconds)]) for name in EFFECTS]
    )
