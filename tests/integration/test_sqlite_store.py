"""The SQLite store itself: its migrations on a file, pragmas, and partial indexes.

What every dialect must do alike (claiming, fencing, reaping, cancelling) is in
test_store_conformance.py, which runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest

from leaseward import SchemaMismatch, StoreError
from leaseward.runtime.clock import ManualClock
from leaseward.runtime.lifecycle import RunState
from leaseward.runtime.listing import RunListing
from leaseward.storage import SQLStore, open_store
from leaseward.storage.migrations import MIGRATIONS
from leaseward.storage.queries import load_queries
from leaseward.storage.sqlite import BUSY_TIMEOUT_MS, SQLiteExecutor, SQLiteOptions
from tests.integration.test_purged_keys import migrate_to
from tests.integration.test_store_conformance import new_run

pytestmark = pytest.mark.anyio

QUERIES = load_queries("sqlite")


def path_of(db_url: str) -> Path:
    return Path(db_url.removeprefix("sqlite:///"))


def raw(db_url: str) -> sqlite3.Connection:
    return sqlite3.connect(path_of(db_url), isolation_level=None)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def store(anyio_backend: str, db_url: str, clock: ManualClock) -> AsyncIterator[SQLStore]:
    opened = await open_store(db_url, clock=clock)
    try:
        yield opened
    finally:
        await opened.aclose()


# -- migrations -------------------------------------------------------------------------


def recorded_migrations(db_url: str) -> list[tuple[int, str, float]]:
    connection = raw(db_url)
    try:
        rows = connection.execute(
            "SELECT version, name, applied_at FROM schema_migrations ORDER BY version"
        )
        return [tuple(row) for row in rows]
    finally:
        connection.close()


async def test_a_new_file_gets_every_schema_version_from_1(db_url: str, clock: ManualClock) -> None:
    store = await open_store(db_url, clock=clock)
    try:
        assert await store.migrate() == MIGRATIONS[-1].version
    finally:
        await store.aclose()
    connection = raw(db_url)
    try:
        tables = {
            name
            for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    finally:
        connection.close()
    recorded = recorded_migrations(db_url)
    assert recorded[0] == (1, "initial", clock.now())
    assert recorded == [(m.version, m.name, clock.now()) for m in MIGRATIONS]
    assert {"runs", "steps", "schema_migrations"} <= tables


async def test_a_journal_from_before_version_13_is_kept_row_for_row_in_a_rowid_table(
    db_url: str, clock: ManualClock
) -> None:
    connection = raw(db_url)
    try:
        connection.execute("PRAGMA foreign_keys = ON")
        connection.execute("BEGIN")
        connection.execute(QUERIES["create_migrations_table"])
        for migration in MIGRATIONS:
            if migration.version < 13:
                for statement in migration.statements("sqlite"):
                    connection.execute(statement)
                connection.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, 0)",
                    (migration.version, migration.name),
                )
        connection.execute(
            "INSERT INTO runs (id, agent, mode, state, input_json, epoch, requeues,"
            " available_at, cancel_requested, created_at, updated_at)"
            " VALUES ('r1', 'a', 'queued', 'running', '{}', 1, 0, 0, 0, 0, 0)"
        )
        connection.executemany(
            "INSERT INTO steps (run_id, seq, epoch, kind, tool, call_id, effect, status,"
            " arguments_json, output_json, started_at, finished_at, source_json)"
            " VALUES ('r1', ?, 1, 'tool', 'charge', ?, 'non_idempotent_write', ?,"
            ' \'{"amount":5}\', ?, 1.5, ?, \'{"kind":"function"}\')',
            [(0, "c0", "succeeded", '{"ok":true}', 2.5), (1, "c1", "started", None, None)],
        )
        connection.execute("COMMIT")
        (without_rowid,) = connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'steps'"
        ).fetchone()
        before = connection.execute("SELECT * FROM steps ORDER BY seq").fetchall()
    finally:
        connection.close()
    assert "WITHOUT ROWID" in without_rowid

    store = await open_store(db_url, clock=clock)
    try:
        assert await store.migrate() == MIGRATIONS[-1].version
        steps = await store.list_steps("r1")
    finally:
        await store.aclose()
    connection = raw(db_url)
    try:
        (with_rowid,) = connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'steps'"
        ).fetchone()
        after = connection.execute("SELECT * FROM steps ORDER BY seq").fetchall()
        (rowid,) = connection.execute("SELECT rowid FROM steps WHERE seq = 1").fetchone()
    finally:
        connection.close()
    assert "WITHOUT ROWID" not in with_rowid
    assert after == before
    assert rowid == 2
    assert [(step.seq, step.status.value) for step in steps] == [(0, "succeeded"), (1, "started")]


async def test_opening_again_applies_nothing_twice(db_url: str, clock: ManualClock) -> None:
    first = await open_store(db_url, clock=clock)
    await first.create_run(new_run())
    await first.aclose()
    before = recorded_migrations(db_url)
    clock.advance(100)
    for _ in range(2):
        again = await open_store(db_url, clock=clock)
        try:
            assert await again.migrate() == MIGRATIONS[-1].version
            assert len(await again.list_runs()) == 1
        finally:
            await again.aclose()
    assert recorded_migrations(db_url) == before
    assert {applied_at for (_, _, applied_at) in before} == {clock.now() - 100}


async def test_a_database_from_a_newer_leaseward_is_refused(db_url: str) -> None:
    store = await open_store(db_url)
    await store.create_run(new_run())
    await store.aclose()
    newer = MIGRATIONS[-1].version + 1
    connection = raw(db_url)
    try:
        connection.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)",
            (newer,),
        )
    finally:
        connection.close()

    with pytest.raises(SchemaMismatch, match="newer") as raised:
        await open_store(db_url)
    assert raised.value.version == newer
    assert str(path_of(db_url)) in str(raised.value)

    connection = raw(db_url)
    try:
        versions = connection.execute("SELECT version FROM schema_migrations").fetchall()
        runs = connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        connection.close()
    assert sorted(versions) == [*((m.version,) for m in MIGRATIONS), (newer,)]
    assert runs == 1


# -- pragmas ----------------------------------------------------------------------------


async def pragma(store: SQLStore, name: str) -> Any:
    executor = store._executor
    async with executor.reading():
        row = await executor.fetch_one(f"PRAGMA {name}")
    assert row is not None
    return cast(Any, row)[0]


async def test_default_pragmas(store: SQLStore, db_url: str) -> None:
    assert await pragma(store, "journal_mode") == "wal"
    assert await pragma(store, "synchronous") == 2  # FULL
    assert await pragma(store, "busy_timeout") == BUSY_TIMEOUT_MS
    assert await pragma(store, "foreign_keys") == 1
    # WAL is persistent: another connection sees it in the file itself.
    connection = raw(db_url)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("query", "synchronous", "busy_timeout"),
    [
        ("synchronous=normal", 1, BUSY_TIMEOUT_MS),
        ("synchronous=FULL&busy_timeout_ms=1234", 2, 1234),
        ("busy_timeout_ms=0", 2, 0),
    ],
)
async def test_url_options_set_the_pragmas(
    db_url: str, query: str, synchronous: int, busy_timeout: int
) -> None:
    store = await open_store(f"{db_url}?{query}")
    try:
        assert await pragma(store, "synchronous") == synchronous
        assert await pragma(store, "busy_timeout") == busy_timeout
        assert await pragma(store, "journal_mode") == "wal"
    finally:
        await store.aclose()


# -- indexes ----------------------------------------------------------------------------


async def test_the_claim_and_lease_indexes_are_partial(store: SQLStore, db_url: str) -> None:
    connection = raw(db_url)
    try:
        partial = {row[1]: row[4] for row in connection.execute("PRAGMA index_list(runs)")}
        sql = dict(connection.execute("SELECT name, sql FROM sqlite_master WHERE type='index'"))
    finally:
        connection.close()
    assert (partial["runs_claimable"], partial["runs_leased"]) == (1, 1)
    assert "WHERE state = 'queued'" in sql["runs_claimable"]
    assert "WHERE state = 'running'" in sql["runs_leased"]


def plan(db_url: str, sql: str, params: dict[str, Any]) -> list[str]:
    connection = raw(db_url)
    try:
        return [row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    finally:
        connection.close()


def full_scans_of_runs(details: list[str]) -> list[str]:
    # "SCAN runs" without an index reads every row, finished ones included.
    return [d for d in details if d.startswith("SCAN runs") and "USING" not in d]


async def test_claim_query_uses_the_partial_claimable_index(store: SQLStore, db_url: str) -> None:
    details = plan(
        db_url,
        QUERIES["claim_runs"],
        {
            "source": RunState.QUEUED.value,
            "target": RunState.RUNNING.value,
            "worker_id": "w",
            "lease_seconds": 5.0,
            "limit": 3,
            "agents": json.dumps(["a"]),
            "exclude": json.dumps(["r1"]),
            "now": 1.0,
        },
    )
    assert any("USING INDEX runs_claimable" in d for d in details), details
    assert full_scans_of_runs(details) == [], details


async def test_the_reaper_scan_uses_the_partial_leased_index(store: SQLStore, db_url: str) -> None:
    details = plan(db_url, QUERIES["running_leases"], {"source": RunState.RUNNING.value})
    assert any("USING INDEX runs_leased" in d for d in details), details
    assert full_scans_of_runs(details) == [], details


async def test_the_claim_updates_the_picked_runs_by_key(store: SQLStore, db_url: str) -> None:
    details = plan(
        db_url,
        QUERIES["claim_runs"],
        {
            "source": RunState.QUEUED.value,
            "target": RunState.RUNNING.value,
            "worker_id": "w",
            "lease_seconds": 5.0,
            "limit": 3,
            "agents": json.dumps(["a"]),
            "exclude": json.dumps([]),
            "now": 1.0,
        },
    )
    assert details[0] == "SEARCH runs USING INDEX sqlite_autoindex_runs_1 (id=?)", details
    assert not any("TEMP B-TREE" in d for d in details), details


IDS = json.dumps(["r1", "r2"])

# Statements that name their runs (or their requests) and check each run's state:
# each must find the runs by key, never by the listing's indexes on the state,
# which would read every run of that state.
RUNS_BY_KEY: list[tuple[str, dict[str, Any]]] = [
    ("leased_runs", {"ids": IDS, "source": RunState.RUNNING.value}),
    ("request_cancels", {"ids": IDS, "source": RunState.RUNNING.value, "now": 1.0}),
    (
        "requeue_decided",
        {
            "ids": IDS,
            "source": RunState.WAITING_FOR_APPROVAL.value,
            "target": RunState.QUEUED.value,
            "now": 1.0,
        },
    ),
    ("renew_leases", {"items": "[]", "source": RunState.RUNNING.value, "now": 1.0}),
    ("held_leases", {"items": "[]", "source": RunState.RUNNING.value}),
    ("settle_runs", {"settlements": "[]", "now": 1.0}),
    (
        "expiring_runs",
        {"source": RunState.WAITING_FOR_APPROVAL.value, "limit": 10, "now": 1.0},
    ),
    (
        "pending_requests",
        {"states": json.dumps([RunState.WAITING_FOR_APPROVAL.value]), "limit": 10, "now": 1.0},
    ),
    (
        "reopen_run",
        {
            "run_id": "r1",
            "epoch": 1,
            "source": "dead_lettered",
            "target": "queued",
            "reset_requeues": 1,
            "keep_cancel": 1,
            "now": 1.0,
        },
    ),
]


@pytest.mark.parametrize(("name", "params"), RUNS_BY_KEY, ids=[n for n, _ in RUNS_BY_KEY])
async def test_statements_on_named_runs_find_them_by_key(
    store: SQLStore, db_url: str, name: str, params: dict[str, Any]
) -> None:
    details = plan(db_url, QUERIES[name], params)
    assert "SEARCH runs USING INDEX sqlite_autoindex_runs_1 (id=?)" in details, details
    assert not any(d.startswith("SCAN approvals") and "USING" not in d for d in details)
    assert not any("runs_by_" in d for d in details), details


async def test_a_large_batch_settles_its_outcomes_by_the_journal_key(
    store: SQLStore, db_url: str
) -> None:
    details = plan(
        db_url, QUERIES["settle_step_set"], {"steps": "[]", "started": "started", "now": 1.0}
    )
    assert "SEARCH steps USING INDEX sqlite_autoindex_steps_1 (run_id=? AND seq=?)" in details, (
        details
    )
    assert not any(d.startswith("SCAN steps") for d in details), details


async def test_the_purge_reads_the_partial_finished_index_and_deletes_by_key(
    store: SQLStore, db_url: str
) -> None:
    connection = raw(db_url)
    try:
        partial = {row[1]: row[4] for row in connection.execute("PRAGMA index_list(runs)")}
    finally:
        connection.close()
    assert partial["runs_finished"] == 1
    params = {"state": RunState.COMPLETED.value, "cutoff": 1.0, "limit": 500}
    pick = plan(db_url, QUERIES["purge_pick"], params)
    assert pick == ["SEARCH runs USING INDEX runs_finished (state=? AND finished_at<?)"], pick
    # Not runs_finished here: that would walk every run of the state for each batch.
    delete = plan(db_url, QUERIES["purge_runs"], {**params, "ids": json.dumps(["r1"])})
    assert any("USING INDEX sqlite_autoindex_runs_1 (id=?)" in d for d in delete), delete
    steps = plan(db_url, QUERIES["purge_steps"], {"ids": json.dumps(["r1"])})
    assert any("USING COVERING INDEX sqlite_autoindex_steps_1 (run_id=?)" in d for d in steps), (
        steps
    )


async def test_the_purge_and_forget_keys_find_keys_by_index(store: SQLStore, db_url: str) -> None:
    ids = json.dumps(["r1"])
    marked = plan(db_url, QUERIES["purge_keys"], {"ids": ids, "state": "completed", "now": 1.0})
    assert any("USING INDEX sqlite_autoindex_runs_1 (id=?)" in d for d in marked), marked
    assert not [d for d in marked if d.startswith(("SCAN runs", "SCAN idempotency_keys"))], marked
    for name in ("forget_keys", "forget_count"):
        forget = plan(db_url, QUERIES[name], {"cutoff": 1.0, "limit": 500})
        assert any("USING INDEX idempotency_keys_forgettable" in d for d in forget), forget
        assert not [d for d in forget if d.startswith("SCAN idempotency_keys")], forget


async def test_claim_finds_the_few_queued_runs_among_many_finished(
    store: SQLStore, db_url: str, clock: ManualClock
) -> None:
    now = clock.now()
    connection = raw(db_url)
    try:
        connection.execute("BEGIN")
        connection.executemany(
            "INSERT INTO runs (id, agent, mode, state, reason, input_json, result_json, epoch,"
            " requeues, available_at, cancel_requested, created_at, updated_at, finished_at)"
            " VALUES (?, 'a', 'queued', 'completed', 'completed', 'null', '\"ok\"', 1, 0,"
            " ?, 0, ?, ?, ?)",
            [(f"done-{i:05d}", now - 10_000 + i, now - 10_000 + i, now, now) for i in range(5000)],
        )
        connection.execute("COMMIT")
    finally:
        connection.close()
    queued = []
    for index in range(3):
        clock.advance(1)
        queued.append((await store.create_run(new_run(value=index))).id)
    clock.advance(1)

    got = await store.claim_runs("w1", 10, 5.0, ["a"])

    assert [r.id for r in got] == queued
    assert all(r.state is RunState.RUNNING and r.epoch == 1 for r in got)
    assert await store.claim_runs("w1", 10, 5.0, ["a"]) == []
    assert len(await store.list_runs(RunListing(state=RunState.COMPLETED, limit=10_000))) == 5000


OPEN_AT_ONCE = """
import sys, time, anyio
from leaseward.storage import open_store

