"""What leases cost: a claim and a reaper pass as history grows, and short leases in a
healthy fleet. Parts 3 and 4 of the lease benchmark (``leases.py`` runs them beside
the others; this module also runs alone).

**history** (part 3): a fresh store (a SQLite file; with ``--pg-url`` also a fresh
PostgreSQL database) is filled with plain SQL, untimed, in two series:

* ``finished``: 1k, 10k, 100k, 1M finished runs (one journal row each; one in ten
  failed, one in ten cancelled, one in a hundred dead-lettered), grown in place from
  one size to the next, beside 1,000 queued runs to claim;
* ``queued``: 1k, 10k, 100k queued runs and no history.

At each size, through the real store API, one after the other and each timed alone:
``claim_runs`` of 32 runs and of 1 (each its own transaction, like the Supervisor's
claims), one ``LeaseReaper.reap_once()`` with 100 expired leases present that the
reaper has already watched (the scan, one journal read per expired run, the settling
write) and one with none expired
(the scan alone, what every reap interval costs). Claimed runs are put back in the
queue and the reaped ones deleted between samples, untimed, so every sample sees the
same store. The tables give medians and the ratio to the smallest size (the target:
at most 2x at 1M finished runs), and each query's plan at the largest size (SQLite
``EXPLAIN QUERY PLAN``, PostgreSQL ``EXPLAIN``, with parameters bound as the store
binds them); a plan that reads the whole runs or steps table is flagged.

**fleet** (part 4): a Runtime (``concurrency`` = N + 16 slots for short runs) with N
runs parked in a tool call that sleeps an hour, for N = 1,000 and 10,000 and
``lease_seconds`` 2, 5, 30, 300 (the reaper every ``lease_seconds / 2``, within
0.5..5 s); each cell a fresh store. Once all N are inside the call, a window of the
fewest whole renewal intervals (``lease_seconds / 3``) that reach 3 s, at most 5 s
(3 s when one interval is longer) measures: the lease keeper's renewal transactions
and rows per second, every Persister transaction, short runs completed per second by
16 loops each submitting a run and waiting for it, beside the parked runs, the
process's CPU time, the event loop's lag (how late a 20 ms sleep wakes) and the
garbage collector's longest pause (``gc.callbacks``). A cell with no parked runs
gives the short runs' throughput alone.

    .venv/bin/python bench/lease_costs.py
    .venv/bin/python bench/lease_costs.py --pg-url postgresql://postgres@127.0.0.1/postgres
    .venv/bin/python bench/lease_costs.py --quick
    .venv/bin/python bench/lease_costs.py --sections history --finished 1000,1000000

Results go to ``bench/results/lease-costs-<UTC timestamp>.json`` and
``lease-costs-latest.json``. A benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import math
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
from collector_pauses import CollectorPauses
from steps import (
    RESULTS_DIR,
    describe,
    environment,
    saved,
    without_password,
    write_results,
)

from leaseward import (
    Agent,
    App,
    ProviderReply,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    tool,
)
from leaseward.actors.metrics import Metrics
from leaseward.actors.reaper import LeaseReaper
from leaseward.runtime.lifecycle import RecoveryPolicy
from leaseward.storage import SQLStore, open_store
from leaseward.storage.queries import load_queries

SECTIONS = ("history", "fleet")
SQLITE = "sqlite"
POSTGRESQL = "postgresql"
STORE_NAMES = {SQLITE: "SQLite", POSTGRESQL: "PostgreSQL"}


@attrs.frozen
class Sizes:
    finished: tuple[int, ...]
    queued: tuple[int, ...]
    parked: tuple[int, ...]
    leases: tuple[float, ...]


DEFAULT_SIZES = Sizes(
    finished=(1_000, 10_000, 100_000, 1_000_000),
    queued=(1_000, 10_000, 100_000),
    parked=(1_000, 10_000),
    leases=(2.0, 5.0, 30.0, 300.0),
)
QUICK_SIZES = Sizes(
    finished=(1_000, 100_000), queued=(1_000, 10_000), parked=(1_000,), leases=(2.0, 30.0)
)


def sizes_for(quick: bool) -> Sizes:
    return QUICK_SIZES if quick else DEFAULT_SIZES


def stores_for(pg_url: str | None) -> tuple[str, ...]:
    return (SQLITE,) if pg_url is None else (SQLITE, POSTGRESQL)


def planned_units(
    quick: bool,
    pg_url: str | None,
    *,
    sections: Sequence[str] = SECTIONS,
    sizes: Sizes | None = None,
) -> int:
    """How many times ``tick`` is called by the sections named."""
    chosen = sizes or sizes_for(quick)
    per_store = 0
    if "history" in sections:
        per_store += len(chosen.finished) + len(chosen.queued)
    if "fleet" in sections:
        per_store += len(chosen.parked) * len(chosen.leases) + 1
    return per_store * len(stores_for(pg_url))


@asynccontextmanager
async def fresh_store_url(kind: str, pg_url: str | None, label: str) -> AsyncIterator[str]:
    """A new, migrated store: a SQLite file in a temporary directory, or a fresh database."""
    if kind == SQLITE:
        with tempfile.TemporaryDirectory(prefix=f"leaseward-{label}-") as directory:
            url = f"sqlite:///{Path(directory) / 'runs.db'}"
            store = await open_store(url)
            await store.aclose()
            yield url
        return
    assert pg_url is not None
    from pg_support import fresh_database

    async with fresh_database(pg_url, label) as url:
        yield url


@contextmanager
def quiet_runtime() -> Iterator[None]:
    """The runtime's warnings off for a while: the benchmark reaps leases on purpose, by
    the hundred, and counts what it needs; a line each would bury the progress display."""
    logger = logging.getLogger("leaseward")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def milliseconds(values: Sequence[float]) -> dict[str, Any]:
    return {
        "median_ms": round(statistics.median(values) * 1000, 3),
        "min_ms": round(min(values) * 1000, 3),
        "max_ms": round(max(values) * 1000, 3),
        "samples_ms": [round(v * 1000, 3) for v in values],
    }


# == part 3: history =========================================================================

AGENT = "bench"
CLAIMER = "bench-claimer"
GONE_WORKER = "gone-worker"
CLAIM_LEASE_SECONDS = 300.0
QUEUED_BESIDE_HISTORY = 1_000
EXPIRED_PER_PASS = 100
CLAIM_SAMPLES = 25
REAP_SAMPLES = 9
WARM_UP_SAMPLES = 10
TARGET_RATIO = 2.0
OPERATIONS = (
    ("claim_32", "claim 32"),
    ("claim_1", "claim 1"),
    ("reap_100", f"reap {EXPIRED_PER_PASS} expired"),
    ("reap_0", "reap, none expired"),
)
# The statements a claim and a reaper pass execute: label, named query, the parameters
# that differ from one query to the next.
PLANNED_QUERIES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("claim", "claim_runs", {"source": "queued", "limit": 32}),
    ("reap scan", "running_leases", {"source": "running"}),
    ("reap journal read", "last_step", {}),
    ("reap write", "settle_runs", {}),
    ("lease renewal", "renew_leases", {"source": "running"}),
)
# Indexes that hold live runs only: walking one of them does not grow with history.
LIVE_INDEXES = ("runs_claimable", "runs_leased")

# Finished runs: terminal states as a real history mixes them, ids in order of age.
SQLITE_FILL_FINISHED = """
WITH RECURSIVE n(i) AS (SELECT :first UNION ALL SELECT i + 1 FROM n WHERE i < :last)
INSERT INTO runs (id, agent, mode, state, reason, input_json, result_json, epoch, requeues,
                  available_at, cancel_requested, created_at, updated_at, finished_at)
