"""A worker process that the lease tests pause (SIGSTOP) and kill (SIGKILL) mid-call.

Run as ``python paused_worker.py <db_url> <marker_dir> <lookup_seconds>``. It
opens a Runtime on the store with a 1 s lease, submits one run and prints
``run_id=<id>``. The run looks something up (a read-only call lasting
``lookup_seconds``), then charges a card (a non-idempotent write), then answers.
Every call appends a JSON line to ``<marker_dir>/calls.jsonl`` when it starts,
flushed and fsynced, so the parent sees which process started what, under
which epoch, and when.

The test process builds the same agent with :func:`build_app` and a short
lookup, to take the run over.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import anyio

from leaseward import (
    Agent,
    App,
    ProviderReply,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from tests.integration.crash_worker import append_line

AGENT = "pauser"
CALLS_FILE = "calls.jsonl"
LOG_FILE = "worker.log"
LEASE_SECONDS = 1.0
CALL_TIMEOUT_SECONDS = 60.0


def build_app(marker_dir: Path, lookup_seconds: float) -> App:
    calls_path = marker_dir / CALLS_FILE

    def started(ctx: ToolContext, name: str) -> None:
        record = {
            "tool": name,
            "run_id": ctx.run_id,
            "epoch": ctx.epoch,
            "pid": os.getpid(),
            "at": time.time(),
        }
        append_line(calls_path, record)

    @tool(effect=ToolEffect.READ_ONLY, timeout_seconds=CALL_TIMEOUT_SECONDS)
    async def lookup(ctx: ToolContext, order: str) -> str:
        started(ctx, "lookup")
        await anyio.sleep(lookup_seconds)
        return "card on file"

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=CALL_TIMEOUT_SECONDS)
    async def charge(ctx: ToolContext, amount: int) -> str:
        started(ctx, "charge")
        return "charged"

    script = ScriptedProvider(
        [
            ProviderReply(tool_calls=[ToolCall("lookup", {"order": "A-1"}, "call-1")]),
            ProviderReply(tool_calls=[ToolCall("charge", {"amount": 5}, "call-2")]),
            ProviderReply(text="done"),
        ],
        timeout_seconds=CALL_TIMEOUT_SECONDS,
    )
    return App([Agent(AGENT, script, tools=[lookup, charge])])


async def main(db_url: str, marker_dir: Path, lookup_seconds: float) -> None:
    async with Runtime.open(
        db_url,
        build_app(marker_dir, lookup_seconds),
        lease_seconds=LEASE_SECONDS,
        # As seldom as a reaper may: the test's own worker is the one that reaps.
        reap_interval_seconds=LEASE_SECONDS * 0.99,
        poll_interval_seconds=0.02,
        worker_id=f"paused-worker:{os.getpid()}",
    ) as rt:
        run_id = await rt.submit(AGENT, "A-1")
        print(f"run_id={run_id}", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: paused_worker.py <db_url> <marker_dir> <lookup_seconds>")
    directory = Path(sys.argv[2])
    log_file = (directory / LOG_FILE).open("a", encoding="utf-8")
    logging.basicConfig(stream=log_file, format="%(levelname)s %(name)s %(message)s")
    logging.getLogger("leaseward").setLevel(logging.DEBUG)
    anyio.run(main, sys.argv[1], directory, float(sys.argv[3]))