async def main() -> None:
    while time.time() < float(sys.argv[2]):
        time.sleep(0.0005)
    store = await open_store(sys.argv[1])
    await store.aclose()

anyio.run(main)
"""


def test_workers_opening_a_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    """Switching a new file to WAL is refused at once, busy handler or not, while
    another process creates it: workers started together must wait, not fail."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for attempt in range(4):
        url = f"sqlite:///{tmp_path / f'new-{attempt}.db'}"
        start = str(time.time() + 1.0)
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN_AT_ONCE, url, start],
                env=env,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for worker in workers:
            _, err = worker.communicate(timeout=60)
            assert worker.returncode == 0, err


# -- a transaction run on the connection's thread ----------------------------------------


@pytest.fixture
async def executor(anyio_backend: str, db_url: str) -> AsyncIterator[SQLiteExecutor]:
    opened = await SQLiteExecutor.connect(SQLiteOptions(str(path_of(db_url))))
    try:
        await opened.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT UNIQUE)")
        yield opened
    finally:
        await opened.aclose()


async def names(executor: SQLiteExecutor) -> list[str]:
    async with executor.reading():
        return [row["name"] for row in await executor.fetch_all("SELECT name FROM items")]


async def test_a_transaction_on_the_connection_thread_commits_all_or_nothing(
    executor: SQLiteExecutor,
) -> None:
    insert = "INSERT INTO items (name) VALUES (:name)"

    async def refused() -> None:
        await executor.execute(insert, {"name": "a"})
        await executor.execute(insert, {"name": "a"})

    with pytest.raises(StoreError) as raised:
        await executor.run_transaction(refused)
    assert raised.value.data_error
    assert await names(executor) == []

    async def written() -> int:
        await executor.execute(insert, {"name": "a"})
        async with executor.savepoint("second"):
            await executor.execute(insert, {"name": "b"})
        rows = await executor.fetch_all("SELECT count(*) AS n FROM items")
        return int(rows[0]["n"])

    assert await executor.run_transaction(written) == 2
    assert await names(executor) == ["a", "b"]