SELECT printf('done-%09d', i), :agent, 'queued',
       CASE WHEN i % 10 = 0 THEN 'failed' WHEN i % 10 = 1 THEN 'cancelled'
            WHEN i % 100 = 2 THEN 'dead_lettered' ELSE 'completed' END,
       CASE WHEN i % 10 = 0 THEN 'not_retryable' WHEN i % 10 = 1 THEN 'cancelled'
            WHEN i % 100 = 2 THEN 'retries_exhausted' ELSE 'completed' END,
       '{}', '"done"', 1, 0, :at + i * 1e-6, 0, :at + i * 1e-6, :at + i * 1e-6,
       :at + i * 1e-6 + 1
FROM n
"""
SQLITE_FILL_FINISHED_STEPS = """
WITH RECURSIVE n(i) AS (SELECT :first UNION ALL SELECT i + 1 FROM n WHERE i < :last)
INSERT INTO steps (run_id, seq, epoch, kind, status, output_json, started_at, finished_at)
SELECT printf('done-%09d', i), 0, 1, 'provider', 'succeeded', '{"text":"done"}',
       :at + i * 1e-6, :at + i * 1e-6 + 1
FROM n
"""
SQLITE_FILL_QUEUED = """
WITH RECURSIVE n(i) AS (SELECT :first UNION ALL SELECT i + 1 FROM n WHERE i < :last)
INSERT INTO runs (id, agent, mode, state, input_json, epoch, requeues, available_at,
                  cancel_requested, created_at, updated_at)
SELECT printf('queued-%09d', i), :agent, 'queued', 'queued', '{}', 0, 0, :at + i * 1e-6, 0,
       :at + i * 1e-6, :at + i * 1e-6
FROM n
"""
SQLITE_FILL_EXPIRED = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
INSERT INTO runs (id, agent, mode, state, input_json, epoch, requeues, lease_owner,
                  lease_expires_at, available_at, cancel_requested, created_at, updated_at)
SELECT printf('expired-%06d', i), :agent, 'queued', 'running', '{}', 1, 0, :owner,
       :now - 60 + i * 1e-6, :now - 120, 0, :now - 120, :now - 60
FROM n
"""
SQLITE_FILL_EXPIRED_STEPS = """
INSERT INTO steps (run_id, seq, epoch, kind, status, output_json, started_at, finished_at)
SELECT id, 0, 1, 'provider', 'succeeded', '{"text":"working"}', :now - 61, :now - 61
FROM runs WHERE id >= 'expired-' AND id < 'expired.'
"""
PG_FILL_FINISHED = """
INSERT INTO runs (id, agent, mode, state, reason, input_json, result_json, epoch, requeues,
                  available_at, cancel_requested, created_at, updated_at, finished_at)
SELECT 'done-' || lpad(i::text, 9, '0'), $3, 'queued',
       CASE WHEN i % 10 = 0 THEN 'failed' WHEN i % 10 = 1 THEN 'cancelled'
            WHEN i % 100 = 2 THEN 'dead_lettered' ELSE 'completed' END,
       CASE WHEN i % 10 = 0 THEN 'not_retryable' WHEN i % 10 = 1 THEN 'cancelled'
            WHEN i % 100 = 2 THEN 'retries_exhausted' ELSE 'completed' END,
       '{}', '"done"', 1, 0, t + i * 1e-6, FALSE, t + i * 1e-6, t + i * 1e-6, t + i * 1e-6 + 1
FROM generate_series($1::integer, $2::integer) AS i,
     (SELECT leaseward_now() - 86400 * 30 AS t) AS at
"""
PG_FILL_FINISHED_STEPS = """
INSERT INTO steps (run_id, seq, epoch, kind, status, output_json, started_at, finished_at)
SELECT 'done-' || lpad(i::text, 9, '0'), 0, 1, 'provider', 'succeeded', '{"text":"done"}',
       t + i * 1e-6, t + i * 1e-6 + 1
FROM generate_series($1::integer, $2::integer) AS i,
     (SELECT leaseward_now() - 86400 * 30 AS t) AS at
"""
PG_FILL_QUEUED = """
INSERT INTO runs (id, agent, mode, state, input_json, epoch, requeues, available_at,
                  cancel_requested, created_at, updated_at)
SELECT 'queued-' || lpad(i::text, 9, '0'), $3, 'queued', 'queued', '{}', 0, 0, t + i * 1e-6,
       FALSE, t + i * 1e-6, t + i * 1e-6
FROM generate_series($1::integer, $2::integer) AS i, (SELECT leaseward_now() - 3600 AS t) AS at
"""
PG_FILL_EXPIRED = """
INSERT INTO runs (id, agent, mode, state, input_json, epoch, requeues, lease_owner,
                  lease_expires_at, available_at, cancel_requested, created_at, updated_at)
SELECT 'expired-' || lpad(i::text, 6, '0'), $2, 'queued', 'running', '{}', 1, 0, $3,
       t - 60 + i * 1e-6, t - 120, FALSE, t - 120, t - 60
FROM generate_series(1, $1::integer) AS i, (SELECT leaseward_now() AS t) AS at
"""
PG_FILL_EXPIRED_STEPS = """
INSERT INTO steps (run_id, seq, epoch, kind, status, output_json, started_at, finished_at)
SELECT id, 0, 1, 'provider', 'succeeded', '{"text":"working"}', leaseward_now() - 61,
       leaseward_now() - 61
FROM runs WHERE id >= 'expired-' AND id < 'expired.'
"""
# Between samples, untimed: the claimed runs go back to the queue, the reaped ones away.
REQUEUE_CLAIMED = """
UPDATE runs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL
WHERE state = 'running' AND lease_owner = '{owner}'
"""
DELETE_EXPIRED_STEPS = "DELETE FROM steps WHERE run_id >= 'expired-' AND run_id < 'expired.'"
DELETE_EXPIRED_RUNS = "DELETE FROM runs WHERE id >= 'expired-' AND id < 'expired.'"


