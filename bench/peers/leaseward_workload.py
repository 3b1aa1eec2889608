"""leaseward's side of the peer comparison: N concurrent runs of K tool steps.

Like ``bench/steps.py``'s variants: a ``ScriptedProvider`` agent asks for one
call of a tool per turn, K times, then answers. With a read-only tool
(``leaseward-read``) a run journals 2K+1 rows (K+1 provider steps, K tool
steps); with ``--write`` the tool is a NON_IDEMPOTENT_WRITE (``leaseward-write``),
so every call commits its intent before it runs and its outcome after.

Untimed: ``Runtime.open`` on a fresh SQLite file (WAL, ``synchronous=FULL``
in the store URL) or, with ``--pg-url``, on a fresh PostgreSQL database
(created here, dropped afterwards), which creates the schema and starts the
actors. Right after the open, ``rt.supervisor.persister.persist`` is wrapped
(as ``bench/steps.py`` does) to time every request that carries journal rows:
how long a run waits for each durable write, queueing included. Timed, from
before the first submit until every run has finished: N ``rt.submit`` calls
at once in a task group (one call per run, as an application makes them),
then ``rt.wait_all`` on the runs. The garbage collector's time in that window is
given too (``gc_seconds``), with the collector as ``Runtime.open`` sets it, or with
``--default-collector`` as the process has it. Afterwards, untimed, the journal
rows are counted with ``rt.steps``.

Run with leaseward's venv (``.venv/bin/python``); prints one JSON line.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path

import anyio
from common import add_pg_url, build_parser, check_args, emit, journal_mode, result, waits

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    RunState,
    Runtime,
    ScriptedProvider,
    StepKind,
    StepStatus,
    Tool,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.runtime.commits import CommitOutcome
from leaseward.storage.protocol import BatchItem

# bench/pg_support.py and bench/collector_pauses.py, one folder up: the fresh databases
# every PostgreSQL benchmark uses, and the collector's time.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from collector_pauses import CollectorPauses
from pg_support import fresh_database

AGENT = "bench"
WAIT_TIMEOUT_SECONDS = 600.0
POLL_INTERVAL_SECONDS = 0.05


@tool
async def lookup(ctx: ToolContext, key: str) -> str:
    """A read-only tool that does no work, so the journal is what is measured."""
    return key


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def record(ctx: ToolContext, key: str) -> str:
    """A write that does no work: each call still commits its intent and its outcome."""
    return key


def make_app(used: Tool, steps_per_run: int) -> App:
    def reply(request: ProviderRequest) -> ProviderReply:
        # The input, then per turn the model's message and the call's result: counted
        # so rather than by reading every message, so the script's own cost stays flat
        # as the conversation grows (DBOS's and LangGraph's workloads have no model).
        turn = (len(request.messages) - 1) // 2
        if turn < steps_per_run:
            return ProviderReply(
                tool_calls=(ToolCall(used.name, {"key": f"k{turn}"}, f"call-{turn}"),)
            )
        return ProviderReply(text="done")

    agent = Agent(AGENT, ScriptedProvider(reply), tools=[used], max_steps=steps_per_run + 1)
    return App(agents=[agent])


def time_journal_writes(rt: Runtime) -> list[float]:
    """Seconds each journal write waits, for every run this Runtime starts from now on.

    Each RunActor is handed ``supervisor.persister.persist`` when the Supervisor
    starts it, so replacing the attribute before the first claim puts the wrapper
    between every run and the Persister. Lease extensions, claims and settlements
    without rows pass through untimed.
    """
    persister = rt.supervisor.persister
    persist = persister.persist
    seconds: list[float] = []

    async def timed(item: BatchItem) -> CommitOutcome:
        started = time.perf_counter()
        outcome = await persist(item)
        if item.steps:
            seconds.append(time.perf_counter() - started)
        return outcome

    persister.persist = timed  # type: ignore[method-assign]
    return seconds


@asynccontextmanager
async def store_url(args: argparse.Namespace) -> AsyncIterator[str]:
    if args.pg_url is None:
        yield f"sqlite:///{args.db.resolve()}?synchronous=full"
        return
    async with fresh_database(args.pg_url, "peers") as url:
        yield url


async def main() -> None:
    parser = build_parser(__doc__.splitlines()[0])
    add_pg_url(parser)
    parser.add_argument(
        "--write",
        action="store_true",
        help="a NON_IDEMPOTENT_WRITE tool (intent and outcome committed), not a read",
    )
    parser.add_argument(
        "--no-group-commit",
        action="store_true",
        help="Runtime.open(group_commit=False): one commit per journal row",
    )
    parser.add_argument(
        "--default-collector",
        action="store_true",
        help="Runtime.open(tune_collector=False): CPython's collector thresholds as they are",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=POLL_INTERVAL_SECONDS,
        help="the Runtime's poll_interval_seconds (default: %(default)s, as bench/steps.py)",
    )
    args = parser.parse_args()
    check_args(args)
    group_commit = not args.no_group_commit
    app = make_app(record if args.write else lookup, args.steps)
    run_ids: list[str] = [""] * args.concurrency

    async with store_url(args) as url:
        opened = time.perf_counter()
        async with Runtime.open(
            url,
            app,
            concurrency=args.concurrency,
            poll_interval_seconds=args.poll_interval,
            group_commit=group_commit,
            tune_collector=not args.default_collector,
        ) as rt:
            open_seconds = time.perf_counter() - opened
            journal_waits = time_journal_writes(rt)

            async def submit(index: int) -> None:
                run_ids[index] = await rt.submit(AGENT, {"n": index})

            with CollectorPauses() as collector:
                started = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for index in range(args.concurrency):
                        tg.start_soon(submit, index)
                submitted = time.perf_counter() - started
                # One waiter for all: it reads the runs left unfinished together, as a
                # caller of many would, so the clock stops soon after the last run
                # settles instead of after a read of each run in turn.
                infos = await rt.wait_all(run_ids, timeout=WAIT_TIMEOUT_SECONDS)
                seconds = time.perf_counter() - started

            stats = rt.supervisor.persister.stats
            rows = 0
            tool_rows = 0
            for run_id in run_ids:
                journal = await rt.steps(run_id)
                rows += len(journal)
                tool_rows += sum(
                    1
                    for step in journal
                    if step.kind is StepKind.TOOL and step.status is StepStatus.SUCCEEDED
                )
            persister = {
                "commits": stats.items,
                "transactions": stats.batches,
                "largest_batch": stats.largest_batch,
            }

    mode = "group commit" if group_commit else "one commit per row"
    kind = "write" if args.write else "read"
    name = f"leaseward-{kind}" if group_commit else "leaseward-no-group-commit"
    emit(
        result(
            system=f"{name}-pg" if args.pg_url else name,
            args=args,
            completed=sum(1 for info in infos if info.state is RunState.COMPLETED),
            steps=tool_rows,
            rows=rows,
            seconds=seconds,
            config={
                "version": version("leaseward"),
                "store": "postgresql, a fresh database, one worker process"
                if args.pg_url
                else "sqlite, ?synchronous=full",
                "journal_mode": "-" if args.pg_url else journal_mode(args.db),
                "synchronous": "-" if args.pg_url else "FULL (store URL)",
                "group_commit": group_commit,
                "tool": "NON_IDEMPOTENT_WRITE (intent + outcome)" if args.write else "read-only",
                "durable": f"journal rows (provider and tool steps), {mode}",
                "collector": "as the process has it"
                if args.default_collector
                else "tuned by Runtime.open",
            },
            extra={
                "open_seconds": open_seconds,
                "submit_seconds": submitted,
                "persister": persister,
                "gc_seconds": collector.seconds,
                "gc_collections": collector.collections,
                "journal_writes": len(journal_waits),
                "journal_writes_per_second": len(journal_waits) / seconds if seconds else 0.0,
                "wait": waits(
                    journal_waits, "each persist request carrying journal rows, queueing included"
                ),
            },
        )
    )


if __name__ == "__main__":
    anyio.run(main)
