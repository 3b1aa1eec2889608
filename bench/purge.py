"""Claim and reap latency on a store holding many finished runs, before, during and after
purging them; and how fast the purge itself goes.

A fresh store (a SQLite file, or with ``--store postgresql://...`` a fresh database on
that server) gets ``--queued`` queued runs, then the stages:

* ``empty``: only the queued runs.
* ``N finished``: after ``--finished`` runs that finished 40 days ago, each with
  ``--steps-per-run`` journal rows, are inserted in bulk (not timed). One in ten
  failed, one in ten was cancelled, one in a hundred is a dead letter, the rest
  completed.
* ``during purge``: while ``Client.purge(finished_before=30 days)`` runs, another
  connection claims one run every ``--pace-ms``: how long a claim waits behind the
  purge's batches.
* ``after purge``: the purge has deleted every finished run but the dead letters.
  On PostgreSQL its dead tuples are still there, and autovacuum may be busy with them.
* ``after VACUUM`` (PostgreSQL only): once ``VACUUM ANALYZE`` has removed them.

Each stage but ``during purge`` times ``--samples`` claims
(``claim_runs`` of one run) and as many reap scans (``running_leases``, which finds
nothing), one after the other. The query plans of the claim, the reap scan and the
purge's pick show which index each uses.

    .venv/bin/python bench/purge.py                           # 100k finished runs, SQLite
    .venv/bin/python bench/purge.py --finished 1000000        # a million
    .venv/bin/python bench/purge.py --store postgresql://postgres@127.0.0.1/postgres

This is a benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import attrs
import structlog

from leaseward import Client
from leaseward.storage import SQLStore, open_store
from leaseward.storage.queries import load_queries

AGENT = "bench"
LEASE_SECONDS = 3600.0
AGE_DAYS = 40
PURGE_AFTER = timedelta(days=30)
WARM_UP_SAMPLES = 20
# The queries whose plans are shown: (label, named query, its :source state).
PLANS = (
    ("claim", "claim_runs", "queued"),
    ("reap scan", "running_leases", "running"),
    ("purge pick", "purge_pick", "queued"),
    ("purge delete", "purge_runs", "queued"),
)

SQLITE_FILL_RUNS = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
INSERT INTO runs (id, agent, mode, state, reason, input_json, result_json, epoch, requeues,
                  available_at, cancel_requested, created_at, updated_at, finished_at)
SELECT printf('old-%09d', i), :agent, 'queued',
       CASE WHEN i % 10 = 0 THEN 'failed' WHEN i % 10 = 1 THEN 'cancelled'
            WHEN i % 100 = 2 THEN 'dead_lettered' ELSE 'completed' END,
       NULL, '{}', '"done"', 1, 0, :at, 0, :at, :at, :at + i * 1e-6
FROM n
"""
SQLITE_FILL_STEPS = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count),
     s(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM s WHERE k + 1 < :steps)