def settlement_json() -> str:
    """One reap's settlement, as settle_runs takes it, for the plan of the reap write."""
    return json.dumps(
        [
            {
                "run_id": "expired-000001",
                "epoch": 1,
                "source": "running",
                "target": "queued",
                "reason": None,
                "failure_class": "connection",
                "result_json": None,
                "error": "the lease of gone-worker expired",
                "spent_retries": 1,
                "delay_seconds": 1.0,
                "terminal": False,
                "renewals": 1,
            }
        ]
    )


def renewal_json() -> str:
    """One lease renewal, as renew_leases takes it, for the plan of the keeper's write."""
    return json.dumps([{"run_id": "expired-000001", "epoch": 1, "lease_seconds": 30.0}])


# The values the plans are asked for, as the store would bind them.
PLAN_PARAMETERS: dict[str, Any] = {
    "target": "running",
    "worker_id": CLAIMER,
    "lease_seconds": CLAIM_LEASE_SECONDS,
    "run_id": "expired-000001",
    "settlements": settlement_json(),
    "items": renewal_json(),
}


def full_scans(store: str, plan: Sequence[str]) -> list[str]:
    """The lines of a plan that read every row of runs or steps (or of an index over all)."""
    if store == SQLITE:
        pattern = re.compile(r"^\s*SCAN (runs|steps)\b")
        return [
            line
            for line in plan
            if pattern.match(line) and not any(index in line for index in LIVE_INDEXES)
        ]
    pattern = re.compile(r"Seq Scan on (runs|steps)\b")
    return [line.strip() for line in plan if pattern.search(line)]


class SQLiteFiller:
    """Plain SQL on a connection of its own, in a worker thread: the event loop stays free."""

    def __init__(self, url: str) -> None:
        self.path = url.removeprefix("sqlite:///").partition("?")[0]

    async def _run(self, *statements: tuple[str, dict[str, Any]]) -> None:
        def run() -> None:
            connection = sqlite3.connect(self.path)
            try:
                with connection:
                    for sql, params in statements:
                        connection.execute(sql, params)
            finally:
                connection.close()

        await anyio.to_thread.run_sync(run)

    async def finished(self, first: int, last: int) -> None:
        params = {"first": first, "last": last, "agent": AGENT, "at": time.time() - 86400 * 30}
        await self._run((SQLITE_FILL_FINISHED, params), (SQLITE_FILL_FINISHED_STEPS, params))

    async def queued(self, first: int, last: int) -> None:
        params = {"first": first, "last": last, "agent": AGENT, "at": time.time() - 3600}
        await self._run((SQLITE_FILL_QUEUED, params))

    async def settle(self) -> None:
        """SQLite's statistics stay as the runtime leaves them: it never runs ANALYZE."""

    async def expire(self, count: int) -> None:
        params = {"count": count, "agent": AGENT, "owner": GONE_WORKER, "now": time.time()}
        await self._run((SQLITE_FILL_EXPIRED, params), (SQLITE_FILL_EXPIRED_STEPS, params))

    async def clear_expired(self) -> None:
        await self._run((DELETE_EXPIRED_STEPS, {}), (DELETE_EXPIRED_RUNS, {}))

    async def requeue(self) -> None:
        await self._run((REQUEUE_CLAIMED.format(owner=CLAIMER), {}))

    async def plans(self) -> dict[str, list[str]]:
        queries = load_queries("sqlite")
        # SQLite has no arrays: the store binds lists as JSON text.
        params = {**PLAN_PARAMETERS, "agents": json.dumps([AGENT]), "exclude": "[]"}
        params["now"] = time.time()

        def explain() -> dict[str, list[str]]:
            connection = sqlite3.connect(self.path)
            try:
                found = {}
                for label, name, own in PLANNED_QUERIES:
                    rows = connection.execute(
                        "EXPLAIN QUERY PLAN " + queries[name], {**params, **own}
                    ).fetchall()
                    depth = {0: -1}
                    lines = []
                    for node, parent, _, detail in rows:
                        depth[node] = depth.get(parent, -1) + 1
                        lines.append("  " * depth[node] + detail)
                    found[label] = lines
                return found
            finally:
                connection.close()

        return await anyio.to_thread.run_sync(explain)


class PostgresFiller:
    def __init__(self, url: str) -> None:
        self.url = url

    async def _run(self, *statements: tuple[str, tuple[Any, ...]]) -> None:
        import asyncpg

        connection = await asyncpg.connect(self.url, command_timeout=3600)
        try:
            async with connection.transaction():
                for sql, args in statements:
                    await connection.execute(sql, *args)
        finally:
            await connection.close()

    async def finished(self, first: int, last: int) -> None:
        await self._run(
            (PG_FILL_FINISHED, (first, last, AGENT)), (PG_FILL_FINISHED_STEPS, (first, last))
        )

    async def queued(self, first: int, last: int) -> None:
        await self._run((PG_FILL_QUEUED, (first, last, AGENT)))

    async def settle(self) -> None:
        """What autovacuum would do after a bulk insert, done now so it does not run
        during the timing: fresh statistics, the visibility map and hint bits set."""
        import asyncpg

        connection = await asyncpg.connect(self.url, command_timeout=3600)
        try:
            await connection.execute("VACUUM ANALYZE runs, steps")
        finally:
            await connection.close()

    async def expire(self, count: int) -> None:
        await self._run((PG_FILL_EXPIRED, (count, AGENT, GONE_WORKER)), (PG_FILL_EXPIRED_STEPS, ()))

    async def clear_expired(self) -> None:
        await self._run((DELETE_EXPIRED_STEPS, ()), (DELETE_EXPIRED_RUNS, ()))

    async def requeue(self) -> None:
        await self._run((REQUEUE_CLAIMED.format(owner=CLAIMER), ()))

    async def plans(self) -> dict[str, list[str]]:
        import asyncpg

        from leaseward.storage.postgres import translate_params

        queries = load_queries("postgresql")
        params = {**PLAN_PARAMETERS, "agents": [AGENT], "exclude": []}
        connection = await asyncpg.connect(self.url)
        try:
            found = {}
            for label, name, own in PLANNED_QUERIES:
                text, names = translate_params(queries[name])
                given = {**params, **own}
                rows = await connection.fetch("EXPLAIN " + text, *[given[n] for n in names])
                found[label] = [row[0] for row in rows]
            return found
        finally:
            await connection.close()

    async def generic_plans(self) -> dict[str, list[str]]:
        """The plan each query gets as a generic plan, planned once for any parameters.

        The store's statements are prepared. PostgreSQL plans a prepared statement for
        its values at first, and may switch to one plan for all values (always, under
        ``plan_cache_mode = force_generic_plan``). A partial index whose predicate
        matches a parameter (``state = $1``) can serve only the plans made for values.
        """
        import asyncpg

        from leaseward.storage.postgres import translate_params

        queries = load_queries("postgresql")
        params = {**PLAN_PARAMETERS, "agents": [AGENT], "exclude": []}
        connection = await asyncpg.connect(self.url)
        try:
            found = {}
            for label, name, own in PLANNED_QUERIES:
                text, names = translate_params(queries[name])
                given = {**params, **own}
                # EXECUTE takes no bound parameters: the values go in as literals, and a
                # statement without any (the reaper's scan) takes no parentheses.
                values = ", ".join(sql_literal(given[n]) for n in names)
                execute = "EXPLAIN EXECUTE generic" + (f"({values})" if names else "")
                async with connection.transaction():
                    await connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                    await connection.execute(f"PREPARE generic AS {text}")
                    rows = await connection.fetch(execute)
                    await connection.execute("DEALLOCATE generic")
                found[label] = [row[0] for row in rows]
            return found
        finally:
            await connection.close()


