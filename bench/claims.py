"""Claim throughput on PostgreSQL with 1, 2 and 4 worker processes.

For each worker count P this creates a fresh database on the server the URL names,
fills it with R queued runs (one INSERT, not timed), starts P worker processes that
each connect and then, at one agreed instant, claim in a loop (``claim_runs`` with
``--batch`` runs a claim, the store's single ``FOR UPDATE SKIP LOCKED`` statement)
until the queue is empty. It reports runs claimed per second and claim transactions
per second over the wall time from that instant until the last worker found the queue
empty, and checks afterwards that every run was claimed exactly once (epoch 1).
With ``--repeat R`` every measurement is made R times, one round of them after
another, and each row gives the round whose runs/s is the median, with the least and
the most: two workers and four on two shared cores differ by a few percent, less than
what the rest of the machine moves one measurement.

    .venv/bin/python bench/claims.py
    .venv/bin/python bench/claims.py --store postgresql://postgres@127.0.0.1/postgres \\
        --workers 1,2,4 --runs 20000 --batch 1,32 --repeat 3

The URL names a server and a maintenance database to create the fresh databases
from; each is dropped afterwards. This is a benchmark, not a test: it asserts
nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import asyncpg
import attrs
from pg_support import exit_unless_answering, fresh_database

from leaseward.runtime.clock import SystemClock
from leaseward.storage import open_store

AGENT = "bench"
# A queue of 5,000 runs drains in under 0.3 s at 32 a claim, where the workers'
# start decides the figure; a run a claim asks for adds 5,000 up to this many.
RUNS_PER_RUN_CLAIMED = 5000
MOST_DEFAULT_RUNS = 40_000
LEASE_SECONDS = 300.0
START_DELAY_SECONDS = 1.5
ROOT = Path(__file__).resolve().parents[1]

FILL_SQL = """
INSERT INTO runs (id, agent, mode, state, input_json, epoch, requeues, lease_owner,
                  lease_expires_at, available_at, cancel_requested, created_at, updated_at)
SELECT 'run-' || lpad(n::text, 8, '0'), $1, 'queued', 'queued', 'null', 0, 0, NULL, NULL,
       leaseward_now() - 10 + n * 1e-6, FALSE, leaseward_now() - 10, leaseward_now() - 10
FROM generate_series(1, $2) AS n
"""


@attrs.frozen
class Result:
    workers: int
    batch: int
    runs: int
    claimed: int
    claims: int
    seconds: float
    per_worker: tuple[int, ...]
    double_claims: int
    busy: float | None
    """The share of the machine's CPU time busy while the workers claimed: the workers,
    the server and whatever else ran; what one more worker process could still use."""
    worker_cpu_seconds: float
    """The worker processes' own CPU time while they claimed, all of them together; the
    rest of ``busy`` is the server's (and whatever else ran)."""

    @property
    def runs_per_second(self) -> float:
        return self.claimed / self.seconds if self.seconds > 0 else 0.0

    @property
    def claims_per_second(self) -> float:
        return self.claims / self.seconds if self.seconds > 0 else 0.0

    @property
    def worker_cpu_per_run(self) -> float | None:
        """Seconds of the workers' CPU a run claimed."""
        return self.worker_cpu_seconds / self.claimed if self.claimed else None


RunsPerSecondRange = dict[tuple[int, int], tuple[float, float]]
"""By (workers, batch): the least and the most runs/s of its rounds."""