INSERT INTO steps (run_id, seq, epoch, kind, status, output_json, started_at, finished_at)
SELECT printf('old-%09d', i), k, 1, 'provider', 'succeeded', '{"text":"done"}', :at, :at
FROM n, s ORDER BY i, k
"""
SQLITE_FILL_QUEUED = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
INSERT INTO runs (id, agent, mode, state, input_json, epoch, requeues, available_at,
                  cancel_requested, created_at, updated_at)
SELECT printf('new-%09d', i), :agent, 'queued', 'queued', '{}', 0, 0, :at + i * 1e-6, 0, :at, :at
FROM n
"""
PG_FILL_RUNS = """
INSERT INTO runs (id, agent, mode, state, reason, input_json, result_json, epoch, requeues,
                  available_at, cancel_requested, created_at, updated_at, finished_at)
SELECT 'old-' || lpad(i::text, 9, '0'), $1, 'queued',
       CASE WHEN i % 10 = 0 THEN 'failed' WHEN i % 10 = 1 THEN 'cancelled'
            WHEN i % 100 = 2 THEN 'dead_lettered' ELSE 'completed' END,
       NULL, '{}', '"done"', 1, 0, t, FALSE, t, t, t + i * 1e-6
FROM generate_series(1, $2) AS i, (SELECT leaseward_now() - $3 AS t) AS at
"""
PG_FILL_STEPS = """
INSERT INTO steps (run_id, seq, epoch, kind, status, output_json, started_at, finished_at)
SELECT 'old-' || lpad(i::text, 9, '0'), k, 1, 'provider', 'succeeded', '{"text":"done"}', t, t
FROM generate_series(1, $1) AS i, generate_series(0, $2 - 1) AS k,
     (SELECT leaseward_now() - $3 AS t) AS at
ORDER BY i, k
"""
PG_FILL_QUEUED = """
INSERT INTO runs (id, agent, mode, state, input_json, epoch, requeues, available_at,
                  cancel_requested, created_at, updated_at)
SELECT 'new-' || lpad(i::text, 9, '0'), $1, 'queued', 'queued', '{}', 0, 0,
       leaseward_now() - 10 + i * 1e-6, FALSE, leaseward_now() - 10, leaseward_now() - 10
FROM generate_series(1, $2) AS i
"""


@attrs.frozen
class Stage:
    name: str
    claims: tuple[float, ...]
    reaps: tuple[float, ...] = ()


@attrs.frozen
class Report:
    stages: tuple[Stage, ...]
    purged_runs: int
    purged_steps: int
    batches: int
    purge_seconds: float
    kept: int
    fill_seconds: float
    plans: dict[str, str]


def milliseconds(values: Sequence[float]) -> str:
    if not values:
        return f"{'-':>8} {'-':>8} {'-':>8}"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (
        f"{statistics.median(ordered) * 1000:>8.3f} {p95 * 1000:>8.3f} {ordered[-1] * 1000:>8.3f}"
    )


async def timed(operation: Callable[[], Awaitable[Any]], count: int) -> tuple[float, ...]:
    taken = []
    for _ in range(count):
        started = time.perf_counter()
        await operation()
        taken.append(time.perf_counter() - started)
    return tuple(taken)


async def stage(store: SQLStore, name: str, samples: int) -> Stage:
    claims = await timed(lambda: store.claim_runs("bench", 1, LEASE_SECONDS, [AGENT]), samples)
    reaps = await timed(store.running_leases, samples)
    return Stage(name, claims, reaps)


# -- filling and plans, per dialect ---------------------------------------------------------


class SQLiteFiller:
    def __init__(self, url: str) -> None:
        self.path = url.removeprefix("sqlite:///").partition("?")[0]

    def _run(self, sql: str, params: dict[str, Any]) -> None:
        connection = sqlite3.connect(self.path)
        try:
            connection.execute(sql, params)
            connection.commit()
        finally:
            connection.close()

    async def queued(self, count: int) -> None:
        self._run(SQLITE_FILL_QUEUED, {"count": count, "agent": AGENT, "at": time.time() - 10})

    async def finished(self, count: int, steps: int) -> None:
        at = time.time() - AGE_DAYS * 86_400
        self._run(SQLITE_FILL_RUNS, {"count": count, "agent": AGENT, "at": at})
        if steps:
            self._run(SQLITE_FILL_STEPS, {"count": count, "steps": steps, "at": at})

    async def plans(self) -> dict[str, str]:
        queries = load_queries("sqlite")
        params: dict[str, Any] = {
            "source": "queued",
            "target": "running",
            "worker_id": "w",
            "lease_seconds": 1.0,
            "limit": 1,
            "agents": f'["{AGENT}"]',
            "exclude": "[]",
            "now": time.time(),
            "state": "completed",
            "cutoff": time.time(),
            "ids": '["old-000000001"]',
        }
        connection = sqlite3.connect(self.path)
        try:
            found = {}
            for label, name, source in PLANS:
                rows = connection.execute(
                    "EXPLAIN QUERY PLAN " + queries[name], {**params, "source": source}
                ).fetchall()
                found[label] = "; ".join(row[-1] for row in rows)
            return found
        finally:
            connection.close()