def sql_literal(value: Any) -> str:
    if isinstance(value, list):
        return "ARRAY[" + ", ".join(sql_literal(v) for v in value) + "]::text[]"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


Filler = SQLiteFiller | PostgresFiller


async def timed(operation: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await operation()
    return time.perf_counter() - started


async def measure_operations(
    store: SQLStore, filler: Filler, queued: int
) -> dict[str, dict[str, Any]]:
    """Each operation timed alone, one sample after the other, on the same store, which
    holds ``queued`` queued runs whenever a claim starts."""
    reaper = LeaseReaper(store, interval_seconds=60.0, policy=RecoveryPolicy())

    async def claim(limit: int) -> list[Any]:
        return await store.claim_runs(CLAIMER, limit, CLAIM_LEASE_SECONDS, [AGENT])

    # Untimed: the first statements after a bulk fill read cold pages and plan anew.
    for _ in range(WARM_UP_SAMPLES):
        await claim(32)
        await reaper.reap_once()
    await filler.requeue()

    samples: dict[str, list[float]] = {key: [] for key, _ in OPERATIONS}
    claimed: dict[str, int] = {}
    for key, limit in (("claim_32", 32), ("claim_1", 1)):
        got = left = 0
        for _ in range(CLAIM_SAMPLES):
            if left < limit:
                await filler.requeue()
                left = queued
            started = time.perf_counter()
            runs = len(await claim(limit))
            samples[key].append(time.perf_counter() - started)
            got += runs
            left -= runs
        claimed[key] = got
    await filler.requeue()
    reaped = 0
    for _ in range(REAP_SAMPLES):
        await filler.expire(EXPIRED_PER_PASS)
        # Untimed: a reaper reaps only leases it has watched go unrenewed, so it reads
        # them once first (they were granted next to nothing: they are due at once).
        await reaper.reap_once()
        started = time.perf_counter()
        reaped += len(await reaper.reap_once())
        samples["reap_100"].append(time.perf_counter() - started)
        await filler.clear_expired()
        samples["reap_0"].append(await timed(reaper.reap_once))
    found = {key: milliseconds(values) for key, values in samples.items()}
    found["claim_32"]["runs_claimed"] = claimed["claim_32"]
    found["claim_1"]["runs_claimed"] = claimed["claim_1"]
    found["reap_100"]["runs_reaped"] = reaped
    return found


async def history_series(
    kind: str,
    pg_url: str | None,
    series: str,
    sizes: Sequence[int],
    tick: Callable[[str], None],
    points: list[dict[str, Any]],
) -> None:
    """One store grown through ``sizes`` (finished or queued runs), measured at each; a
    point is added to ``points`` as soon as it is measured."""
    async with fresh_store_url(kind, pg_url, f"costs_{series}") as url:
        filler: Filler = SQLiteFiller(url) if kind == SQLITE else PostgresFiller(url)
        if series == "finished":
            await filler.queued(1, QUEUED_BESIDE_HISTORY)
        store = await open_store(url)
        try:
            have = 0
            for size in sizes:
                started = time.perf_counter()
                if size > have:
                    grow = filler.finished if series == "finished" else filler.queued
                    await grow(have + 1, size)
                    have = size
                await filler.settle()
                fill_seconds = time.perf_counter() - started
                queued = QUEUED_BESIDE_HISTORY if series == "finished" else size
                operations = await measure_operations(store, filler, queued)
                await filler.expire(EXPIRED_PER_PASS)
                plans = await filler.plans()
                generic: dict[str, list[str]] | None = None
                if isinstance(filler, PostgresFiller):
                    generic = await filler.generic_plans()
                await filler.clear_expired()
                points.append(
                    {
                        "store": kind,
                        "series": series,
                        "size": size,
                        "finished_runs": size if series == "finished" else 0,
                        "queued_runs": queued,
                        "fill_seconds": round(fill_seconds, 3),
                        "operations": operations,
                        "plans": plans,
                        "full_scans": {
                            label: scans
                            for label, plan in plans.items()
                            if (scans := full_scans(kind, plan))
                        },
                        "generic_plans": generic,
                        "generic_full_scans": {
                            label: scans
                            for label, plan in (generic or {}).items()
                            if (scans := full_scans(kind, plan))
                        },
                    }
                )
                tick(f"history {STORE_NAMES[kind]}: {size:,} {series} runs")
        finally:
            await store.aclose()


def add_ratios(points: Sequence[dict[str, Any]]) -> None:
    """Each operation's median over the same store and series' smallest size."""
    for point in points:
        first = next(
            p for p in points if (p["store"], p["series"]) == (point["store"], point["series"])
        )
        point["ratio_to_first"] = {
            key: round(op["median_ms"] / first["operations"][key]["median_ms"], 3)
            for key, op in point["operations"].items()
        }


def sizes_of(points: Sequence[dict[str, Any]], store: str, series: str) -> list[int]:
    return [p["size"] for p in points if p["store"] == store and p["series"] == series]


async def history_section(
    *,
    quick: bool,
    pg_url: str | None,
    tick: Callable[[str], None],
    sizes: Sizes | None = None,
) -> dict[str, Any]:
    """Part 3: claim and reaper-pass latency with 1k..1M finished and 1k..100k queued runs."""
    chosen = sizes or sizes_for(quick)
    started = time.perf_counter()
    points: list[dict[str, Any]] = []
    failures: list[dict[str, str]] = []
    with quiet_runtime():
        for kind in stores_for(pg_url):
            for series, sizes_here in (("finished", chosen.finished), ("queued", chosen.queued)):
                before = len(points)
                try:
                    await history_series(kind, pg_url, series, sizes_here, tick, points)
                except Exception as exc:
                    # A shared server may restart under the benchmark: say so, and go on.
                    unit = f"history {STORE_NAMES[kind]}: {series} runs"
                    failures.append({"unit": unit, "error": describe(exc)})
                    for size in sizes_here[len(points) - before :]:
                        tick(f"history {STORE_NAMES[kind]}: {size:,} {series} runs, failed")
    add_ratios(points)
    return {
        "section": "history",
        "settings": {
            "stores": list(stores_for(pg_url)),
            "finished_sizes": list(chosen.finished),
            "queued_sizes": list(chosen.queued),
            "queued_beside_history": QUEUED_BESIDE_HISTORY,
            "journal_rows_per_finished_run": 1,
            "expired_per_reap_pass": EXPIRED_PER_PASS,
            "claim_samples": CLAIM_SAMPLES,
            "reap_samples": REAP_SAMPLES,
            "claim_lease_seconds": CLAIM_LEASE_SECONDS,
            "target_ratio": TARGET_RATIO,
        },
        "points": points,
        "over_target": [
            {
                "store": p["store"],
                "series": p["series"],
                "size": p["size"],
                "operation": key,
                "ratio": ratio,
            }
            for p in points
            for key, ratio in p["ratio_to_first"].items()
            if ratio > TARGET_RATIO
        ],
        "full_scans": [
            {
                "store": p["store"],
                "series": p["series"],
                "size": p["size"],
                "query": label,
                "at_largest_size": p["size"] == max(sizes_of(points, p["store"], p["series"])),
            }
            for p in points
            for label in p["full_scans"]
        ],
        "generic_full_scans_at_largest_size": [
            {"store": p["store"], "series": p["series"], "size": p["size"], "query": label}
            for p in points
            for label in p["generic_full_scans"]
            if p["size"] == max(sizes_of(points, p["store"], p["series"]))
        ],
        "failures": failures,
        "seconds": round(time.perf_counter() - started, 3),
    }


def print_history(result: dict[str, Any]) -> None:
    settings = result["settings"]
    print(
        f"Cost against history: median ms of {settings['claim_samples']} claims and "
        f"{settings['reap_samples']} reaper passes per size (ratio to the smallest size); "
        f"finished series beside {settings['queued_beside_history']:,} queued runs"
    )
    print()
    header = f"{'store':<10} {'series':<8} {'size':>9} {'fill s':>7}" + "".join(
        f" {label:>20}" for _, label in OPERATIONS
    )
    print(header)
    print("-" * len(header))
    for p in result["points"]:
        cells = "".join(
            f" {p['operations'][key]['median_ms']:>11.2f} ({p['ratio_to_first'][key]:>5.2f}x)"
            for key, _ in OPERATIONS
        )
        print(
            f"{STORE_NAMES[p['store']]:<10} {p['series']:<8} {p['size']:>9,} "
            f"{p['fill_seconds']:>7.1f}{cells}"
        )
    print()
    print(
        "claim N = store.claim_runs of N runs (a transaction each); reap = "
        "LeaseReaper.reap_once(): the running_leases scan, one last_step read per expired run\n"
        "and the settle_runs write; fill s = the untimed bulk insert (and on PostgreSQL "
        "VACUUM ANALYZE) before the size."
    )
    over = result["over_target"]
    if over:
        print(f"Over the target ({settings['target_ratio']:g}x the smallest size):")
        for o in over:
            print(
                f"  {STORE_NAMES[o['store']]} {o['series']} {o['size']:,}: {o['operation']} "
                f"{o['ratio']:.2f}x"
            )
    else:
        print(f"Every ratio is within the target of {settings['target_ratio']:g}x.")
    print()
    for kind in settings["stores"]:
        for series in ("finished", "queued"):
            mine = [p for p in result["points"] if p["store"] == kind and p["series"] == series]
            if not mine:
                continue
            largest = mine[-1]
            explain = "EXPLAIN QUERY PLAN" if kind == SQLITE else "EXPLAIN"
            print(f"{explain}, {STORE_NAMES[kind]}, {largest['size']:,} {series} runs:")
            for label, plan in largest["plans"].items():
                print(f"  {label}:")
                for line in plan:
                    print(f"    {line}")
    scans = result["full_scans"]
    largest = [s for s in scans if s["at_largest_size"]]
    if largest:
        print("FULL SCAN at the largest size (a plan reading all of runs or steps):")
        for s in largest:
            print(f"  {STORE_NAMES[s['store']]} {s['series']} {s['size']:,}: {s['query']}")
    else:
        print("At the largest sizes no plan reads the whole runs or steps table.")
    smaller = [s for s in scans if not s["at_largest_size"]]
    if smaller:
        listed = ", ".join(
            f"{STORE_NAMES[s['store']]} {s['series']} {s['size']:,} {s['query']}" for s in smaller
        )
        print(
            f"Whole-table reads at smaller sizes only (PostgreSQL costs a small table's "
            f"sequential scan below an index; the ratios above show what they cost): {listed}."
        )
    last = {(p["store"], p["series"]): p for p in result["points"]}
    generic = [p for p in last.values() if p["generic_full_scans"]]
    if generic:
        print(
            "PostgreSQL's generic plans (one plan for any parameters: what a prepared "
            "statement runs under plan_cache_mode = force_generic_plan, or once the planner "
            "prices it below the plans made for the values) that read the whole table at "
            "the largest size:"
        )
        for p in generic:
            for label, lines in p["generic_full_scans"].items():
                scans = "; ".join(line.strip().removeprefix("->  ") for line in lines)
                print(f"  {label} ({p['series']} {p['size']:,}): {scans}")
    print_failures(result)


def print_failures(result: dict[str, Any]) -> None:
    for failure in result["failures"]:
        print(f"FAILED, left out of the tables: {failure['unit']}: {failure['error']}")


# == part 4: fleet ===========================================================================

PARKER = "parker"
SHORT = "short"
PARK_SLEEP_SECONDS = 3600.0
PARK_TOOL_TIMEOUT_SECONDS = 7200.0
SHORT_LOOPS = 16
SUBMIT_CHUNK = 1000
PARK_TIMEOUT_SECONDS = 60.0
PARK_STALL_SECONDS = 10.0
PARK_POLL_SECONDS = 0.25
SHORT_RUN_TIMEOUT_SECONDS = 60.0
CELL_TIMEOUT_SECONDS = PARK_TIMEOUT_SECONDS + 120.0
BASELINE_LEASE_SECONDS = 30.0
WINDOW_TARGET_SECONDS = 3.0
WINDOW_MAX_SECONDS = 5.0
QUICK_WINDOW_TARGET_SECONDS = 2.0
QUICK_WINDOW_MAX_SECONDS = 2.0
LAG_PROBE_SECONDS = 0.02
POLL_INTERVAL_SECONDS = 0.05


def renew_interval(lease_seconds: float) -> float:
    """How often the lease keeper renews the leases of runs inside a call."""
    return lease_seconds / 3


def reap_interval(lease_seconds: float) -> float:
    """A fleet that wants short leases for fast detection reaps as often: a dead worker
    is found within lease + reap interval."""
    return max(0.5, min(5.0, lease_seconds / 2))


def window_for(lease_seconds: float, quick: bool) -> float:
    """The fewest whole renewal intervals that reach the target, so a periodic renewal
    is counted as often as it happens; the target alone when one interval is longer
    than the maximum (the rates are then what that part of an interval held)."""
    target = QUICK_WINDOW_TARGET_SECONDS if quick else WINDOW_TARGET_SECONDS
    longest = QUICK_WINDOW_MAX_SECONDS if quick else WINDOW_MAX_SECONDS
    interval = renew_interval(lease_seconds)
    if interval > longest:
        return target
    intervals = math.ceil(target / interval - 1e-9)
    if intervals * interval > longest:
        intervals = max(1, math.floor(longest / interval))
    return intervals * interval


class Parking:
    """Where the parked runs' tool counts who is inside, and sleeps."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.inside = 0
        self.entered = 0
        self.most_inside = 0
        self.most_inside_at = time.monotonic()
        self.all_inside = anyio.Event()

    async def park(self) -> None:
        self.entered += 1
        self.inside += 1
        if self.inside > self.most_inside:
            self.most_inside, self.most_inside_at = self.inside, time.monotonic()
        if self.inside >= self.expected:
            self.all_inside.set()
        try:
            await anyio.sleep(PARK_SLEEP_SECONDS)
        finally:
            self.inside -= 1

    async def wait(self) -> None:
        """Until every run is inside; or until no new high of runs inside was reached for
        a while (calls are cut off as fast as runs come in: they will not all get in),
        or the timeout."""
        deadline = time.monotonic() + PARK_TIMEOUT_SECONDS
        self.most_inside_at = time.monotonic()
        while not self.all_inside.is_set():
            now = time.monotonic()
            if now > deadline or now - self.most_inside_at > PARK_STALL_SECONDS:
                return
            with anyio.move_on_after(PARK_POLL_SECONDS):
                await self.all_inside.wait()


def fleet_app(parking: Parking) -> App:
    @tool(timeout_seconds=PARK_TOOL_TIMEOUT_SECONDS)
    async def park(ctx: ToolContext) -> str:
        """A long call: an HTTP request that takes its time, a human, a sleep."""
        await parking.park()
        return "woke"

    @tool
    async def echo(ctx: ToolContext, n: int) -> int:
        return n

    parker = ScriptedProvider(
        [ProviderReply(tool_calls=(ToolCall(park.name, {}, "park-0"),)), ProviderReply(text="ok")]
    )
    short = ScriptedProvider(
        [
            ProviderReply(tool_calls=(ToolCall(echo.name, {"n": 1}, "echo-0"),)),
            ProviderReply(text="ok"),
        ]
    )
    return App(
        agents=[
            Agent(PARKER, parker, tools=[park], max_steps=2),
            Agent(SHORT, short, tools=[echo], max_steps=2),
        ]
    )


def counters(rt: Runtime, metrics: Metrics) -> dict[str, Any]:
    stats = rt.supervisor.persister.stats
    registry = metrics.registry
    return {
        "at": time.perf_counter(),
        "cpu": time.process_time(),
        "batches": stats.batches,
        "items": stats.items,
        "commit_seconds": stats.commit_seconds,
        "reaped": registry.get_sample_value("leaseward_leases_reaped_total") or 0.0,
        "renewed": registry.get_sample_value("leaseward_leases_renewed_total") or 0.0,
        "keeper": attrs.asdict(rt.supervisor.keeper.stats),
    }


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


async def fleet_window(rt: Runtime, seconds: float) -> tuple[int, list[float]]:
    """Short runs submitted and awaited in loops beside the parked ones, and the event
    loop's lag, for ``seconds``; returns the short runs completed and the lags."""
    completed = 0
    lags: list[float] = []

    async def short_loop(loop: int) -> None:
        nonlocal completed
        n = 0
        while True:
            run_id = await rt.submit(SHORT, {"loop": loop, "n": n})
            n += 1
            info = await rt.wait(run_id, timeout=SHORT_RUN_TIMEOUT_SECONDS)
            completed += info.state is RunState.COMPLETED

    async def lag_probe() -> None:
        while True:
            started = time.perf_counter()
            await anyio.sleep(LAG_PROBE_SECONDS)
            lags.append(time.perf_counter() - started - LAG_PROBE_SECONDS)

    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lag_probe)
            for loop in range(SHORT_LOOPS):
                tasks.start_soon(short_loop, loop)
    return completed, lags