def medians(results: Sequence[Result]) -> tuple[list[Result], RunsPerSecondRange]:
    """Of each (workers, batch)'s rounds, the one whose runs/s is the median (the lower
    of the two middle ones, for an even count), in the order they were first measured,
    with the double claims of all its rounds; and the range of each."""
    rounds: dict[tuple[int, int], list[Result]] = {}
    for result in results:
        rounds.setdefault((result.workers, result.batch), []).append(result)
    chosen: list[Result] = []
    ranges: RunsPerSecondRange = {}
    for key, same in rounds.items():
        ordered = sorted(same, key=lambda r: r.runs_per_second)
        median = ordered[(len(ordered) - 1) // 2]
        # A run claimed twice in any round is a fault the median must not hide.
        chosen.append(attrs.evolve(median, double_claims=sum(r.double_claims for r in same)))
        ranges[key] = (ordered[0].runs_per_second, ordered[-1].runs_per_second)
    return chosen, ranges


# -- one worker process -------------------------------------------------------------------


async def worker(url: str, worker_id: str, batch: int, start_at: float) -> None:
    store = await open_store(url, clock=SystemClock(), migrate=False, pool_size=2)
    try:
        # Warm the connection and the prepared claim statement before the start.
        await store.claim_runs(worker_id, batch, LEASE_SECONDS, ["nobody"])
        await anyio.sleep(max(0.0, start_at - time.time()))
        started = time.time()
        cpu_started = time.process_time()
        claimed = claims = 0
        while True:
            got = await store.claim_runs(worker_id, batch, LEASE_SECONDS, [AGENT])
            claims += 1
            if not got:
                break
            claimed += len(got)
        ended = time.time()
        cpu_seconds = time.process_time() - cpu_started
    finally:
        await store.aclose()
    print(
        json.dumps(
            {
                "claimed": claimed,
                "claims": claims,
                "started": started,
                "ended": ended,
                "cpu_seconds": cpu_seconds,
            }
        )
    )


# -- the driver ---------------------------------------------------------------------------


async def measure(admin_url: str, workers: int, batch: int, runs: int) -> Result:
    async with fresh_database(admin_url, "claims") as url:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(FILL_SQL, AGENT, runs)
            await connection.execute("ANALYZE runs")
        finally:
            await connection.close()

        start_at = time.time() + START_DELAY_SECONDS + 0.2 * workers
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "bench")])}
        processes = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    url,
                    f"w{index}",
                    str(batch),
                    repr(start_at),
                ],
                env=env,
                stdout=subprocess.PIPE,
            )
            for index in range(workers)
        ]
        await anyio.sleep(max(0.0, start_at - time.time()))
        cpu_before = cpu_times()
        reports = []
        for process in processes:
            out, _ = await anyio.to_thread.run_sync(process.communicate)
            if process.returncode != 0:
                raise SystemExit(f"a worker failed (exit {process.returncode})")
            reports.append(json.loads(out.decode().strip().splitlines()[-1]))
        cpu_after = cpu_times()

        connection = await asyncpg.connect(url)
        try:
            running = await connection.fetchval(
                "SELECT COUNT(*) FROM runs WHERE state = 'running' AND epoch = 1"
            )
            bad = await connection.fetchval("SELECT COUNT(*) FROM runs WHERE epoch <> 1")
        finally:
            await connection.close()

    claimed = sum(r["claimed"] for r in reports)
    seconds = max(r["ended"] for r in reports) - min(r["started"] for r in reports)
    return Result(
        workers=workers,
        batch=batch,
        runs=runs,
        claimed=claimed,
        claims=sum(r["claims"] for r in reports),
        seconds=seconds,
        per_worker=tuple(r["claimed"] for r in reports),
        double_claims=int(bad) + (claimed - int(running)),
        busy=busy_share(cpu_before, cpu_after),
        worker_cpu_seconds=sum(r["cpu_seconds"] for r in reports),
    )


