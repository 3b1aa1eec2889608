"""A traced worker process: it writes every span it ends to a file, and may be SIGKILLed.

Run as ``python traced_worker.py <store_url> <marker_dir> submit`` or ``... resume
<run_id>``. ``submit`` submits one run of ``AGENT`` inside a span of its own, prints
``run_id=<id>`` and serves it: the first tool call is made, and the second provider
turn hangs (after writing ``hung`` to the marker directory) for the parent to kill
the process. ``resume`` reaps the killed lease, finishes the run, prints
``state=<state>`` and exits. Spans go to ``<marker_dir>/spans-<pid>.jsonl``, each
on disk once it ends.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from opentelemetry import trace

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    Runtime,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from tests.integration.crash_worker import append_line
from tests.integration.tracing_support import SpansFile

AGENT = "crossing"
HUNG_FILE = "hung"
LEASE_SECONDS = 1.0


class HangingProvider:
    """Turn 0 asks for a lookup; turn 1 hangs where ``hang`` says, else answers "done"."""

    model = "m-cross"

    def __init__(self, marker_dir: Path, *, hang: bool) -> None:
        self._marker_dir = marker_dir
        self._hang = hang

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        turn = sum(1 for message in request.messages if message.role is Role.ASSISTANT)
        if turn == 0:
            return ProviderReply(tool_calls=[ToolCall("lookup", {"order": 1}, "call-lookup")])
        if self._hang:
            append_line(self._marker_dir / HUNG_FILE, {"pid": os.getpid()})
            await anyio.sleep_forever()
        return ProviderReply(text="done")


def build_app(marker_dir: Path, *, hang: bool) -> App:
    @tool(effect=ToolEffect.READ_ONLY)
    async def lookup(ctx: ToolContext, order: int) -> dict[str, int]:
        return {"order": order}

    return App([Agent(AGENT, HangingProvider(marker_dir, hang=hang), tools=[lookup])])


async def submit(store_url: str, marker_dir: Path) -> None:
    async with Runtime.open(
        store_url,
        build_app(marker_dir, hang=True),
        lease_seconds=LEASE_SECONDS,
        reap_interval_seconds=0.05,
        poll_interval_seconds=0.02,
        deadline_margin_seconds=0.2,
        worker_id=f"traced-worker:{os.getpid()}",
    ) as rt:
        with trace.get_tracer("tests").start_as_current_span("submit"):
            run_id = await rt.submit(AGENT, {"order": 1})
        print(f"run_id={run_id}", flush=True)
        await anyio.sleep_forever()


async def resume(store_url: str, marker_dir: Path, run_id: str) -> None:
    # One runtime reaps, the other claims (as the crash tests recover).
    async with (
        Runtime.open(store_url, App([]), reap_interval_seconds=0.05, worker_id="reaper"),
        Runtime.open(
            store_url,
            build_app(marker_dir, hang=False),
            lease_seconds=30.0,
            reap_interval_seconds=29.0,
            poll_interval_seconds=0.02,
            worker_id=f"traced-worker:{os.getpid()}",
        ) as rt,
    ):
        run = await rt.wait(run_id, timeout=30)
    print(f"state={run.state.value}", flush=True)


def main() -> None:
    store_url, marker_dir, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    provider = SpansFile(marker_dir / f"spans-{os.getpid()}.jsonl").install()
    try:
        if mode == "submit":
            anyio.run(submit, store_url, marker_dir)
        else:
            anyio.run(resume, store_url, marker_dir, sys.argv[4])
    finally:
        provider.shutdown()


if __name__ == "__main__":
    main()