def summarise(
    cell: dict[str, Any],
    before: dict[str, Any],
    after: dict[str, Any],
    completed: int,
    lags: Sequence[float],
) -> None:
    """The window's figures, from the counters at its start and end, added to ``cell``."""
    elapsed = after["at"] - before["at"]
    interval = renew_interval(cell["lease_seconds"])
    cell["measured_seconds"] = round(elapsed, 3)
    cell["intervals_in_window"] = round(elapsed / interval, 2)
    cell["expected_renewal_rows_per_second"] = round(cell["parked"] / interval, 1)
    keeper = {key: after["keeper"][key] - before["keeper"][key] for key in before["keeper"]}
    keeper["renewal_batches_per_second"] = round(keeper["renewal_batches"] / elapsed, 3)
    keeper["renewals_per_second"] = round(keeper["renewals"] / elapsed, 1)
    cell["keeper"] = keeper
    batches = after["batches"] - before["batches"]
    items = after["items"] - before["items"]
    committing = after["commit_seconds"] - before["commit_seconds"]
    cell["persister"] = {
        "batches": batches,
        "items": items,
        "batches_per_second": round(batches / elapsed, 1),
        "items_per_second": round(items / elapsed, 1),
        "commit_seconds": round(committing, 4),
        "busy_share": round(committing / elapsed, 3),
    }
    # The metric counts every renewal persisted: the keeper's and those riding on records.
    renewed = int(after["renewed"] - before["renewed"])
    cell["renewed_at_step_boundaries"] = renewed - keeper["renewals"]
    cell["reaped_in_window"] = int(after["reaped"] - before["reaped"])
    cell["reaped_total"] = int(after["reaped"])
    cell["short_runs_completed"] = completed
    cell["short_runs_per_second"] = round(completed / elapsed, 1)
    cell["cpu_seconds"] = round(after["cpu"] - before["cpu"], 3)
    cell["cpu_share"] = round((after["cpu"] - before["cpu"]) / elapsed, 3)
    cell["loop_lag_ms"] = {
        "p50": round(percentile(lags, 50) * 1000, 2),
        "p99": round(percentile(lags, 99) * 1000, 2),
        "max": round(max(lags, default=0.0) * 1000, 2),
    }


