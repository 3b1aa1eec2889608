"""A submit loop beside N busy leaseward runs: how long one ``await rt.submit(...)`` takes.

The approach of ``bench/step_cost.py --submit-loop``, as a workload of its own:
on a fresh SQLite file (WAL, ``synchronous=FULL`` in the store URL),
``Runtime.open(concurrency=N)`` and N background runs of a NON_IDEMPOTENT_WRITE
tool that go on for longer than the loop (every call commits its intent and
its outcome), submitted with ``rt.submit_many``. Half a second later, once
they are claimed and stepping, one task calls ``await rt.submit(...)`` one
after another for ``--seconds``, timing each call. The loop's runs are of an
agent that answers at once; while the N background runs hold every slot they
stay queued. With ``--runs 0`` nothing else runs (``concurrency=1``), for
scale: the loop's runs are then claimed and finished beside it.

Afterwards the background runs are cancelled. Run with leaseward's venv;
prints one JSON line.
"""

from __future__ import annotations

import argparse
import time
from importlib.metadata import version
from pathlib import Path

import anyio
from common import emit, waits

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)

BUSY = "busy"
QUICK = "quick"
POLL_INTERVAL_SECONDS = 0.05
SETTLE_SECONDS = 0.5
FOREVER = 10**6


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def record(ctx: ToolContext, key: str) -> str:
    """A write that does no work: each call still commits its intent and its outcome."""
    return key


def make_app() -> App:
    def busy(request: ProviderRequest) -> ProviderReply:
        turn = sum(1 for message in request.messages if message.role is Role.ASSISTANT)
        return ProviderReply(
            tool_calls=(ToolCall(record.name, {"key": f"k{turn}"}, f"call-{turn}"),)
        )

    return App(
        agents=[
            Agent(BUSY, ScriptedProvider(busy), tools=[record], max_steps=FOREVER),
            Agent(QUICK, ScriptedProvider(lambda request: ProviderReply(text="done"))),
        ]
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, metavar="N", help="background runs")
    parser.add_argument("--seconds", type=float, default=3.0, help="the loop's window")
    parser.add_argument("--db", type=Path, required=True, help="a fresh SQLite file")
    args = parser.parse_args()
    if args.runs < 0 or args.seconds <= 0 or args.db.exists():
        raise SystemExit("--runs >= 0, --seconds > 0, and --db must not exist yet")
    url = f"sqlite:///{args.db.resolve()}?synchronous=full"
    latencies: list[float] = []
    async with Runtime.open(
        url, make_app(), concurrency=max(args.runs, 1), poll_interval_seconds=POLL_INTERVAL_SECONDS
    ) as rt:
        active = await rt.submit_many(BUSY, [{"n": index} for index in range(args.runs)])
        await anyio.sleep(SETTLE_SECONDS)
        stats = rt.supervisor.persister.stats
        batches = stats.batches
        started = time.perf_counter()
        while time.perf_counter() - started < args.seconds:
            before = time.perf_counter()
            await rt.submit(QUICK, {"loop": len(latencies)})
            latencies.append(time.perf_counter() - before)
        elapsed = time.perf_counter() - started
        transactions = stats.batches - batches
        running = [(await rt.get(run_id)).state for run_id in active].count(RunState.RUNNING)
        for run_id in active:
            await rt.cancel(run_id)
    emit(
        {
            "system": "submit-loop" if args.runs else "submit-loop-idle",
            "background_runs": args.runs,
            "background_running_at_end": running,
            "submits": len(latencies),
            "seconds": elapsed,
            "submits_per_second": len(latencies) / elapsed,
            "transactions_per_second": transactions / elapsed,
            "wait": waits(latencies, "each await rt.submit(...)"),
            "config": {
                "version": version("leaseward"),
                "store": "sqlite, ?synchronous=full",
                "background": f"{args.runs} runs of a NON_IDEMPOTENT_WRITE tool",
            },
        }
    )


if __name__ == "__main__":
    anyio.run(main)
