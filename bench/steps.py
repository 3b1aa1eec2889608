"""Durable journal steps per second, with the Persister's group commit on and off.

For each concurrency level N (default 1, 10, 100, 1000) this opens a Runtime with
``concurrency=N`` so that N runs run at once, and measures how many journal rows
per second become durable until every run has finished. Each level is measured
with ``group_commit=True`` and ``group_commit=False`` in the same invocation,
each sample in a fresh SQLite file (WAL, ``synchronous=FULL`` unless
``--synchronous`` says otherwise).

Every run is scripted: the provider asks for one tool call per turn, K times
(``--steps-per-run``), then finishes. A run therefore journals 2K+1 rows: K+1
provider steps and K tool steps. Two variants:

* ``read``  -- a read-only tool: each tool step is one fail-soft commit.
* ``write`` -- an ``IDEMPOTENT_WRITE`` tool: each tool step commits its intent
  before the call and its outcome after it (two commits, one row).

Besides the rows, a run sends the Persister one request to extend its lease
before the first provider call and one to settle, and the Supervisor's claims
go through the Persister too; ``commits`` in the detail table counts every
request the Persister committed (its ``stats.items``, where a submit of many
runs counts each run).

Two timed windows:

* ``runtime`` (always): the N runs are submitted through a ``Client`` before the
  Runtime opens, so the measured time is the runtime's work only (claim, steps,
  settle), not submits.
* ``end-to-end`` (with ``--end-to-end``, measured beside ``runtime``): the
  Runtime is opened first, then the clock starts and N tasks, one per run, each
  call ``rt.submit`` and then ``rt.wait`` for their run, as an application
  would; the clock stops when every task is done. The cell at N=1000 is also
  printed as the row "submit 1,000 runs, wait for all".

Commit latency: right after ``Runtime.open``, before any run is claimed, the
Persister's ``persist`` is replaced by a wrapper that times every request a
RunActor makes with ``time.perf_counter()`` (each RunActor is given
``persister.persist`` when it is started). The p50 and p99 columns are those of
the requests that carry journal rows: how long a run waits for its journal
write, queueing for the Persister included.

With ``--store postgresql://user@host/maintenance_db`` the same is measured on
PostgreSQL: each sample runs in a fresh database created on that server (and
dropped after), so the URL names a database to create them from, not one to fill.

A sample that raises (a store fault, such as a shared PostgreSQL server being
restarted) is reported and tried again, at most twice per cell; failures are
listed under the tables and make the script exit 1.

The tables are printed, and the results are written as JSON to
``bench/results/steps-<UTC timestamp>.json`` and copied to ``steps-latest.json``
(``--results-dir`` elsewhere). This is a benchmark, not a test: it asserts
nothing about time.

    .venv/bin/python bench/steps.py
    .venv/bin/python bench/steps.py --end-to-end --concurrency 100,1000
    .venv/bin/python bench/steps.py --store postgresql://postgres@127.0.0.1/postgres
    .venv/bin/python bench/steps.py --steps-per-run 20 --concurrency 1,10,100,200
    .venv/bin/python bench/steps.py --variants read --min-seconds 5 --store-dir /tmp/lw
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import attrs

import leaseward
from leaseward import (
    Agent,
    App,
    Client,
    ProviderReply,
    ProviderRequest,
    Role,
    RunInfo,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.runtime.commits import CommitOutcome
from leaseward.storage import open_store
from leaseward.storage.protocol import BatchItem

AGENT = "bench"
VARIANTS = ("read", "write")
RUNTIME = "runtime"
END_TO_END = "end-to-end"
HEADLINE_RUNS = 1000
WAIT_TIMEOUT_SECONDS = 300.0
MAX_FAILED_SAMPLES = 2
"""Samples of one cell that may fail (a store fault, a timeout) before the cell is given up."""
REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"


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


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of ``values``; 0.0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@attrs.frozen
class Measurement:
    window: str
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
    waits: tuple[float, ...] = attrs.field(repr=False)
    """Seconds each journal write (a persist request carrying rows) waited for its answer."""
    samples: int = 1

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def mean_batch(self) -> float:
        return self.commits / self.batches if self.batches else 0.0

    @property
    def p50_ms(self) -> float:
        return percentile(self.waits, 50) * 1000

    @property
    def p99_ms(self) -> float:
        return percentile(self.waits, 99) * 1000

    @property
    def max_ms(self) -> float:
        return max(self.waits, default=0.0) * 1000

    def to_json(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "variant": self.variant,
            "group_commit": self.group_commit,
            "concurrency": self.concurrency,
            "samples": self.samples,
            "runs": self.runs,
            "completed": self.completed,
            "rows": self.rows,
            "seconds": round(self.seconds, 6),
            "rows_per_second": round(self.rows_per_second, 1),
            "commits": self.commits,
            "batches": self.batches,
            "mean_batch": round(self.mean_batch, 2),
            "largest_batch": self.largest_batch,
            "commit_seconds": round(self.commit_seconds, 6),
            "journal_writes": len(self.waits),
            "journal_write_wait_ms": {
                "p50": round(self.p50_ms, 3),
                "p99": round(self.p99_ms, 3),
                "max": round(self.max_ms, 3),
            },
        }


def time_journal_writes(rt: Runtime) -> list[float]:
    """Time every journal write of the runs this Runtime starts from now on.

    Each RunActor is given ``supervisor.persister.persist`` when the Supervisor
    starts it (``Supervisor._start``), so replacing the attribute before the first
    claim puts this wrapper between every run and the Persister. Requests that
    carry journal rows are recorded; lease extensions and settlements without
    rows are passed through untimed.
    """
    persister = rt.supervisor.persister
    persist = persister.persist
    waits: list[float] = []

    async def timed(item: BatchItem) -> CommitOutcome:
        started = time.perf_counter()
        outcome = await persist(item)
        if item.steps:
            waits.append(time.perf_counter() - started)
        return outcome

    persister.persist = timed  # type: ignore[method-assign]
    return waits


async def measure(
    *,
    window: str,
    variant: str,
    group_commit: bool,
    concurrency: int,
    steps_per_run: int,
    url: str,
    poll_interval: float,
) -> Measurement:
    app = make_app(variant, steps_per_run)
    run_ids: list[str] = []
    if window == RUNTIME:
        async with Client.open(url, app=app) as client:
            run_ids = [await client.submit(AGENT, {"n": i}) for i in range(concurrency)]

    async with Runtime.open(
        url,
        app,
        concurrency=concurrency,
        poll_interval_seconds=poll_interval,
        group_commit=group_commit,
    ) as rt:
        # No await since the Supervisor scheduled its claim loop: it has not claimed yet.
        waits = time_journal_writes(rt)
        if window == RUNTIME:
            # The claim loop is scheduled but has not run yet: the clock starts with it.
            started = time.perf_counter()
            # One waiter for all, woken by the settlements made in this process: the
            # clock stops when the last run is seen finished.
            infos = await rt.wait_all(run_ids, timeout=WAIT_TIMEOUT_SECONDS)
            seconds = time.perf_counter() - started
        else:
            run_ids = [""] * concurrency
            found: list[RunInfo | None] = [None] * concurrency

            async def submit_and_wait(index: int) -> None:
                run_id = await rt.submit(AGENT, {"n": index})
                run_ids[index] = run_id
                found[index] = await rt.wait(run_id, timeout=WAIT_TIMEOUT_SECONDS)

            started = time.perf_counter()
            async with anyio.create_task_group() as tasks:
                for index in range(concurrency):
                    tasks.start_soon(submit_and_wait, index)
            seconds = time.perf_counter() - started
            infos = [info for info in found if info is not None]
        stats = rt.supervisor.persister.stats
        commits, batches, largest = stats.items, stats.batches, stats.largest_batch
        commit_seconds = stats.commit_seconds
        rows = 0
        for run_id in run_ids:
            rows += len(await rt.steps(run_id))

    return Measurement(
        window=window,
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
        waits=tuple(waits),
    )


def combine(samples: Sequence[Measurement]) -> Measurement:
    """The samples of one cell as one measurement: totals, every wait, the largest batch."""
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
        waits=tuple(wait for m in samples for wait in m.waits),
    )


def mode(group_commit: bool) -> str:
    return "group" if group_commit else "single"


def print_detail(results: Sequence[Measurement]) -> None:
    header = (
        f"{'window':<10} {'variant':<7} {'commit':<6} {'N':>4} {'samples':>7} {'runs':>5} "
        f"{'done':>5} {'rows':>6} {'commits':>7} {'batches':>7} {'mean':>5} {'max':>4} "
        f"{'wall s':>7} {'in tx s':>7} {'rows/s':>7} {'commits/s':>9} {'p50 ms':>7} "
        f"{'p99 ms':>7}"
    )
    print(header)
    print("-" * len(header))
    for m in results:
        commits_per_second = m.commits / m.seconds if m.seconds > 0 else 0.0
        print(
            f"{m.window:<10} {m.variant:<7} {mode(m.group_commit):<6} {m.concurrency:>4} "
            f"{m.samples:>7} {m.runs:>5} {m.completed:>5} {m.rows:>6} {m.commits:>7} "
            f"{m.batches:>7} {m.mean_batch:>5.1f} {m.largest_batch:>4} {m.seconds:>7.3f} "
            f"{m.commit_seconds:>7.3f} {m.rows_per_second:>7.0f} {commits_per_second:>9.0f} "
            f"{m.p50_ms:>7.2f} {m.p99_ms:>7.2f}"
        )


def pairs(results: Sequence[Measurement]) -> list[tuple[Measurement, Measurement]]:
    """Each group-commit measurement with its single-commit twin, in the order measured."""
    by_key = {(m.window, m.variant, m.group_commit, m.concurrency): m for m in results}
    found = []
    for m in results:
        if m.group_commit:
            single = by_key.get((m.window, m.variant, False, m.concurrency))
            if single is not None:
                found.append((m, single))
    return found


def ratio(group: Measurement, single: Measurement) -> float:
    return group.rows_per_second / single.rows_per_second if single.rows_per_second else 0.0


def print_summary(results: Sequence[Measurement]) -> None:
    header = (
        f"{'window':<10} {'variant':<7} {'N':>5} {'group rows/s':>12} {'single rows/s':>13} "
        f"{'group/single':>12} {'p50 ms group':>12} {'p99 ms group':>12} "
        f"{'p50 ms single':>13} {'p99 ms single':>13} {'mean batch group':>16}"
    )
    print(header)
    print("-" * len(header))
    for group, single in pairs(results):
        print(
            f"{group.window:<10} {group.variant:<7} {group.concurrency:>5} "
            f"{group.rows_per_second:>12.0f} {single.rows_per_second:>13.0f} "
            f"{ratio(group, single):>11.2f}x {group.p50_ms:>12.2f} {group.p99_ms:>12.2f} "
            f"{single.p50_ms:>13.2f} {single.p99_ms:>13.2f} {group.mean_batch:>16.1f}"
        )


def headline(results: Sequence[Measurement]) -> list[tuple[Measurement, Measurement]]:
    return [
        (group, single)
        for group, single in pairs(results)
        if group.window == END_TO_END and group.concurrency == HEADLINE_RUNS
    ]


def print_headline(results: Sequence[Measurement]) -> None:
    found = headline(results)
    label = f"submit {HEADLINE_RUNS:,} runs, wait for all"
    if not found:
        print(f"{label}: not measured (needs --end-to-end and {HEADLINE_RUNS} in --concurrency)")
        return
    header = (
        f"{label:<33} {'group rows/s':>12} {'single rows/s':>13} {'group/single':>12} "
        f"{'group s':>8} {'single s':>8}"
    )
    print(header)
    print("-" * len(header))
    for group, single in found:
        print(
            f"{group.variant:<33} {group.rows_per_second:>12.0f} "
            f"{single.rows_per_second:>13.0f} {ratio(group, single):>11.2f}x "
            f"{group.seconds / group.samples:>8.2f} {single.seconds / single.samples:>8.2f}"
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
        description="Durable journal steps per second and journal-write latency (p50, p99), "
        "group commit on vs off (SQLite, or PostgreSQL with --store); results also as JSON."
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
        default=[1, 10, 100, 1000],
        metavar="N,N,...",
        help="concurrency levels; N runs at once at level N (default: 1,10,100,1000)",
    )
    parser.add_argument(
        "--variants",
        type=parse_variants,
        default=list(VARIANTS),
        metavar="V,V",
        help="read (read-only tool) and/or write (idempotent write tool) (default: read,write)",
    )
    parser.add_argument(
        "--end-to-end",
        action="store_true",
        help="also time each cell with the submits inside the window: after Runtime.open, "
        "N tasks each rt.submit and rt.wait one run; adds the row 'submit 1,000 runs, "
        "wait for all' when 1000 is a level",
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
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="where steps-<UTC timestamp>.json and steps-latest.json go (default: bench/results)",
    )
    return parser


def wanting(taken: Sequence[Measurement], args: argparse.Namespace, failed: int = 0) -> bool:
    """Whether a cell needs another sample (and has not failed too often to get one)."""
    repeat: int = args.repeat
    min_seconds: float = args.min_seconds
    if failed >= MAX_FAILED_SAMPLES:
        return False
    return len(taken) < repeat or sum(m.seconds for m in taken) < min_seconds


@asynccontextmanager
async def store_for(args: argparse.Namespace, db_path: Path) -> AsyncIterator[str]:
    """The store URL of one sample: a fresh SQLite file, or a fresh PostgreSQL database."""
    if args.store is None:
        url = f"sqlite:///{db_path.resolve()}?synchronous={args.synchronous}"
        # Created here, as a worker would: the Client that queues the runs creates none.
        await (await open_store(url)).aclose()
        yield url
        return
    from pg_support import fresh_database

    async with fresh_database(args.store, "steps") as url:
        yield url


@attrs.frozen
class Failure:
    """A sample that raised instead of measuring: its cell, and what went wrong."""

    window: str
    variant: str
    group_commit: bool
    concurrency: int
    error: str

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def describe(exc: BaseException) -> str:
    """The first leaf of an exception (group), as ``Type: message``."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