async def measure_cell(spec: dict[str, Any]) -> None:
    """One fleet cell, in a process of its own (``--fleet-cell``) on a store made for it:
    prints the cell as a JSON line and ends the process at once."""
    parked: int = spec["parked"]
    lease_seconds: float = spec["lease_seconds"]
    parking = Parking(parked)
    metrics = Metrics()
    window = window_for(lease_seconds, spec["quick"])
    cell: dict[str, Any] = {
        "store": spec["store"],
        "parked": parked,
        "lease_seconds": lease_seconds,
        "renew_interval_seconds": round(renew_interval(lease_seconds), 3),
        "reap_interval_seconds": reap_interval(lease_seconds),
        "concurrency": parked + SHORT_LOOPS,
        "window_seconds": round(window, 3),
    }
    with quiet_runtime():
        async with Runtime.open(
            spec["url"],
            fleet_app(parking),
            concurrency=parked + SHORT_LOOPS,
            lease_seconds=lease_seconds,
            reap_interval_seconds=reap_interval(lease_seconds),
            poll_interval_seconds=POLL_INTERVAL_SECONDS,
            metrics=metrics,
        ) as rt:
            started = time.perf_counter()
            opened = counters(rt, metrics)
            for offset in range(0, parked, SUBMIT_CHUNK):
                count = min(SUBMIT_CHUNK, parked - offset)
                await rt.submit_many(PARKER, [{"n": offset + i} for i in range(count)])
            if parked:
                await parking.wait()
            cell["park_seconds"] = round(time.perf_counter() - started, 3)
            cell["all_parked"] = parking.inside >= parked
            before = counters(rt, metrics)
            with CollectorPauses() as pauses:
                completed, lags = await fleet_window(rt, window)
            after = counters(rt, metrics)
            cell["collector"] = pauses.figures()
            cell["parked_at_end"] = parking.inside
            cell["park_entries"] = parking.entered
            summarise(cell, before, after, completed, lags)
            cell["keeper_since_open"] = {
                key: after["keeper"][key] - opened["keeper"][key] for key in opened["keeper"]
            }
            print(json.dumps(cell), flush=True)
            # Leaving the Runtime would drain it: thousands of interrupted calls settled
            # one by one, seconds longer than the measurement, on a store that is dropped
            # next anyway. Ending here is a crash the store is built to survive.
            os._exit(0)


