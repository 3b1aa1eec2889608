"""Agents whose calls wait for a person, and a worker process that serves them.

Run as ``python approval_worker.py <store_url> <ledger_dir>``: it opens a Runtime on
the store serving :func:`build_app` until it is killed (the tests arm a crash point
through ``LEASEWARD_TEST_CRASH_POINT``, or SIGKILL it). Every execution of a tool
appends a JSON line to ``<ledger_dir>/calls.jsonl``, fsynced, with the pid that ran
it, so a test counts executions across processes. The test process builds the same
app with the same ledger.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    ask_human,
    tool,
)
from tests.integration.crash_worker import append_line, read_lines

CALLS_FILE = "calls.jsonl"
LOG_FILE = "worker.log"
LEASE_SECONDS = 1.0
EXPIRY_SECONDS = 0.3
RACE_EXPIRY_SECONDS = 1.0


def last_tool_output(request: ProviderRequest) -> ProviderReply:
    """The model's last turn: it answers with what its tools returned, in order."""
    outputs = [m.content for m in request.messages if m.role is Role.TOOL]
    return ProviderReply(text=" | ".join(str(o) for o in outputs))


def one_turn(*calls: ToolCall) -> ScriptedProvider:
    return ScriptedProvider([ProviderReply(tool_calls=list(calls)), last_tool_output])


def executions(ledger: Path, run_id: str | None = None) -> list[dict[str, Any]]:
    lines = read_lines(ledger / CALLS_FILE)
    return [line for line in lines if run_id is None or line["run_id"] == run_id]


def build_app(ledger: Path) -> App:
    calls_path = ledger / CALLS_FILE

    def record(ctx: ToolContext, name: str, amount: int) -> dict[str, Any]:
        append_line(
            calls_path,
            {
                "run_id": ctx.run_id,
                "epoch": ctx.epoch,
                "call_id": ctx.call_id,
                "tool": name,
                "amount": amount,
                "pid": os.getpid(),
            },
        )
        return {"charged": amount}

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    async def charge(ctx: ToolContext, amount: int) -> dict[str, Any]:
        return record(ctx, "charge", amount)

    @tool(effect=ToolEffect.IDEMPOTENT_WRITE, requires_approval=True)
    async def refund(ctx: ToolContext, amount: int) -> dict[str, Any]:
        return record(ctx, "refund", amount)

    @tool(
        effect=ToolEffect.NON_IDEMPOTENT_WRITE,
        requires_approval=lambda arguments: arguments["amount"] > 100,
    )
    async def pay(ctx: ToolContext, amount: int) -> dict[str, Any]:
        return record(ctx, "pay", amount)

    @tool(
        effect=ToolEffect.NON_IDEMPOTENT_WRITE,
        requires_approval=True,
        approval_timeout_seconds=EXPIRY_SECONDS,
    )
    async def wire(ctx: ToolContext, amount: int) -> dict[str, Any]:
        return record(ctx, "wire", amount)

    @tool
    async def lookup(ctx: ToolContext, amount: int) -> dict[str, Any]:
        return record(ctx, "lookup", amount)

    return App(
        [
            Agent("payer", one_turn(ToolCall("charge", {"amount": 5}, "call-1")), tools=[charge]),
            Agent(
                "refunder", one_turn(ToolCall("refund", {"amount": 3}, "call-1")), tools=[refund]
            ),
            Agent(
                "pair",
                one_turn(
                    ToolCall("lookup", {"amount": 1}, "look"),
                    ToolCall("charge", {"amount": 5}, "first"),
                    ToolCall("charge", {"amount": 7}, "second"),
                ),
                tools=[charge, lookup],
            ),
            Agent(
                "policy",
                one_turn(
                    ToolCall("pay", {"amount": 5}, "small"),
                    ToolCall("pay", {"amount": 500}, "big"),
                ),
                tools=[pay],
            ),
            Agent("expiring", one_turn(ToolCall("wire", {"amount": 9}, "call-1")), tools=[wire]),
            Agent(
                "agent_expiry",
                one_turn(ToolCall("charge", {"amount": 4}, "call-1")),
                tools=[charge],
                approval_timeout_seconds=EXPIRY_SECONDS,
            ),
            Agent(
                "pair_expiring",
                one_turn(
                    ToolCall("wire", {"amount": 1}, "first"),
                    ToolCall("wire", {"amount": 2}, "second"),
                    ToolCall("charge", {"amount": 3}, "late"),
                ),
                tools=[wire, charge],
                approval_timeout_seconds=3600.0,
            ),
            Agent(
                "expire_then_ask",
                ScriptedProvider(
                    [
                        ProviderReply(tool_calls=[ToolCall("wire", {"amount": 8}, "call-1")]),
                        ProviderReply(
                            tool_calls=[ToolCall("ask_human", {"question": "Retry?"}, "ask-1")]
                        ),
                        last_tool_output,
                    ]
                ),
                tools=[wire, ask_human],
            ),
            Agent(
                "race",
                one_turn(ToolCall("charge", {"amount": 6}, "call-1")),
                tools=[charge],
                approval_timeout_seconds=RACE_EXPIRY_SECONDS,
            ),
            Agent(
                "asker",
                one_turn(ToolCall("ask_human", {"question": "Which colour?"}, "ask-1")),
                tools=[ask_human],
            ),
            # Refused, the model asks again for more, under the call id it used before.
            Agent(
                "escalating",
                ScriptedProvider(
                    [
                        ProviderReply(tool_calls=[ToolCall("charge", {"amount": 50}, "call-1")]),
                        ProviderReply(tool_calls=[ToolCall("charge", {"amount": 5000}, "call-1")]),
                        last_tool_output,
                    ]
                ),
                tools=[charge],
            ),
        ]
    )


async def main(store_url: str, ledger: Path) -> None:
    async with Runtime.open(
        store_url,
        build_app(ledger),
        lease_seconds=LEASE_SECONDS,
        reap_interval_seconds=0.05,
        poll_interval_seconds=0.02,
        deadline_margin_seconds=0.2,
        worker_id=f"approval-worker:{os.getpid()}",
    ):
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    directory = Path(sys.argv[2])
    log_file = (directory / LOG_FILE).open("a", encoding="utf-8")
    logging.basicConfig(stream=log_file, format="%(levelname)s %(name)s %(message)s")
    logging.getLogger("leaseward").setLevel(logging.DEBUG)
    anyio.run(main, sys.argv[1], directory)
