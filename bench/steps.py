"""Durable journal steps per second, with the Persister's group commit on and off.

For each concurrency level N (default 1, 10, 100) this submits N runs, opens a
Runtime with ``concurrency=N`` so they all run at once, and measures how many
journal rows per second become durable until every run has finished. Each
level is measured twice in the same invocation, with ``group_commit=True`` and
``group_commit=False``, each in a fresh SQLite file (WAL, ``synchronous=FULL``
unless ``--synchronous`` says otherwise).

Every run is scripted: the provider asks for one tool call per turn, K times
(``--steps-per-run``), then finishes. A run therefore journals 2K+1 rows: K+1
provider steps and K tool steps. Two variants:

* ``read``  -- a read-only tool: each tool step is one fail-soft commit.
* ``write`` -- an ``IDEMPOTENT_WRITE`` tool: each tool step commits its intent
  before the call and its outcome after it (two commits, one row).

Besides the rows, a run sends the Persister one request to extend its lease
before the first provider call and one to settle; ``commits`` in the detail
table counts every request the Persister committed (its ``stats.items``).

Runs are submitted through a ``Client`` before the Runtime opens, so the
measured time is the runtime's work only (claim, steps, settle), not submits.

With ``--store postgresql://user@host/maintenance_db`` the same is measured on
PostgreSQL: each sample runs in a fresh database created on that server (and
dropped after), so the URL names a database to create them from, not one to fill.

This is a benchmark, not a test: it asserts nothing about time.

    .venv/bin/python bench/steps.py
    .venv/bin/python bench/steps.py --store postgresql://postgres@127.0.0.1/postgres
    .venv/bin/python bench/steps.py --steps-per-run 20 --concurrency 1,10,100,200
    .venv/bin/python bench/steps.py --variants read --min-seconds 5 --store-dir /tmp/lw
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import attrs

from leaseward import (
    Agent,
    App,
    Client,
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

AGENT = "bench"
VARIANTS = ("read", "write")
WAIT_TIMEOUT_SECONDS = 300.0


@tool
async def lookup(ctx: ToolContext, key: str) -> str:
    """A read-only tool that does no work, so the journal is what is measured."""
    return key


@tool(effect=ToolEffect.IDEMPOTENT_WRITE)
async def store_value(ctx: ToolContext, key: str) -> str:
    """An idempotent write: the runtime commits an intent before it and an outcome after."""
    return key


def make_app(variant: str, steps_per_run: int) -> App:
    target = lookup if variant == "read" else store_value

    def reply(request: ProviderRequest) -> ProviderReply:
        turn = sum(1 for message in request.messages if message.role is Role.ASSISTANT)
        if turn < steps_per_run:
            call = ToolCall(target.name, {"key": f"k{turn}"}, f"call-{turn}")
            return ProviderReply(tool_calls=(call,))
        return ProviderReply(text="done")

    agent = Agent(
        AGENT,
        ScriptedProvider(reply),
        tools=[target],
        # One provider turn per tool call, plus the final answer.
        max_steps=steps_per_run + 1,
    )
    return App(agents=[agent])


@attrs.frozen
class Measurement:
    variant: str
    group_commit: bool
    concurrency: int
    runs: int
    completed: int
    rows: int
    seconds: float
    commits: int
    batches: int
    largest_batch: int
    commit_seconds: float
    samples: int = 1

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def mean_batch(self) -> float:
        return self.commits / self.batches if self.batches else 0.0


async def measure(
    *,
    variant: str,
    group_commit: bool,
    concurrency: int,
    steps_per_run: int,
    url: str,
    poll_interval: float,
) -> Measurement:
    app = make_app(variant, steps_per_run)
    async with Client.open(url, app=app) as client:
        run_ids = [await client.submit(AGENT, {"n": i}) for i in range(concurrency)]

    async with Runtime.open(
        url,
        app,
        concurrency=concurrency,
        poll_interval_seconds=poll_interval,
        group_commit=group_commit,
    ) as rt:
        # The claim loop is scheduled but has not run yet: the clock starts with it.
        started = time.perf_counter()
        # One waiter at a time: each is woken when any run ends, and a hundred
        # waiters polling the store at once would compete with the Persister.
        infos = [await rt.wait(run_id, timeout=WAIT_TIMEOUT_SECONDS) for run_id in run_ids]
        seconds = time.perf_counter() - started
        stats = rt.supervisor.persister.stats
        commits, batches, largest = stats.items, stats.batches, stats.largest_batch
        commit_seconds = stats.commit_seconds
        rows = 0
        for run_id in run_ids:
            rows += len(await rt.steps(run_id))

    return Measurement(
        variant=variant,
        group_commit=group_commit,
        concurrency=concurrency,
        runs=len(run_ids),
        completed=sum(1 for info in infos if info.state is RunState.COMPLETED),
        rows=rows,
        seconds=seconds,
        commits=commits,
        batches=batches,
        largest_batch=largest,
        commit_seconds=commit_seconds,
    )


def combine(samples: Sequence[Measurement]) -> Measurement:
    """The samples of one cell as one measurement: totals, and the largest batch seen."""
    first = samples[0]
    return attrs.evolve(
        first,
        samples=len(samples),
        runs=sum(m.runs for m in samples),
        completed=sum(m.completed for m in samples),
        rows=sum(m.rows for m in samples),
        seconds=sum(m.seconds for m in samples),
        commits=sum(m.commits for m in samples),
        batches=sum(m.batches for m in samples),
        largest_batch=max(m.largest_batch for m in samples),
        commit_seconds=sum(m.commit_seconds for m in samples),
    )


def print_detail(results: Sequence[Measurement]) -> None:
    header = (
        f"{'variant':<7} {'commit':<6} {'N':>4} {'samples':>7} {'runs':>5} {'done':>5} "
        f"{'rows':>6} {'commits':>7} {'batches':>7} {'mean':>5} {'max':>4} {'wall s':>7} "
        f"{'in tx s':>7} {'rows/s':>7} {'commits/s':>9}"
    )
    print(header)
    print("-" * len(header))
    for m in results:
        commits_per_second = m.commits / m.seconds if m.seconds > 0 else 0.0
        print(
            f"{m.variant:<7} {'group' if m.group_commit else 'single':<6} {m.concurrency:>4} "
            f"{m.samples:>7} {m.runs:>5} {m.completed:>5} {m.rows:>6} {m.commits:>7} "
            f"{m.batches:>7} {m.mean_batch:>5.1f} {m.largest_batch:>4} {m.seconds:>7.3f} "
            f"{m.commit_seconds:>7.3f} {m.rows_per_second:>7.0f} {commits_per_second:>9.0f}"
        )


def print_summary(results: Sequence[Measurement]) -> None:
    by_key = {(m.variant, m.group_commit, m.concurrency): m for m in results}
    header = (
        f"{'variant':<7} {'N':>5} {'group rows/s':>12} {'single rows/s':>13} "
        f"{'group/single':>12} {'mean batch group':>16} {'mean batch single':>17}"
    )
    print(header)
    print("-" * len(header))
    for m in results:
        if not m.group_commit:
            continue
        single = by_key.get((m.variant, False, m.concurrency))
        if single is None:
            continue
        ratio = m.rows_per_second / single.rows_per_second if single.rows_per_second else 0.0
        print(
            f"{m.variant:<7} {m.concurrency:>5} {m.rows_per_second:>12.0f} "
            f"{single.rows_per_second:>13.0f} {ratio:>11.2f}x {m.mean_batch:>16.1f} "
            f"{single.mean_batch:>17.1f}"
        )


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not levels or any(level < 1 for level in levels):
        raise argparse.ArgumentTypeError("concurrency levels must be positive integers")
    return levels


def parse_variants(text: str) -> list[str]:
    variants = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if not variants or unknown:
        raise argparse.ArgumentTypeError(f"variants are a comma-separated subset of {VARIANTS}")
    return variants


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Durable journal steps per second, group commit on vs off "
        "(SQLite, or PostgreSQL with --store)."
    )
    parser.add_argument(
        "--steps-per-run",
        type=int,
        default=10,
        metavar="K",
        help="tool calls per run; a run journals 2K+1 rows (default: %(default)s)",
    )
    parser.add_argument(
        "--concurrency",
        type=parse_levels,
        default=[1, 10, 100],
        metavar="N,N,...",
        help="concurrency levels; N runs at once at level N (default: 1,10,100)",
    )
    parser.add_argument(
        "--variants",
        type=parse_variants,
        default=list(VARIANTS),
        metavar="V,V",
        help="read (read-only tool) and/or write (idempotent write tool) (default: read,write)",
    )
    parser.add_argument(
        "--min-seconds",
        type=float,
        default=1.0,
        help="repeat a cell, each time in a fresh file, until its measured time reaches this; "
        "the cell reports the totals (default: %(default)s)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure each cell at least this many times (default: %(default)s)",
    )
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=None,
        help="where the SQLite files go (kept); default: a temporary directory, removed after",
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="postgresql://...",
        help="measure on PostgreSQL: a server and maintenance database to create a fresh "
        "database per sample from (default: SQLite files)",
    )
    parser.add_argument(
        "--synchronous",
        choices=["off", "normal", "full", "extra"],
        default="full",
        help="SQLite synchronous mode of the store URL (default: %(default)s)",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=0.05,
        help="the Runtime's poll_interval_seconds (default: %(default)s)",
    )
    return parser


def wanting(taken: Sequence[Measurement], args: argparse.Namespace) -> bool:
    """Whether a cell needs another sample."""
    repeat: int = args.repeat
    min_seconds: float = args.min_seconds
    return len(taken) < repeat or sum(m.seconds for m in taken) < min_seconds


@asynccontextmanager
async def store_for(args: argparse.Namespace, db_path: Path) -> AsyncIterator[str]:
    """The store URL of one sample: a fresh SQLite file, or a fresh PostgreSQL database."""
    if args.store is None:
        yield f"sqlite:///{db_path.resolve()}?synchronous={args.synchronous}"
        return
    from pg_support import fresh_database

    async with fresh_database(args.store, "steps") as url:
        yield url


async def run_all(args: argparse.Namespace, store_dir: Path) -> list[Measurement]:
    counter = 0

    async def sample(variant: str, group_commit: bool, concurrency: int) -> Measurement:
        nonlocal counter
        counter += 1
        mode = "group" if group_commit else "single"
        name = f"{counter:04d}-{variant}-{mode}-c{concurrency}.db"
        async with store_for(args, store_dir / name) as url:
            return await measure(
                variant=variant,
                group_commit=group_commit,
                concurrency=concurrency,
                steps_per_run=args.steps_per_run,
                url=url,
                poll_interval=args.poll_interval,
            )

    # Warm up (imports, query files, first connection), and throw the result away.
    await sample(args.variants[0], True, 1)

    results: list[Measurement] = []
    for variant in args.variants:
        for concurrency in args.concurrency:
            samples: dict[bool, list[Measurement]] = {True: [], False: []}

            # Alternate the two modes, so drift on the machine affects both alike.
            while any(wanting(taken, args) for taken in samples.values()):
                for group_commit in (True, False):
                    if wanting(samples[group_commit], args):
                        samples[group_commit].append(
                            await sample(variant, group_commit, concurrency)
                        )
            results.append(combine(samples[True]))
            results.append(combine(samples[False]))
    return results


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.steps_per_run < 0 or args.repeat < 1 or args.poll_interval <= 0:
        raise SystemExit("--steps-per-run must be >= 0, --repeat >= 1, --poll-interval > 0")
    if args.min_seconds < 0:
        raise SystemExit("--min-seconds must be >= 0")
    if args.store is not None and not args.store.startswith(("postgresql://", "postgres://")):
        raise SystemExit("--store takes a postgresql:// URL (SQLite is the default)")

    started = time.perf_counter()
    if args.store_dir is None:
        with tempfile.TemporaryDirectory(prefix="leaseward-bench-") as tmp:
            results = anyio.run(run_all, args, Path(tmp))
            where = f"{tmp} (removed)"
    else:
        args.store_dir.mkdir(parents=True, exist_ok=True)
        results = anyio.run(run_all, args, args.store_dir)
        where = str(args.store_dir.resolve())
    total = time.perf_counter() - started

    k = args.steps_per_run
    if args.store is None:
        engine = f"SQLite WAL synchronous={args.synchronous}"
    else:
        engine = f"PostgreSQL, a fresh database per sample on {args.store}"
        where = "dropped"
    print(
        f"leaseward durable steps: {k} tool calls a run = {2 * k + 1} journal rows; "
        f"{engine}; each cell >= {args.min_seconds:g} s "
        f"of runtime, >= {args.repeat} sample(s); files in {where}"
    )
    print()
    print_detail(results)
    print()
    print_summary(results)
    print()
    print(
        "N = runs at once; runs, rows, commits, batches, wall s are totals over the samples.\n"
        "rows = journal rows committed (counted with rt.steps after the runs); commits = "
        "Persister requests (stats.items:\nsteps, lease extensions, settlements); mean = "
        "commits per transaction (stats.items / stats.batches); max = stats.largest_batch;\n"
        "in tx s = stats.commit_seconds (time inside commit_batch). write: each tool row "
        "takes two commits (intent, then outcome)."
    )
    incomplete = [m for m in results if m.completed != m.runs]
    if incomplete:
        print(f"WARNING: {len(incomplete)} measurement(s) had runs that did not complete")
    print(f"total {total:.1f} s")


if __name__ == "__main__":
    main()