async def fleet_cell(
    kind: str, pg_url: str | None, parked: int, lease_seconds: float, quick: bool
) -> dict[str, Any]:
    """One cell measured in a child process, on a fresh store; each cell starts from a
    clean heap, and the parked runs end with the child instead of being drained."""
    async with fresh_store_url(kind, pg_url, "costs_fleet") as url:
        spec = {
            "url": url,
            "store": kind,
            "parked": parked,
            "lease_seconds": lease_seconds,
            "quick": quick,
        }
        command = [sys.executable, str(Path(__file__).resolve()), "--fleet-cell", json.dumps(spec)]
        with anyio.fail_after(CELL_TIMEOUT_SECONDS):
            done = await anyio.run_process(command, check=False)
    out = done.stdout.decode().strip()
    if done.returncode != 0 or not out:
        raise RuntimeError(
            f"the cell's process exited with {done.returncode}: "
            f"{done.stderr.decode().strip()[-2000:]}"
        )
    cell: dict[str, Any] = json.loads(out.splitlines()[-1])
    return cell


async def fleet_section(
    *,
    quick: bool,
    pg_url: str | None,
    tick: Callable[[str], None],
    sizes: Sizes | None = None,
) -> dict[str, Any]:
    """Part 4: renewal commits and other work's throughput with N runs parked in calls."""
    chosen = sizes or sizes_for(quick)
    started = time.perf_counter()
    cells = []
    failures: list[dict[str, str]] = []
    for kind in stores_for(pg_url):
        plan = [(0, BASELINE_LEASE_SECONDS)]
        plan += [(parked, lease) for parked in chosen.parked for lease in chosen.leases]
        for parked, lease in plan:
            label = f"fleet {STORE_NAMES[kind]}: {parked:,} parked, lease {lease:g} s"
            try:
                cells.append(await fleet_cell(kind, pg_url, parked, lease, quick))
            except Exception as exc:
                failures.append({"unit": label, "error": describe(exc)})
                label += ", failed"
            tick(label)
    for cell in cells:
        baseline = next((c for c in cells if c["store"] == cell["store"] and not c["parked"]), None)
        cell["short_runs_vs_no_parked"] = (
            round(cell["short_runs_per_second"] / baseline["short_runs_per_second"], 3)
            if baseline and baseline["short_runs_per_second"]
            else None
        )
    return {
        "section": "fleet",
        "settings": {
            "stores": list(stores_for(pg_url)),
            "parked": list(chosen.parked),
            "lease_seconds": list(chosen.leases),
            "baseline_lease_seconds": BASELINE_LEASE_SECONDS,
            "short_loops": SHORT_LOOPS,
            "park_sleep_seconds": PARK_SLEEP_SECONDS,
            "lag_probe_seconds": LAG_PROBE_SECONDS,
            "poll_interval_seconds": POLL_INTERVAL_SECONDS,
            "renew_interval": "lease_seconds / 3",
            "window_seconds": {
                "target": QUICK_WINDOW_TARGET_SECONDS if quick else WINDOW_TARGET_SECONDS,
                "longest": QUICK_WINDOW_MAX_SECONDS if quick else WINDOW_MAX_SECONDS,
            },
            "reap_interval": "lease_seconds / 2, within 0.5..5 s",
        },
        "cells": cells,
        "failures": failures,
        "seconds": round(time.perf_counter() - started, 3),
    }


