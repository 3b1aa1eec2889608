"""A worker process for the multi-process tests: works the queue until it is empty.

Usage: pool_worker.py DB_URL WORKER_ID CALLS_FILE
Every execution of the write tool appends "run_id worker_id epoch" to CALLS_FILE.
"""

from __future__ import annotations

import logging
import os
import sys

import anyio
import structlog

from runtime import (
    Agent,
    App,
    ProviderReply,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)


def build_app(calls_file: str, worker_id: str) -> App:
    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=5.0)
    async def charge(ctx: ToolContext, amount: int) -> int:
        with open(calls_file, "a") as out:
            out.write(f"{ctx.run_id} {worker_id} {ctx.epoch}\n")
            out.flush()
            os.fsync(out.fileno())
        return amount

    provider = ScriptedProvider(
        [
            ProviderReply(tool_calls=[ToolCall("charge", {"amount": 1}, "c")]),
            ProviderReply(text="paid"),
        ]
    )
    return App([Agent("payer", provider, tools=[charge])])


async def work(url: str, worker_id: str, calls_file: str) -> None:
    app = build_app(calls_file, worker_id)
    async with Runtime.open(
        url,
        app,
        concurrency=8,
        lease_seconds=2.0,
        reap_interval_seconds=0.2,
        poll_interval_seconds=0.02,
        deadline_margin_seconds=0.1,
        worker_id=worker_id,
    ) as rt:
        while True:
            await anyio.sleep(0.1)
            live = [
                *await rt.runs(state=RunState.QUEUED, limit=1),
                *await rt.runs(state=RunState.RUNNING, limit=1),
            ]
            if not live:
                return


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    anyio.run(work, sys.argv[1], sys.argv[2], sys.argv[3])
