"""How fast the operator console's run listing answers on a big store, and with which plans.

For each ``--runs`` size, a fresh store (a SQLite file; and a fresh database on the
``--postgres`` server, dropped afterwards) is filled in bulk SQL with runs of 20
agents over 30 days: mostly completed, some failed, cancelled, queued, running,
waiting for a person or dead-lettered; one in ten interactive, three in ten with an
idempotency key, and runs created at the same instant in pairs. Then each shape of
query the console sends (``Client.runs`` pages of 100, ``Client.run_counts``) is
timed ``--samples`` times after a few warm-up calls, and its query plan printed.

    .venv/bin/python bench/console.py                      # 10k and 1M runs
    .venv/bin/python bench/console.py --runs 10000         # a quick pass
    .venv/bin/python bench/console.py --no-postgres

The store is not ANALYZEd on SQLite (leaseward never does), and is VACUUM ANALYZEd
on PostgreSQL after the bulk insert, as autovacuum would do. This is a benchmark,
not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sqlite3
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import structlog
from steps import RESULTS_DIR, environment, shown, without_password, write_results

from leaseward import Client
from leaseward.runtime.lifecycle import Reason, RunMode, RunState
from leaseward.runtime.listing import RunCursor, RunListing
from leaseward.storage import open_store
from leaseward.storage.queries import load_queries
from leaseward.storage.reads import run_listing

DEFAULT_RUNS = (10_000, 1_000_000)
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
PAGE = 100
WARM_UP_CALLS = 3
SPAN_SECONDS = 30 * 86_400.0
DAY_SECONDS = 86_400.0

# Run i's columns, the same on both dialects: its state by i % 100, its agent by i / 100
# (so that agent and state vary independently), created in pairs at one instant, in an
# order unrelated to i or to the id, whose leading hex is unrelated to either.
_STATE = """
CASE WHEN i % 100 < 70 THEN 'completed' WHEN i % 100 < 80 THEN 'failed'
     WHEN i % 100 < 85 THEN 'cancelled' WHEN i % 100 = 85 THEN 'dead_lettered'
     WHEN i % 100 < 92 THEN 'queued' WHEN i % 100 < 96 THEN 'running'
     WHEN i % 100 < 98 THEN 'waiting_for_approval' WHEN i % 100 = 98 THEN 'waiting_for_input'
     ELSE 'completed' END"""
_REASON = """
CASE WHEN i % 100 < 70 OR i % 100 = 99 THEN 'completed' WHEN i % 100 < 80 THEN 'max_steps'
     WHEN i % 100 < 85 THEN 'cancelled'
     WHEN i % 100 = 85 THEN (CASE i % 3 WHEN 0 THEN 'not_retryable'
                             WHEN 1 THEN 'retries_exhausted' ELSE 'interrupted_write' END)
     END"""
_TERMINAL = "(i % 100 < 86 OR i % 100 = 99)"
_COLUMNS = """id, agent, mode, state, reason, input_json, result_json, epoch, requeues,
lease_owner, lease_expires_at, available_at, cancel_requested, created_at, updated_at,
finished_at, idempotency_key, request_digest"""

SQLITE_FILL = f"""
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count),
runs_made(i, at) AS (SELECT i, :start + ((i * 7919) % :count / 2) * :step FROM n)
INSERT INTO runs ({_COLUMNS})
SELECT printf('%08x-run-%07d', (i * 2654435761) % 4294967296, i), 'agent-' || (i / 100 % 20),
       CASE WHEN i / 7 % 10 = 0 THEN 'interactive' ELSE 'queued' END, {_STATE}, {_REASON},
       '{{"n":' || i || '}}', CASE WHEN {_TERMINAL} THEN '"done"' END, 1, 0,
       CASE WHEN i % 100 BETWEEN 92 AND 95 THEN 'worker-' || (i % 8) END,
       CASE WHEN i % 100 BETWEEN 92 AND 95 THEN at + 30 END,
       at, 0, at, at + 5, CASE WHEN {_TERMINAL} THEN at + 5 END,
       CASE WHEN i % 10 < 3 THEN 'order-' || i END,
       CASE WHEN i % 10 < 3 THEN 'digest-' || i END
FROM runs_made
"""
PG_FILL = f"""
INSERT INTO runs ({_COLUMNS})
SELECT lpad(to_hex((i::bigint * 2654435761) % 4294967296), 8, '0') || '-run-'
           || lpad(i::text, 7, '0'),
       'agent-' || (i / 100 % 20),
       CASE WHEN i / 7 % 10 = 0 THEN 'interactive' ELSE 'queued' END, {_STATE}, {_REASON},
       '{{"n":' || i || '}}', CASE WHEN {_TERMINAL} THEN '"done"' END, 1, 0,
       CASE WHEN i % 100 BETWEEN 92 AND 95 THEN 'worker-' || (i % 8) END,
       CASE WHEN i % 100 BETWEEN 92 AND 95 THEN at + 30 END,
       at, FALSE, at, at + 5, CASE WHEN {_TERMINAL} THEN at + 5 END,
       CASE WHEN i % 10 < 3 THEN 'order-' || i END,
       CASE WHEN i % 10 < 3 THEN 'digest-' || i END
