"""A worker process for the multi-process tests: works the queue until it is empty.

Usage: pool_worker.py STORE_URL WORKER_ID CALLS_FILE [EVENTS_FILE]
Every execution of the write tool appends "run_id worker_id epoch" to CALLS_FILE.
With EVENTS_FILE, every claim, lost lease, reap and drain with runs in hand this worker
logs is appended to it as a JSON line (event, run_id, epoch, worker_id, lease_owner,
time), fsynced, so that a test can tell who held which run at which epoch even for a
worker it SIGKILLed.
POOL_WORKER_CHARGE_SECONDS makes each write take that long (default 0).
POOL_WORKER_BARRIER=DIR:N makes the worker wait, before it claims anything, until N
workers have checked in in DIR: so that a slow start cannot leave one worker all the work.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import MutableMapping
from typing import Any

import anyio
import structlog

from leaseward import (
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

RECORDED_EVENTS = {"run.claimed", "lease.lost", "lease.reaped", "worker.draining"}


def build_app(calls_file: str, worker_id: str) -> App:
    charge_seconds = float(os.environ.get("POOL_WORKER_CHARGE_SECONDS", "0"))

    # Short deadlines: a lease covers the next call's deadline, so they bound how long
    # a SIGKILLed worker's runs stay leased before a survivor reaps them.
    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=2.0)
    async def charge(ctx: ToolContext, amount: int) -> int:
        with open(calls_file, "a") as out:
            out.write(f"{ctx.run_id} {worker_id} {ctx.epoch}\n")
            out.flush()
            os.fsync(out.fileno())
        if charge_seconds:
            await anyio.sleep(charge_seconds)
        return amount

    provider = ScriptedProvider(
        [
            ProviderReply(tool_calls=[ToolCall("charge", {"amount": 1}, "c")]),
            ProviderReply(text="paid"),
        ],
        timeout_seconds=2.0,
    )
    return App([Agent("payer", provider, tools=[charge])])


async def barrier(worker_id: str) -> None:
    spec = os.environ.get("POOL_WORKER_BARRIER")
    if not spec:
        return
    directory, count = spec.rsplit(":", 1)
    here = anyio.Path(directory)
    await (here / worker_id).touch()
    with anyio.fail_after(30):
        # Other processes check in: no in-process event can tell of them.
        while len([p async for p in here.iterdir()]) < int(count):  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def work(url: str, worker_id: str, calls_file: str) -> None:
    app = build_app(calls_file, worker_id)
    await barrier(worker_id)
    async with Runtime.open(
        url,
        app,
        concurrency=8,
        lease_seconds=2.0,
        reap_interval_seconds=0.2,
        poll_interval_seconds=0.02,
        worker_id=worker_id,
    ) as rt:
        while True:
            await anyio.sleep(0.1)
            # One statement, so one snapshot: read in two, a run reaped between the
            # reads is in neither (running, then queued), and a worker that stopped
            # then would release the runs it had just claimed for another to take.
            counts = await rt.store.count_runs()
            if not counts.get(RunState.QUEUED) and not counts.get(RunState.RUNNING):
                return


def record_events(events_file: str, worker_id: str) -> None:
    out = open(events_file, "a")  # noqa: SIM115 -- open for the life of the process

    def keep(_: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        if event_dict.get("event") in RECORDED_EVENTS:
            line = {
                "event": event_dict["event"],
                "run_id": event_dict.get("run_id"),
                "epoch": event_dict.get("epoch"),
                "worker_id": event_dict.get("worker_id", worker_id),
                # The reaper names the expired lease's holder (once as worker_id).
                "lease_owner": event_dict.get("lease_owner", event_dict.get("worker_id")),
                "by": worker_id,
                "time": time.time(),
            }
            out.write(json.dumps(line) + "\n")
            out.flush()
            os.fsync(out.fileno())
        if method in ("warning", "error", "critical", "exception"):
            return event_dict
        raise structlog.DropEvent

    # leaseward's events go through the configured chain once their logger lets them out.
    logging.getLogger("leaseward").setLevel(logging.INFO)
    structlog.configure(processors=[keep, structlog.processors.KeyValueRenderer()])


if __name__ == "__main__":
    if len(sys.argv) > 4:
        record_events(sys.argv[4], sys.argv[2])
    anyio.run(work, sys.argv[1], sys.argv[2], sys.argv[3])