class PostgresFiller:
    def __init__(self, url: str) -> None:
        self.url = url

    async def _run(self, sql: str, *args: Any) -> None:
        import asyncpg

        connection = await asyncpg.connect(self.url, command_timeout=3600)
        try:
            await connection.execute(sql, *args)
            await connection.execute("ANALYZE runs")
            await connection.execute("ANALYZE steps")
        finally:
            await connection.close()

    async def queued(self, count: int) -> None:
        await self._run(PG_FILL_QUEUED, AGENT, count)

    async def vacuum(self) -> None:
        """What autovacuum does in the end: the purge's dead tuples gone, statistics new."""
        await self._run("VACUUM runs, steps")

    async def finished(self, count: int, steps: int) -> None:
        age = float(AGE_DAYS * 86_400)
        await self._run(PG_FILL_RUNS, AGENT, count, age)
        if steps:
            await self._run(PG_FILL_STEPS, count, steps, age)

    async def plans(self) -> dict[str, str]:
        import asyncpg

        from leaseward.storage.postgres import translate_params

        queries = load_queries("postgresql")
        params: dict[str, Any] = {
            "target": "running",
            "worker_id": "w",
            "lease_seconds": 1.0,
            "limit": 1,
            "agents": [AGENT],
            "exclude": [],
            "now": 0.0,
            "state": "completed",
            "cutoff": time.time(),
            "ids": ["old-000000001"],
        }
        connection = await asyncpg.connect(self.url)
        try:
            found = {}
            for label, name, source in PLANS:
                text, names = translate_params(queries[name])
                given = {**params, "source": source}
                rows = await connection.fetch("EXPLAIN " + text, *[given[n] for n in names])
                lines = [r[0].strip().lstrip("-> ") for r in rows]
                found[label] = "; ".join(line for line in lines if "Scan" in line)
            return found
        finally:
            await connection.close()


@asynccontextmanager
async def fresh_store(args: argparse.Namespace, directory: Path) -> AsyncIterator[str]:
    if args.store is None:
        yield f"sqlite:///{(directory / 'purge.db').resolve()}"
        return
    from pg_support import fresh_database

    async with fresh_database(args.store, "purge") as url:
        yield url


# -- the measurement ------------------------------------------------------------------------


async def claims_while(store: SQLStore, pace: float, done: anyio.Event) -> tuple[float, ...]:
    taken = []
    while not done.is_set():
        started = time.perf_counter()
        await store.claim_runs("bench-during", 1, LEASE_SECONDS, [AGENT])
        taken.append(time.perf_counter() - started)
        await anyio.sleep(pace)
    return tuple(taken)