async def run_all(
    args: argparse.Namespace, store_dir: Path
) -> tuple[list[Measurement], list[Failure]]:
    counter = 0
    windows = (RUNTIME, END_TO_END) if args.end_to_end else (RUNTIME,)
    failures: list[Failure] = []

    async def sample(
        window: str, variant: str, group_commit: bool, concurrency: int
    ) -> Measurement | None:
        """One measurement in a fresh store; None (and a failure noted) if it raised."""
        nonlocal counter
        counter += 1
        name = f"{counter:04d}-{window}-{variant}-{mode(group_commit)}-c{concurrency}.db"
        try:
            async with store_for(args, store_dir / name) as url:
                return await measure(
                    window=window,
                    variant=variant,
                    group_commit=group_commit,
                    concurrency=concurrency,
                    steps_per_run=args.steps_per_run,
                    url=url,
                    poll_interval=args.poll_interval,
                )
        except Exception as exc:
            # A shared server may restart under the benchmark: say so, and go on.
            failure = Failure(window, variant, group_commit, concurrency, describe(exc))
            failures.append(failure)
            print(
                f"sample failed ({window} {variant} {mode(group_commit)} N={concurrency}): "
                f"{failure.error}",
                file=sys.stderr,
                flush=True,
            )
            return None

    # Warm up (imports, query files, first connection), and throw the result away.
    await sample(windows[-1], args.variants[0], True, 1)
    failures.clear()

    results: list[Measurement] = []
    for variant in args.variants:
        for concurrency in args.concurrency:
            cells = [(window, group) for window in windows for group in (True, False)]
            samples: dict[tuple[str, bool], list[Measurement]] = {cell: [] for cell in cells}
            failed: dict[tuple[str, bool], int] = dict.fromkeys(cells, 0)

            # Alternate the modes (and windows), so drift on the machine affects all alike.
            while any(wanting(samples[cell], args, failed[cell]) for cell in cells):
                for cell in cells:
                    if wanting(samples[cell], args, failed[cell]):
                        taken = await sample(cell[0], variant, cell[1], concurrency)
                        if taken is None:
                            failed[cell] += 1
                        else:
                            samples[cell].append(taken)
            results.extend(combine(samples[cell]) for cell in cells if samples[cell])
    return results, failures