def cpu_times() -> tuple[int, int] | None:
    """The machine's CPU time so far, all of it and that spent idle or waiting for the
    disk, in clock ticks; None where ``/proc/stat`` cannot tell."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(field) for field in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    return sum(fields), fields[3] + fields[4]


def busy_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[0] <= before[0]:
        return None
    return 1.0 - (after[1] - before[1]) / (after[0] - before[0])


def parse_ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("values must be positive integers")
    return values


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Claim throughput on PostgreSQL with several worker processes."
    )
    parser.add_argument(
        "--store",
        default=os.environ.get(
            "LEASEWARD_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        metavar="postgresql://...",
        help="server and maintenance database to create fresh databases from "
        "(default: $LEASEWARD_TEST_PG_URL or %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=parse_ints,
        default=[1, 2, 4],
        metavar="P,P,...",
        help="worker process counts (default: 1,2,4)",
    )
    parser.add_argument(
        "--batch",
        type=parse_ints,
        default=[1, 32],
        metavar="B,B,...",
        help="runs asked for by each claim; 32 is the Supervisor's (default: 1,32)",
    )
    parser.add_argument(
        "--runs",
        type=positive_int,
        default=None,
        metavar="R",
        help="queued runs per measurement (default: 5,000 a run a claim asks for, "
        f"at most {MOST_DEFAULT_RUNS:,})",
    )
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        metavar="R",
        help="rounds of every measurement, one after another; each row gives the median "
        "round (default: %(default)s)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write the settings and every measurement, with runs/s, to PATH as JSON",
    )
    return parser


def write_json(path: Path, args: argparse.Namespace, results: Sequence[Result]) -> None:
    """Every round under ``rounds``; under ``measurements`` the median round of each
    (workers, batch), with the least and the most runs/s of its rounds."""
    chosen, ranges = medians(results)
    base = {r.batch: r.runs_per_second for r in chosen if r.workers == 1}

    def described(r: Result) -> dict[str, object]:
        return {
            **attrs.asdict(r),
            "runs_per_second": r.runs_per_second,
            "claims_per_second": r.claims_per_second,
            "worker_cpu_per_run": r.worker_cpu_per_run,
        }

    document = {
        "benchmark": "claims",
        "settings": {
            "workers": args.workers,
            "batch": args.batch,
            "runs": {batch: runs_for(args, batch) for batch in args.batch},
            "repeat": args.repeat,
        },
        "cpus": os.cpu_count(),
        "measurements": [
            {
                **described(r),
                "runs_per_second_min": ranges[(r.workers, r.batch)][0],
                "runs_per_second_max": ranges[(r.workers, r.batch)][1],
                "vs_one_worker": r.runs_per_second / base[r.batch] if base.get(r.batch) else None,
            }
            for r in chosen
        ],
        "rounds": [described(r) for r in results],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


def print_results(results: Sequence[Result], ranges: RunsPerSecondRange | None = None) -> None:
    """A row a result; with ``ranges``, each row's least and most runs/s of its rounds."""
    header = (
        f"{'P':>3} {'batch':>5} {'runs':>7} {'claimed':>7} {'claims':>7} {'wall s':>7} "
        f"{'runs/s':>8} {'claims/s':>8} {'vs P=1':>7} {'double':>6} {'busy':>5} "
        f"{'worker µs':>9}  " + ("runs/s of its rounds (min-max)" if ranges else "per worker")
    )
    print(header)
    print("-" * len(header))
    base: dict[int, float] = {}
    for r in results:
        if r.workers == 1:
            base.setdefault(r.batch, r.runs_per_second)
        ratio = r.runs_per_second / base[r.batch] if base.get(r.batch) else 0.0
        busy = "-" if r.busy is None else f"{r.busy:.0%}"
        per_run = r.worker_cpu_per_run
        worker_cpu = "-" if per_run is None else f"{per_run * 1e6:.1f}"
        if ranges:
            least, most = ranges[(r.workers, r.batch)]
            last = f"{least:.0f}-{most:.0f}"
        else:
            last = ",".join(map(str, r.per_worker))
        print(
            f"{r.workers:>3} {r.batch:>5} {r.runs:>7} {r.claimed:>7} {r.claims:>7} "
            f"{r.seconds:>7.3f} {r.runs_per_second:>8.0f} {r.claims_per_second:>8.0f} "
            f"{ratio:>6.2f}x {r.double_claims:>6} {busy:>5} {worker_cpu:>9}  {last}"
        )


def runs_for(args: argparse.Namespace, batch: int) -> int:
    if args.runs is not None:
        return int(args.runs)
    return min(RUNS_PER_RUN_CLAIMED * batch, MOST_DEFAULT_RUNS)


async def run_all(args: argparse.Namespace) -> list[Result]:
    results = []
    for _ in range(args.repeat):
        for batch in args.batch:
            for workers in args.workers:
                results.append(await measure(args.store, workers, batch, runs_for(args, batch)))
    return results


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        url, worker_id, batch, start_at = argv[1:5]
        anyio.run(worker, url, worker_id, int(batch), float(start_at))
        return
    args = build_parser().parse_args(argv)
    exit_unless_answering(args.store)
    started = time.perf_counter()
    results = anyio.run(run_all, args)
    print(
        f"leaseward claim throughput on PostgreSQL ({args.store}): the queued runs of each "
        "measurement in its row, each worker a process claiming in a loop until the queue is "
        f"empty; {os.cpu_count()} CPUs shared with the server"
    )
    print()
    if args.repeat > 1:
        chosen, ranges = medians(results)
        print(f"the median of {args.repeat} rounds, measured one round after another:")
        print_results(chosen, ranges)
    else:
        print_results(results)
    print()
    print(
        "P = worker processes; batch = runs a claim asks for; claims = claim statements "
        "(the last of each worker finds none);\nruns/s = runs claimed per second of wall time "
        "from the common start to the last worker done; vs P=1 = runs/s over the same batch "
        "with one worker;\ndouble = runs claimed more than once or not at epoch 1 "
        "(checked in the database after; must be 0);\nbusy = the machine's CPU busy "
        "while they claimed (workers, server and all else): where two workers leave none "
        "idle, four have no more to take;\nworker µs = the worker processes' own CPU "
        "a run claimed (the rest of busy is the server's)."
    )
    print(f"total {time.perf_counter() - started:.1f} s")
    if args.json is not None:
        write_json(args.json, args, results)
        print(f"results: {args.json}")


if __name__ == "__main__":
    main()