async def test_a_transaction_on_the_thread_that_awaits_anything_else_is_rolled_back(
    executor: SQLiteExecutor,
) -> None:
    async def waits() -> None:
        await executor.execute("INSERT INTO items (name) VALUES ('a')")
        await anyio.lowlevel.checkpoint()

    with pytest.raises(RuntimeError):
        await executor.run_transaction(waits)
    assert await names(executor) == []


async def test_a_cancel_waits_for_the_transaction_on_the_thread_to_end(
    executor: SQLiteExecutor,
) -> None:
    async def slow() -> int:
        await executor.execute("INSERT INTO items (name) VALUES ('a')")
        # A few hundred milliseconds of work for SQLite, well past the cancel below.
        rows = await executor.fetch_all(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000)"
            " SELECT count(*) AS n FROM c"
        )
        return int(rows[0]["n"])

    counted = None
    with anyio.move_on_after(0.01) as scope:
        counted = await executor.run_transaction(slow)
    # The cancel came while the thread ran the transaction: the caller still gets the
    # answer of a transaction that committed, not a cancel that leaves it unknown.
    assert scope.cancel_called
    assert counted == 3000000
    assert await names(executor) == ["a"]


JOURNAL_ROWS = [
    ("r1", 0, "provider", None, None, "succeeded"),
    ("r1", 1, "tool", "lookup", "read_only", "succeeded"),
    ("r1", 2, "tool", "charge", "non_idempotent_write", "started"),
    ("r1", 3, "tool", "ship", "idempotent_write", "failed"),
]


