"""Durable tool steps per second on PostgreSQL beside SQLite, in one worker process.

The peers workload (``bench/peers/leaseward_workload.py``): N runs of a scripted
agent that calls a read-only tool K times and then answers, so a run journals
2K+1 rows. Timed, from before the first submit until every run has finished:
N ``rt.submit`` calls at once, then ``rt.wait`` on each run in turn. Each sample
opens a fresh store: a SQLite file (WAL, ``synchronous=full``) or a fresh
PostgreSQL database on the server ``--store`` names (``synchronous_commit`` as
the server has it, ``on`` by default; the script prints it). The two stores
alternate, sample after sample, so drift on a shared machine falls on both.

Besides wall-clock steps/s, each sample reports the process's CPU seconds
(``time.process_time``, SQLite's thread included) per tool step, the Persister's
requests per transaction.

    .venv/bin/python bench/pg_steps.py
    .venv/bin/python bench/pg_steps.py --concurrency 100 --repeat 5 --steps 10
    .venv/bin/python bench/pg_steps.py --json /tmp/pg-steps.json

A benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import attrs
from pg_support import fresh_database

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    RunState,
    Runtime,
    ScriptedProvider,
    StepKind,
    StepStatus,
    ToolCall,
    ToolContext,
    tool,
)

AGENT = "bench"
WAIT_TIMEOUT_SECONDS = 600.0
POLL_INTERVAL_SECONDS = 0.05
DEFAULT_STORE = "postgresql://postgres@127.0.0.1:5432/postgres"


@tool
async def lookup(ctx: ToolContext, key: str) -> str:
    """A read-only tool that does no work, so the journal is what is measured."""
    return key


def make_app(steps_per_run: int) -> App:
    def reply(request: ProviderRequest) -> ProviderReply:
        turn = sum(1 for message in request.messages if message.role is Role.ASSISTANT)
        if turn < steps_per_run:
            return ProviderReply(
                tool_calls=(ToolCall(lookup.name, {"key": f"k{turn}"}, f"call-{turn}"),)
            )
        return ProviderReply(text="done")

    agent = Agent(AGENT, ScriptedProvider(reply), tools=[lookup], max_steps=steps_per_run + 1)
    return App(agents=[agent])


@attrs.frozen
class Sample:
    store: str
    concurrency: int
    steps: int
    completed: int
    seconds: float
    cpu_seconds: float
    transactions: int
    requests: int

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds

    @property
    def cpu_us_per_step(self) -> float:
        return 1e6 * self.cpu_seconds / max(self.steps, 1)


@asynccontextmanager
async def store_url(kind: str, admin_url: str) -> AsyncIterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="lw-pg-steps-") as tmp:
            yield f"sqlite:///{Path(tmp) / 'bench.db'}?synchronous=full"
    else:
        async with fresh_database(admin_url, "steps") as url:
            yield url


async def measure(kind: str, admin_url: str, concurrency: int, steps_per_run: int) -> Sample:
    app = make_app(steps_per_run)
    run_ids: list[str] = [""] * concurrency
    async with (
        store_url(kind, admin_url) as url,
        Runtime.open(
            url, app, concurrency=concurrency, poll_interval_seconds=POLL_INTERVAL_SECONDS
        ) as rt,
    ):

        async def submit(index: int) -> None:
            run_ids[index] = await rt.submit(AGENT, {"n": index})

        cpu = time.process_time()
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for index in range(concurrency):
                tg.start_soon(submit, index)
        infos = [await rt.wait(run_id, timeout=WAIT_TIMEOUT_SECONDS) for run_id in run_ids]
        seconds = time.perf_counter() - started
        cpu_seconds = time.process_time() - cpu
        stats = rt.supervisor.persister.stats
        tool_steps = 0
        for run_id in run_ids:
            tool_steps += sum(
                1
                for step in await rt.steps(run_id)
                if step.kind is StepKind.TOOL and step.status is StepStatus.SUCCEEDED
            )
        return Sample(
            store=kind,
            concurrency=concurrency,
            steps=tool_steps,
            completed=sum(1 for info in infos if info.state is RunState.COMPLETED),
            seconds=seconds,
            cpu_seconds=cpu_seconds,
            transactions=stats.batches,
            requests=stats.items,
        )


async def synchronous_commit(admin_url: str) -> str:
    connection = await asyncpg.connect(admin_url)
    try:
        return str(await connection.fetchval("SHOW synchronous_commit"))
    finally:
        await connection.close()


def summary(samples: Sequence[Sample]) -> dict[str, Any]:
    by_store: dict[str, dict[str, Any]] = {}
    for kind in ("sqlite", "postgresql"):
        mine = [s for s in samples if s.store == kind]
        if not mine:
            continue
        by_store[kind] = {
            "steps_per_second_median": statistics.median(s.steps_per_second for s in mine),
            "steps_per_second_all": [round(s.steps_per_second, 1) for s in mine],
            "cpu_us_per_step_median": statistics.median(s.cpu_us_per_step for s in mine),
            "requests_per_transaction": statistics.median(
                s.requests / max(s.transactions, 1) for s in mine
            ),
        }
    if len(by_store) == 2:
        by_store["postgresql_over_sqlite"] = (
            by_store["postgresql"]["steps_per_second_median"]
            / by_store["sqlite"]["steps_per_second_median"]
        )
    return by_store


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=DEFAULT_STORE, help="a PostgreSQL server's URL")
    parser.add_argument("--concurrency", type=int, default=100, help="N (default %(default)s)")
    parser.add_argument("--steps", type=int, default=10, help="K (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="pairs (default %(default)s)")
    parser.add_argument("--stores", default="sqlite,postgresql", help="which to measure")
    parser.add_argument("--json", type=Path, help="also write the samples and summary here")
    args = parser.parse_args(argv)
    kinds = [kind.strip() for kind in args.stores.split(",") if kind.strip()]
    print(f"synchronous_commit = {await synchronous_commit(args.store)}")
    samples: list[Sample] = []
    for repetition in range(args.repeat):
        for kind in kinds:
            sample = await measure(kind, args.store, args.concurrency, args.steps)
            samples.append(sample)
            print(
                f"#{repetition + 1} {kind:<10} N={sample.concurrency} "
                f"{sample.steps_per_second:8.0f} steps/s  {sample.seconds:6.2f} s  "
                f"cpu {sample.cpu_us_per_step:6.0f} us/step  "
                f"{sample.requests / max(sample.transactions, 1):5.1f} req/tx  "
                f"completed {sample.completed}/{sample.concurrency}",
                flush=True,
            )
    result = summary(samples)
    for kind in kinds:
        figures = result.get(kind)
        if figures is not None:
            print(
                f"{kind:<10} median {figures['steps_per_second_median']:8.0f} steps/s  "
                f"cpu {figures['cpu_us_per_step_median']:6.0f} us/step"
            )
    if "postgresql_over_sqlite" in result:
        print(f"postgresql / sqlite: {result['postgresql_over_sqlite']:.2f}x")
    if args.json is not None:
        args.json.write_text(
            json.dumps({"samples": [attrs.asdict(s) for s in samples], "summary": result}, indent=2)
        )


if __name__ == "__main__":
    anyio.run(main)