async def measure(args: argparse.Namespace, directory: Path) -> Report:
    async with fresh_store(args, directory) as url:
        filler: SQLiteFiller | PostgresFiller = (
            SQLiteFiller(url) if args.store is None else PostgresFiller(url)
        )
        store = await open_store(url)
        other = await open_store(url)
        try:
            await filler.queued(args.queued)
            # Warm up (first statements, prepared plans, the page cache), untimed.
            await stage(store, "warm-up", WARM_UP_SAMPLES)
            stages = [await stage(store, "empty", args.samples)]
            started = time.perf_counter()
            await filler.finished(args.finished, args.steps_per_run)
            fill_seconds = time.perf_counter() - started
            stages.append(await stage(store, f"{args.finished} finished", args.samples))
            plans = await filler.plans()

            done = anyio.Event()
            during: tuple[float, ...] = ()

            async def claim_during() -> None:
                nonlocal during
                during = await claims_while(other, args.pace_ms / 1000, done)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(claim_during)
                started = time.perf_counter()
                result = await Client(store).purge(finished_before=PURGE_AFTER)
                purge_seconds = time.perf_counter() - started
                done.set()
            stages.append(Stage("during purge", during))
            stages.append(await stage(store, "after purge", args.samples))
            if isinstance(filler, PostgresFiller):
                await filler.vacuum()
                stages.append(await stage(store, "after VACUUM", args.samples))
            kept = sum((await store.count_runs()).values())
        finally:
            await other.aclose()
            await store.aclose()
    return Report(
        stages=tuple(stages),
        purged_runs=result.runs,
        purged_steps=result.steps,
        batches=result.batches,
        purge_seconds=purge_seconds,
        kept=kept,
        fill_seconds=fill_seconds,
        plans=plans,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Claim and reap latency around a purge of many finished runs."
    )
    parser.add_argument(
        "--finished", type=int, default=100_000, help="finished runs (default: %(default)s)"
    )
    parser.add_argument(
        "--steps-per-run",
        type=int,
        default=2,
        help="journal rows of each finished run (default: %(default)s)",
    )
    parser.add_argument(
        "--queued", type=int, default=10_000, help="queued runs to claim (default: %(default)s)"
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=300,
        help="claims and reap scans timed per stage (default: %(default)s)",
    )
    parser.add_argument(
        "--pace-ms",
        type=float,
        default=10.0,
        help="pause between the claims made during the purge (default: %(default)s)",
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="postgresql://...",
        help="a PostgreSQL server and maintenance database to create a fresh database "
        "from (default: a SQLite file in a temporary directory)",
    )
    return parser


def print_report(args: argparse.Namespace, report: Report) -> None:
    engine = "SQLite WAL synchronous=FULL" if args.store is None else f"PostgreSQL ({args.store})"
    print(
        f"leaseward purge: {engine}; {args.finished} finished runs with {args.steps_per_run} "
        f"journal rows each, {args.queued} queued runs; {os.cpu_count()} CPUs"
    )
    print()
    header = (
        f"{'stage':<18} {'claims':>6} {'claim p50':>9} {'p95':>8} {'max':>8}   "
        f"{'reap p50':>8} {'p95':>8} {'max':>8}   (ms)"
    )
    print(header)
    print("-" * len(header))
    for s in report.stages:
        reaps = milliseconds(s.reaps) if s.reaps else f"{'-':>8} {'-':>8} {'-':>8}"
        print(f"{s.name:<18} {len(s.claims):>6} {milliseconds(s.claims)}   {reaps}")
    print()
    rate = report.purged_runs / report.purge_seconds if report.purge_seconds else 0.0
    print(
        f"purge: deleted {report.purged_runs} runs and {report.purged_steps} journal rows in "
        f"{report.batches} batches, {report.purge_seconds:.1f} s ({rate:.0f} runs/s); "
        f"{report.kept} runs left (the dead letters and the queued/claimed runs)"
    )
    print(f"bulk insert of the finished runs (not in the figures): {report.fill_seconds:.1f} s")
    print()
    for label, plan in report.plans.items():
        print(f"plan of the {label}: {plan}")
    print()
    print(
        "claims: claim_runs of one run, one after the other (during purge: from a second "
        f"connection, every {args.pace_ms:g} ms while the purge ran);\nreap: running_leases "
        "(finds nothing). p50/p95/max are per call. Only the last PostgreSQL stage follows "
        "a VACUUM."
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if min(args.finished, args.queued, args.samples) < 1 or args.steps_per_run < 0:
        raise SystemExit("--finished, --queued and --samples must be >= 1, --steps-per-run >= 0")
    if args.queued < 3 * args.samples + WARM_UP_SAMPLES:
        raise SystemExit(
            f"--queued must be at least 3 x --samples + {WARM_UP_SAMPLES} (claims consume runs)"
        )
    if args.store is not None and not args.store.startswith(("postgresql://", "postgres://")):
        raise SystemExit("--store takes a postgresql:// URL (SQLite is the default)")
    if args.store is not None:
        from pg_support import exit_unless_answering

        exit_unless_answering(args.store)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="leaseward-bench-") as tmp:
        report = anyio.run(measure, args, Path(tmp))
    print_report(args, report)
    print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