def print_fleet(result: dict[str, Any]) -> None:
    settings = result["settings"]
    print(
        f"Short leases in a healthy fleet: N runs parked in a call, {settings['short_loops']} "
        "loops submitting and awaiting short runs beside them"
    )
    print()
    header = (
        f"{'store':<10} {'N':>6} {'lease s':>7} {'renew s':>7} {'window s':>8} "
        f"{'renew tx/s':>10} {'renew rows/s':>12} {'expected':>9} {'failed':>6} {'tx/s':>6} "
        f"{'busy':>5} "
        f"{'short/s':>7} {'vs 0':>5} {'cpu':>5} {'lag p50':>7} {'p99 ms':>7} {'max ms':>7} "
        f"{'GC ms':>6} {'guard':>5} {'reaped':>6} {'parked':>6}"
    )
    print(header)
    print("-" * len(header))
    for c in result["cells"]:
        keeper = c["keeper"]
        parked = f"{c['parked_at_end']}" if c["parked"] else "-"
        versus = c["short_runs_vs_no_parked"]
        versus_text = "-" if versus is None else f"{versus:.2f}"
        print(
            f"{STORE_NAMES[c['store']]:<10} {c['parked']:>6,} {c['lease_seconds']:>7g} "
            f"{c['renew_interval_seconds']:>7.2f} {c['measured_seconds']:>8.2f} "
            f"{keeper['renewal_batches_per_second']:>10.2f} {keeper['renewals_per_second']:>12.0f} "
            f"{c['expected_renewal_rows_per_second']:>9.0f} {keeper['renewals_failed']:>6} "
            f"{c['persister']['batches_per_second']:>6.0f} "
            f"{c['persister']['busy_share'] * 100:>4.0f}% {c['short_runs_per_second']:>7.1f} "
            f"{versus_text:>5} {c['cpu_share'] * 100:>4.0f}% {c['loop_lag_ms']['p50']:>7.2f} "
            f"{c['loop_lag_ms']['p99']:>7.2f} {c['loop_lag_ms']['max']:>7.1f} "
            f"{c['collector']['longest_seconds'] * 1000:>6.0f} {keeper['guard_cancels']:>5} "
            f"{c['reaped_in_window']:>6} {parked:>6}"
        )
    print()
    windows = settings["window_seconds"]
    legend = [
        "renew s = lease_seconds / 3, how often the lease keeper renews; window s = measured "
        f"(the fewest whole renewal intervals reaching {windows['target']:g} s, or "
        f"{windows['target']:g} s when one is longer than {windows['longest']:g} s);",
        "renew tx/s, rows/s = the keeper's renewal writes and the leases they renewed, per "
        "second of the window; expected = N / renew s, the steady state;",
        "failed = renewals the store did not take; tx/s = every Persister transaction; busy = "
        "share of the window the Persister spent committing;",
        "short/s = short runs (claim, two provider turns, one read tool, settle) completed per "
        "second; vs 0 = that over the same store's cell without parked runs;",
        "cpu = this process's CPU time / window; lag = how late a 20 ms sleep woke; GC ms = "
        "the garbage collector's longest pause in the window;",
        "guard = calls the keeper cancelled because their lease could not be renewed;",
        "reaped = leases reaped in the window; parked = runs inside the call at the window's end.",
    ]
    print("\n".join(legend))
    for c in result["cells"]:
        since_open = c["keeper_since_open"]
        if c["all_parked"] and not since_open["guard_cancels"]:
            continue
        print(
            f"{'NOT ALL PARKED' if not c['all_parked'] else 'CALLS CUT OFF'}: "
            f"{STORE_NAMES[c['store']]} N={c['parked']:,} lease {c['lease_seconds']:g} s: "
            f"{c['parked_at_end']:,} inside at the end, {c['park_entries']:,} entries into the "
            f"call, after {c['park_seconds']:.0f} s of parking; since the Runtime opened the "
            f"keeper cut off {since_open['guard_cancels']:,} calls, "
            f"{since_open['renewals_failed']:,} renewals failed, {c['reaped_total']:,} reaped"
        )
    print_failures(result)


# == running alone ============================================================================


def parse_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("sizes must be positive integers")
    return tuple(sorted(set(values)))


def parse_seconds(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of seconds: {text!r}"
        ) from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("lease seconds must be positive")
    return tuple(sorted(set(values)))


def parse_sections(text: str) -> tuple[str, ...]:
    sections = tuple(part.strip() for part in text.split(",") if part.strip())
    if not sections or any(s not in SECTIONS for s in sections):
        raise argparse.ArgumentTypeError(f"sections are a comma-separated subset of {SECTIONS}")
    return sections


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="What leases cost: claim and reaper-pass latency against 1k..1M finished "
        "and 1k..100k queued runs, with query plans (history); renewal commits and "
        "throughput with 1,000 and 10,000 runs parked in long calls for lease_seconds "
        "2..300 (fleet). SQLite, and PostgreSQL with --pg-url; results as JSON."
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer sizes and shorter windows: 1k and 100k finished, 1k and 10k queued, "
        "1,000 parked with leases of 2 and 30 s (under 30 s on SQLite)",
    )
    parser.add_argument(
        "--pg-url",
        default=None,
        metavar="postgresql://...",
        help="also measure PostgreSQL: a server and maintenance database to create fresh "
        "databases from (each dropped after)",
    )
    parser.add_argument(
        "--sections",
        type=parse_sections,
        default=SECTIONS,
        metavar="S,S",
        help="history and/or fleet (default: history,fleet)",
    )
    parser.add_argument(
        "--finished", type=parse_ints, metavar="N,N,...", help="finished-run sizes (history)"
    )
    parser.add_argument(
        "--queued", type=parse_ints, metavar="N,N,...", help="queued-run sizes (history)"
    )
    parser.add_argument(
        "--parked", type=parse_ints, metavar="N,N,...", help="parked-run counts (fleet)"
    )
    parser.add_argument(
        "--leases", type=parse_seconds, metavar="S,S,...", help="lease_seconds values (fleet)"
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="where lease-costs-<UTC timestamp>.json and lease-costs-latest.json go "
        "(default: bench/results)",
    )
    parser.add_argument("--fleet-cell", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.fleet_cell is not None:
        anyio.run(measure_cell, json.loads(args.fleet_cell))
        return
    if args.pg_url is not None and not args.pg_url.startswith(("postgresql://", "postgres://")):
        raise SystemExit("--pg-url takes a postgresql:// URL")
    base = sizes_for(args.quick)
    sizes = Sizes(
        finished=args.finished or base.finished,
        queued=args.queued or base.queued,
        parked=args.parked or base.parked,
        leases=args.leases or base.leases,
    )
    total = planned_units(args.quick, args.pg_url, sections=args.sections, sizes=sizes)
    done = 0
    started = time.perf_counter()

    def tick(label: str) -> None:
        nonlocal done
        done += 1
        elapsed = time.perf_counter() - started
        print(f"[{done}/{total}] {elapsed:6.1f} s  {label}", file=sys.stderr, flush=True)

    async def run_sections() -> dict[str, Any]:
        found: dict[str, Any] = {}
        if "history" in args.sections:
            found["history"] = await history_section(
                quick=args.quick, pg_url=args.pg_url, tick=tick, sizes=sizes
            )
        if "fleet" in args.sections:
            found["fleet"] = await fleet_section(
                quick=args.quick, pg_url=args.pg_url, tick=tick, sizes=sizes
            )
        return found

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    found = anyio.run(run_sections)
    seconds = time.perf_counter() - started
    if "history" in found:
        print_history(found["history"])
        print()
    if "fleet" in found:
        print_fleet(found["fleet"])
        print()
    print(f"total {seconds:.1f} s")
    document = {
        "benchmark": "lease-costs",
        "started_utc": stamp,
        "command": [Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)],
        "quick": args.quick,
        "store_server": None if args.pg_url is None else without_password(args.pg_url),
        "environment": environment(),
        "total_seconds": round(seconds, 3),
        **found,
    }
    path = write_results(args.results_dir, "lease-costs", document, latest=not args.quick)
    print(saved(path, latest=not args.quick))
    if any(section["failures"] for section in found.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