def git_revision() -> str:
    """The commit the benchmark ran from, with ``+dirty`` if tracked files were changed."""
    try:
        revision = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{revision}+dirty" if dirty else revision


def environment() -> dict[str, Any]:
    """What the figures were measured on: the machine, Python, SQLite, leaseward."""
    return {
        "leaseward": leaseward.__version__,
        "revision": git_revision(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
        "arch": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
    }


def write_results(
    results_dir: Path, prefix: str, document: dict[str, Any], *, latest: bool = True
) -> Path:
    """Write ``document`` to ``<prefix>-<UTC timestamp>.json`` and copy it to ``-latest``
    unless ``latest`` is false: the committed ``-latest`` files are the records the
    documentation quotes, which a quick smoke test must not replace."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{prefix}-{document['started_utc']}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    if latest:
        shutil.copyfile(path, results_dir / f"{prefix}-latest.json")
    return path


def saved(path: Path, latest: bool) -> str:
    """The results line: where they went, and whether ``-latest`` got them."""
    prefix = path.name.rsplit("-", 1)[0]
    if latest:
        return f"results: {shown(path)} (and {prefix}-latest.json)"
    return f"results: {shown(path)} (a quick run: {prefix}-latest.json left as it was)"


def without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def shown(path: Path) -> str:
    return str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.steps_per_run < 0 or args.repeat < 1 or args.poll_interval <= 0:
        raise SystemExit("--steps-per-run must be >= 0, --repeat >= 1, --poll-interval > 0")
    if args.min_seconds < 0:
        raise SystemExit("--min-seconds must be >= 0")
    if args.store is not None and not args.store.startswith(("postgresql://", "postgres://")):
        raise SystemExit("--store takes a postgresql:// URL (SQLite is the default)")
    if args.store is not None:
        from pg_support import exit_unless_answering

        exit_unless_answering(args.store)

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    started = time.perf_counter()
    if args.store_dir is None:
        with tempfile.TemporaryDirectory(prefix="leaseward-bench-") as tmp:
            results, failures = anyio.run(run_all, args, Path(tmp))
            where = f"{tmp} (removed)"
    else:
        args.store_dir.mkdir(parents=True, exist_ok=True)
        results, failures = anyio.run(run_all, args, args.store_dir)
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
        f"of measured time, >= {args.repeat} sample(s); files in {where}"
    )
    print()
    print_detail(results)
    print()
    print_summary(results)
    if args.end_to_end:
        print()
        print_headline(results)
    print()
    print(
        "N = runs at once; runs, rows, commits, batches, wall s are totals over the samples.\n"
        "window: runtime = runs submitted before Runtime.open, timed from the open to the last "
        "run finished;\nend-to-end = timed from before N concurrent rt.submit calls until N "
        "concurrent rt.wait calls returned.\nrows = journal rows committed (counted with "
        "rt.steps after the runs); commits = Persister requests (stats.items:\nsteps, lease "
        "extensions, settlements, claims, and end-to-end the submits); mean = commits per "
        "transaction\n(stats.items / stats.batches); max = stats.largest_batch; in tx s = "
        "stats.commit_seconds (time inside the store's commit).\np50/p99 ms = how long a run "
        "waited for each of its journal writes (persist requests carrying rows),\nover all the "
        "cell's writes. write: each tool row takes two commits (intent, then outcome).\n"
        "Better is more rows/s, a group/single above 1x (what group commit buys), and a lower "
        "p50 and p99."
    )
    incomplete = [m for m in results if m.completed != m.runs]
    if incomplete:
        print(f"WARNING: {len(incomplete)} measurement(s) had runs that did not complete")
    for f in failures:
        print(
            f"FAILED sample ({f.window} {f.variant} {mode(f.group_commit)} N={f.concurrency}), "
            f"left out of the tables: {f.error}"
        )
    print(f"total {total:.1f} s")

    document = {
        "benchmark": "steps",
        "started_utc": stamp,
        "command": [Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)],
        "store": "sqlite" if args.store is None else "postgresql",
        "store_server": None if args.store is None else without_password(args.store),
        "settings": {
            "steps_per_run": k,
            "rows_per_run": 2 * k + 1,
            "concurrency": args.concurrency,
            "variants": args.variants,
            "windows": [RUNTIME, END_TO_END] if args.end_to_end else [RUNTIME],
            "min_seconds": args.min_seconds,
            "repeat": args.repeat,
            "synchronous": args.synchronous if args.store is None else None,
            "poll_interval_seconds": args.poll_interval,
        },
        "environment": environment(),
        "total_seconds": round(total, 3),
        "measurements": [m.to_json() for m in results],
        "failed_samples": [f.to_json() for f in failures],
        "group_vs_single": [
            {
                "window": group.window,
                "variant": group.variant,
                "concurrency": group.concurrency,
                "group_rows_per_second": round(group.rows_per_second, 1),
                "single_rows_per_second": round(single.rows_per_second, 1),
                "ratio": round(ratio(group, single), 3),
            }
            for group, single in pairs(results)
        ],
    }
    path = write_results(args.results_dir, "steps", document)
    print(f"results: {shown(path)} (and steps-latest.json)")
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