FROM (SELECT i, $2 + ((i::bigint * 7919) % $1 / 2) * $3 AS at
      FROM generate_series(0, $1 - 1) AS i) AS runs_made
"""
FILL_KEYS = """
INSERT INTO idempotency_keys (idempotency_key, run_id, agent, request_digest, created_at)
SELECT idempotency_key, id, agent, request_digest, created_at FROM runs
WHERE idempotency_key IS NOT NULL
"""
# The run in the middle of the listing, where a deep page starts; and a run to search for.
MIDDLE_RUN = "SELECT id, created_at FROM runs ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET {}"
A_KEYED_RUN = "SELECT id, idempotency_key FROM runs WHERE idempotency_key IS NOT NULL LIMIT 1"


@attrs.frozen
class Shape:
    """One query the console sends: a page of runs with these filters, or the counts."""

    name: str
    filters: dict[str, Any] = attrs.field(factory=dict)
    counts: bool = False


@attrs.frozen
class Timed:
    shape: str
    rows: int
    seconds: tuple[float, ...]
    plan: str

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]

    def document(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "rows": self.rows,
            "p50_ms": round(statistics.median(self.seconds) * 1000, 3),
            "p99_ms": round(self.percentile(0.99) * 1000, 3),
            "max_ms": round(max(self.seconds) * 1000, 3),
            "plan": self.plan,
        }


def shapes(start: float, middle: RunCursor, run_id: str, key: str) -> list[Shape]:
    day = {"created_after": start + 10 * DAY_SECONDS, "created_before": start + 11 * DAY_SECONDS}
    return [
        Shape("first page"),
        Shape("state=completed", {"state": RunState.COMPLETED}),
        Shape("state=dead_lettered", {"state": RunState.DEAD_LETTERED}),
        Shape("agent", {"agent": "agent-7"}),
        Shape("state+agent", {"state": RunState.WAITING_FOR_APPROVAL, "agent": "agent-7"}),
        Shape("mode=interactive", {"mode": RunMode.INTERACTIVE}),
        Shape(
            "dead letters by reason",
            {"state": RunState.DEAD_LETTERED, "reason": Reason.INTERRUPTED_WRITE},
        ),
        Shape("created range (a day)", day),
        Shape("state+created range", {"state": RunState.COMPLETED, **day}),
        Shape("agent+state+range", {"agent": "agent-7", "state": RunState.QUEUED, **day}),
        Shape("search by id", {"search": run_id}),
        Shape("search by key", {"search": key}),
        Shape("deep page (cursor)", {"after": middle}),
        Shape("deep page, state", {"after": middle, "state": RunState.COMPLETED}),
        Shape("counts by state", counts=True),
    ]


# -- filling and plans, per dialect ---------------------------------------------------------


class SQLiteStore:
    dialect = "sqlite"

    def __init__(self, url: str) -> None:
        self.path = url.removeprefix("sqlite:///")

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path)
        connection.row_factory = sqlite3.Row
        return connection

    async def fill(self, count: int, start: float) -> None:
        connection = self._connect()
        try:
            params = {"count": count, "start": start, "step": SPAN_SECONDS / count * 2}
            connection.execute(SQLITE_FILL, params)
            connection.execute(FILL_KEYS)
            connection.commit()
        finally:
            connection.close()

    async def fetch_one(self, sql: str) -> dict[str, Any]:
        connection = self._connect()
        try:
            return dict(connection.execute(sql).fetchone())
        finally:
            connection.close()

    async def plan(self, sql: str, params: dict[str, Any]) -> str:
        connection = self._connect()
        try:
            rows = connection.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
            return "; ".join(row[-1] for row in rows)
        finally:
            connection.close()


class PostgresStore:
    dialect = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[Any]:
        import asyncpg

        connection = await asyncpg.connect(self.url, command_timeout=3600)
        try:
            yield connection
        finally:
            await connection.close()

    async def fill(self, count: int, start: float) -> None:
        async with self._connect() as connection:
            await connection.execute(PG_FILL, count, start, SPAN_SECONDS / count * 2)
            await connection.execute(FILL_KEYS)
            await connection.execute("VACUUM ANALYZE runs, idempotency_keys")

    async def fetch_one(self, sql: str) -> dict[str, Any]:
        async with self._connect() as connection:
            return dict(await connection.fetchrow(sql))

    async def plan(self, sql: str, params: dict[str, Any]) -> str:
        from leaseward.storage.postgres import translate_params

        text, names = translate_params(sql)
        async with self._connect() as connection:
            rows = await connection.fetch("EXPLAIN " + text, *[params[n] for n in names])
        return "; ".join(row[0].strip().removeprefix("-> ") for row in rows)


@asynccontextmanager
async def fresh_store(dialect: str, postgres: str, directory: Path) -> AsyncIterator[str]:
    if dialect == "sqlite":
        path = directory / f"console-{time.monotonic_ns()}.db"
        yield f"sqlite:///{path.resolve()}"
        path.unlink(missing_ok=True)
        return
    from pg_support import fresh_database

    async with fresh_database(postgres, "console") as url:
        yield url


# -- the measurement ------------------------------------------------------------------------


async def timed(call: Callable[[], Awaitable[Any]], samples: int) -> tuple[int, tuple[float, ...]]:
    for _ in range(WARM_UP_CALLS):
        await call()
    taken = []
    rows = 0
    for _ in range(samples):
        began = time.perf_counter()
        result = await call()
        taken.append(time.perf_counter() - began)
        rows = len(result)
    return rows, tuple(taken)


async def measure(
    dialect: str, count: int, args: argparse.Namespace, directory: Path
) -> dict[str, Any]:
    async with fresh_store(dialect, args.postgres, directory) as url:
        raw = SQLiteStore(url) if dialect == "sqlite" else PostgresStore(url)
        store = await open_store(url)
        start = time.time() - SPAN_SECONDS
        began = time.perf_counter()
        await raw.fill(count, start)
        fill_seconds = time.perf_counter() - began
        middle = await raw.fetch_one(MIDDLE_RUN.format(count // 2))
        keyed = await raw.fetch_one(A_KEYED_RUN)
        cursor = RunCursor(created_at=middle["created_at"], id=middle["id"])
        queries = load_queries(dialect)
        results = []
        try:
            client = Client(store)
            for shape in shapes(start, cursor, keyed["id"], keyed["idempotency_key"]):
                if shape.counts:
                    plan = await raw.plan(queries["count_runs"], {})
                    rows, seconds = await timed(client.run_counts, args.samples)
                else:
                    sql, params = run_listing(
                        queries, RunListing(limit=PAGE, **shape.filters), time.time()
                    )
                    plan = await raw.plan(sql, params)

                    def page(filters: dict[str, Any] = shape.filters) -> Awaitable[Any]:
                        return client.runs(limit=PAGE, **filters)

                    rows, seconds = await timed(page, args.samples)
                results.append(Timed(shape.name, rows, seconds, plan))
                print_row(dialect, count, results[-1])
        finally:
            await store.aclose()
    return {
        "dialect": dialect,
        "runs": count,
        "fill_seconds": round(fill_seconds, 1),
        "shapes": [r.document() for r in results],
    }


def print_row(dialect: str, count: int, result: Timed) -> None:
    d = result.document()
    print(
        f"{dialect:<10} {count:>9} {result.shape:<24} {result.rows:>5} "
        f"{d['p50_ms']:>9.2f} {d['p99_ms']:>9.2f}"
    )


def print_plans(measured: list[dict[str, Any]]) -> None:
    for run in measured:
        print()
        print(f"plans on {run['dialect']} at {run['runs']} runs:")
        for shape in run["shapes"]:
            print(f"  {shape['shape']:<24} {shape['plan']}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs",
        type=int,
        nargs="+",
        default=list(DEFAULT_RUNS),
        help="store sizes to measure, each in a fresh store (default: 10000 1000000)",
    )
    parser.add_argument(
        "--samples", type=int, default=50, help="timed calls per query shape (default: 50)"
    )
    parser.add_argument(
        "--postgres",
        default=DEFAULT_POSTGRES,
        help="a PostgreSQL server's maintenance database, where a fresh database is made "
        f"and dropped (default: {DEFAULT_POSTGRES})",
    )
    parser.add_argument("--no-postgres", action="store_true", help="measure SQLite only")
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="where console-<time>.json and console-latest.json are written",
    )
    return parser


async def measure_all(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    dialects = ("sqlite",) if args.no_postgres else ("sqlite", "postgresql")
    measured = []
    header = f"{'store':<10} {'runs':>9} {'query':<24} {'rows':>5} {'p50 ms':>9} {'p99 ms':>9}"
    print(header)
    print("-" * len(header))
    for count in args.runs:
        for dialect in dialects:
            measured.append(await measure(dialect, count, args, directory))
            print(f"{'':<10} {'':>9} (bulk insert: {measured[-1]['fill_seconds']} s)")
    return measured


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if min(args.runs) < 2 * PAGE or args.samples < 1:
        raise SystemExit(f"--runs must each be at least {2 * PAGE}, --samples at least 1")
    if not args.no_postgres:
        from pg_support import exit_unless_answering

        exit_unless_answering(args.postgres)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    started = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    with tempfile.TemporaryDirectory(prefix="leaseward-console-") as tmp:
        measured = anyio.run(measure_all, args, Path(tmp))
    print_plans(measured)
    document = {
        "benchmark": "console",
        "started_utc": started,
        "environment": environment(),
        "page": PAGE,
        "samples": args.samples,
        "postgres": None if args.no_postgres else without_password(args.postgres),
        "results": measured,
    }
    path = write_results(args.results_dir, "console", document)
    print()
    print(f"results: {shown(path)}")


if __name__ == "__main__":
    main()