async def test_migration_15_keeps_the_journal_and_what_its_checks_refuse(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path / 'old.db'}", migrate=False)
    try:
        await migrate_to(store, 14)
        executor = store._executor
        await executor.execute(
            "INSERT INTO runs (id, agent, mode, state, input_json, epoch, requeues, "
            "available_at, cancel_requested, created_at, updated_at) "
            "VALUES ('r1', 'payer', 'queued', 'running', '{}', 1, 0, 100, 0, 100, 100)"
        )
        for run_id, seq, kind, tool, effect, status in JOURNAL_ROWS:
            await executor.execute(
                "INSERT INTO steps (run_id, seq, epoch, kind, tool, effect, status, "
                "arguments_json, started_at) "
                "VALUES (:run_id, :seq, 1, :kind, :tool, :effect, :status, '{\"a\": 1}', 100)",
                {
                    "run_id": run_id,
                    "seq": seq,
                    "kind": kind,
                    "tool": tool,
                    "effect": effect,
                    "status": status,
                },
            )
        everything = "SELECT * FROM steps ORDER BY run_id, seq"
        before = [tuple(row) for row in await executor.fetch_all(everything)]

        assert await store.migrate() == MIGRATIONS[-1].version
        assert [tuple(row) for row in await executor.fetch_all(everything)] == before

        refused = {
            "kind": ("bogus", None, "started"),
            "effect": ("tool", "bogus", "started"),
            "status": ("tool", "read_only", "bogus"),
        }
        for column, (kind, effect, status) in refused.items():
            with pytest.raises(StoreError, match=f"CHECK constraint failed: {column}") as caught:
                await executor.execute(
                    "INSERT INTO steps (run_id, seq, epoch, kind, effect, status, started_at) "
                    "VALUES ('r1', 9, 1, :kind, :effect, :status, 100)",
                    {"kind": kind, "effect": effect, "status": status},
                )
            assert caught.value.data_error
        assert [tuple(row) for row in await executor.fetch_all(everything)] == before
    finally:
        await store.aclose()
