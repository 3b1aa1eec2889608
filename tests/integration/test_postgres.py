"""What only PostgreSQL has: the database clock, LISTEN/NOTIFY, migrations under an
advisory lock, connection loss, and several worker processes on one database.

The protocol itself is tested on both dialects by test_store_conformance.py and the
runtime tests that take ``store_url``; these need a server (they skip without one).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest

from leaseward import (
    Agent,
    App,
    Client,
    ConfigurationError,
    ProviderReply,
    Reason,
    RunState,
    Runtime,
    ScriptedProvider,
    StepKind,
    StepStatus,
    StoreError,
    StoreNotFound,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.actors.reaper import LeaseReaper
from leaseward.runtime.clock import ManualClock
from leaseward.runtime.commits import Fenced, Stored
from leaseward.runtime.errors import CommitOutcomeUnknown
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import Event, RecoveryPolicy
from leaseward.runtime.settlements import Settlement
from leaseward.storage import (
    BatchItem,
    ClaimRequest,
    SQLStore,
    WriteBatch,
    open_store,
    parse_store_url,
    pool_size_for,
    unwrap,
)
from leaseward.storage.migrations import MIGRATIONS
from leaseward.storage.postgres import PostgresExecutor, translate_params
from tests.integration.faults import Statement, faulty_store, lose_answer, query
from tests.integration.pg_proxy import CommitDropper
from tests.integration.support import Calls, capture_logs, events
from tests.integration.test_real_faults import upstream
from tests.integration.test_store_conformance import COMPLETE, new_run

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("pool_worker.py")


async def eventually(condition: Callable[[], bool], timeout: float, interval: float = 0.01) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    for _ in range(int(timeout / interval) + 1):
        if condition():
            return
        await anyio.sleep(interval)
    pytest.fail(f"still not so after {timeout} s")


# -- without a server: parameters and URLs ------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "text", "names"),
    [
        ("SELECT :a, :b, :a", "SELECT $1, $2, $1", ("a", "b")),
        ("SELECT :x::text[] = ANY(y)", "SELECT $1::text[] = ANY(y)", ("x",)),
        ("SELECT a::bigint FROM t WHERE b = :b", "SELECT a::bigint FROM t WHERE b = $1", ("b",)),
        ("SELECT ':not' || :yes -- :nor this", "SELECT ':not' || $1 -- :nor this", ("yes",)),
        ('SELECT "a:b" FROM t WHERE c = :c', 'SELECT "a:b" FROM t WHERE c = $1', ("c",)),
        ("SELECT 'it''s :x', :y", "SELECT 'it''s :x', $1", ("y",)),
        ("SELECT 1", "SELECT 1", ()),
    ],
)
def test_named_parameters_become_numbered_ones(sql: str, text: str, names: tuple[str, ...]) -> None:
    assert translate_params(sql) == (text, names)


def test_postgres_urls_keep_driver_options_and_take_ours() -> None:
    parsed = parse_store_url(
        "postgresql://bob:secret@db.example:6543/runs?pool_size=7&sslmode=require"
        "&command_timeout_seconds=2.5"
    )
    options = parsed.postgresql
    assert parsed.scheme == "postgresql" and options is not None
    assert options.dsn == "postgresql://bob:secret@db.example:6543/runs?sslmode=require"
    assert (options.pool_size, options.command_timeout_seconds) == (7, 2.5)
    assert options.display == "postgresql://bob@db.example:6543/runs"
    assert parse_store_url("postgres://h/d").postgresql is not None


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://",
        "postgresql://h/d?pool_size=0",
        "postgresql://h/d?pool_size=many",
        "postgresql://h/d?connect_timeout_seconds=-1",
    ],
)
def test_bad_postgres_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_store_url(url)


def test_the_pool_grows_with_concurrency_within_bounds() -> None:
    sizes = [pool_size_for(n) for n in (1, 16, 64, 1000)]
    assert sizes == sorted(sizes)
    assert sizes[0] >= 4 and sizes[-1] <= 20


# -- connecting ---------------------------------------------------------------------------


async def test_a_database_that_does_not_exist_is_no_store_there(pg_server: Any) -> None:
    # As a SQLite file that does not exist: with or without must_exist, none is created.
    url = pg_server.url_for(f"lw_missing_{uuid.uuid4().hex[:8]}")
    for must_exist in (False, True):
        with pytest.raises(StoreNotFound, match="does not exist; create the database"):
            await open_store(url, must_exist=must_exist)


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("poolsize=3", 'unrecognized configuration parameter "poolsize"'),
        ("statement_timeout=soon", 'invalid value for parameter "statement_timeout"'),
        ("max_connections=3", '"max_connections" cannot be changed'),
    ],
)
async def test_a_url_option_the_server_refuses_as_a_setting_is_a_configuration_error(
    pg_url: str, option: str, said: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        await open_store(f"{pg_url}{'&' if '?' in pg_url else '?'}{option}")
    message = raised.value.message
    assert said in message
    assert "pool_size, connect_timeout_seconds and command_timeout_seconds" in message


async def test_a_server_that_does_not_answer_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="postgresql"):
        await open_store("postgresql://postgres@127.0.0.1:1/postgres?connect_timeout_seconds=2")


async def test_a_server_cut_off_while_connecting_says_which_timeout_ran_out(
    pg_server: Any, pg_database: str
) -> None:
    host, port, user = upstream(pg_server.admin_url)
    async with CommitDropper(host, port) as proxy:
        proxy.partition()
        with pytest.raises(StoreError) as raised:
            await open_store(proxy.url(pg_database, user, connect_timeout_seconds="0.3"))
        proxy.heal()
    assert "no connection within 0.3 s (connect_timeout_seconds)" in raised.value.message
    assert "TimeoutError" not in raised.value.message


async def test_a_server_slower_than_the_command_timeout_says_which_timeout_ran_out(
    pg_server: Any, pg_database: str
) -> None:
    host, port, user = upstream(pg_server.admin_url)
    async with CommitDropper(host, port, answer_delay_seconds=0.3) as proxy:
        with pytest.raises(StoreError) as raised:
            await open_store(proxy.url(pg_database, user, command_timeout_seconds="0.1"))
    assert "no answer within 0.1 s (command_timeout_seconds)" in raised.value.message
    assert "TimeoutError" not in raised.value.message


# -- migrations ---------------------------------------------------------------------------


@pytest.fixture
def empty_pg_url(pg_server: Any) -> Any:
    name = pg_server.create_database(migrated=False)
    try:
        yield pg_server.url_for(name)
    finally:
        pg_server.drop(name)


async def recorded(url: str) -> list[tuple[int, str]]:
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch("SELECT version, name FROM schema_migrations ORDER BY 1")
    finally:
        await connection.close()
    return [(row["version"], row["name"]) for row in rows]


async def test_migrating_twice_applies_each_version_once(empty_pg_url: str) -> None:
    for _ in range(2):
        store = await open_store(empty_pg_url)
        try:
            assert await store.migrate() == MIGRATIONS[-1].version
            await store.create_run(new_run())
        finally:
            await store.aclose()
    assert await recorded(empty_pg_url) == [(m.version, m.name) for m in MIGRATIONS]


async def test_an_operator_command_does_not_migrate_a_database_without_the_schema(
    empty_pg_url: str, pg_url: str
) -> None:
    with pytest.raises(StoreNotFound, match="no leaseward store at postgresql://"):
        await open_store(empty_pg_url, must_exist=True)
    connection = await asyncpg.connect(empty_pg_url)
    try:
        assert await connection.fetchval("SELECT to_regclass('schema_migrations')") is None
    finally:
        await connection.close()
    store = await open_store(pg_url, must_exist=True)
    await store.aclose()


async def test_two_migrators_at_once_are_serialized_by_the_advisory_lock(
    empty_pg_url: str,
) -> None:
    stores: list[SQLStore] = []

    async def open_one() -> None:
        stores.append(await open_store(empty_pg_url, migrate=False))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(open_one)
    try:
        versions: list[int] = []

        async def migrate(store: SQLStore) -> None:
            versions.append(await store.migrate())

        async with anyio.create_task_group() as tg:
            for store in stores:
                tg.start_soon(migrate, store)
    finally:
        for store in stores:
            await store.aclose()
    assert versions == [MIGRATIONS[-1].version] * 4
    assert await recorded(empty_pg_url) == [(m.version, m.name) for m in MIGRATIONS]


async def test_a_database_from_a_newer_leaseward_is_refused(pg_url: str) -> None:
    connection = await asyncpg.connect(pg_url)
    try:
        await connection.execute(
            "INSERT INTO schema_migrations VALUES ($1, 'future', 0)", MIGRATIONS[-1].version + 1
        )
    finally:
        await connection.close()
    with pytest.raises(StoreError, match="newer"):
        await open_store(pg_url)


# -- the database clock -------------------------------------------------------------------


async def test_lease_times_come_from_the_database_clock_not_the_workers(pg_url: str) -> None:
    # A worker whose clock is a day behind, then a week ahead.
    skewed = ManualClock(start=time.time() - 86_400)
    store = await open_store(pg_url, clock=skewed)
    try:
        before = time.time()
        await store.create_run(new_run())
        (run,) = await store.claim_runs("w1", 1, 30.0, ["a"])
        after = time.time()
        assert run.lease_expires_at is not None
        # Same machine: the database clock is this one, give or take scheduling.
        assert before + 30 - 1 <= run.lease_expires_at <= after + 30 + 1
        assert before - 1 <= run.created_at <= after + 1

        skewed.advance(86_400 * 8)
        # The worker's clock a week ahead changes nothing: the database dates the renewal.
        (outcome,) = await store.commit_batch([BatchItem(run.id, run.epoch, lease_seconds=5.0)])
        assert isinstance(outcome, Stored)
        renewed = await store.get_run(run.id)
        assert renewed is not None and renewed.lease_expires_at is not None
        assert renewed.lease_expires_at == pytest.approx(time.time() + 5.0, abs=1.0)
    finally:
        await store.aclose()


# -- LISTEN/NOTIFY ------------------------------------------------------------------------


async def waited(store: SQLStore, timeout: float) -> float:
    started = time.monotonic()
    await store.wait_for_work(timeout)
    return time.monotonic() - started


async def test_submit_and_requeue_wake_a_waiting_store_in_another_connection(
    pg_url: str,
) -> None:
    waiter = await open_store(pg_url)
    other = await open_store(pg_url)
    try:
        assert await waited(waiter, 0.2) >= 0.15  # nothing to hear: the timeout
        took: list[float] = []

        async def wait() -> None:
            took.append(await waited(waiter, 10.0))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.sleep(0.2)
            await other.create_run(new_run())
        assert took[0] < 5.0

        (run,) = await other.claim_runs("w1", 1, 30.0, ["a"])
        assert await waited(waiter, 0.1) >= 0.05  # a claim is no news
        requeue = Settlement(Event.REQUEUE, spends_retry=True)
        (outcome,) = await other.commit_batch([BatchItem(run.id, run.epoch, settlement=requeue)])
        assert isinstance(outcome, Stored)
        # The notice came while nobody waited: it is kept for the next wait.
        await anyio.sleep(0.2)
        assert await waited(waiter, 10.0) < 1.0
    finally:
        await waiter.aclose()
        await other.aclose()


async def terminate(url: str, application_name: str | None = None) -> int:
    """Terminate the backends connected to ``url``'s database (except this one)."""
    database = url.rpartition("/")[2].partition("?")[0]
    connection = await asyncpg.connect(url.replace(f"/{database}", "/postgres", 1))
    try:
        rows = await connection.fetch(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()"
            " AND ($2::text IS NULL OR application_name = $2)",
            database,
            application_name,
        )
    finally:
        await connection.close()
    return len(rows)


async def test_a_lost_listener_is_re_established(pg_url: str) -> None:
    waiter = await open_store(f"{pg_url}?application_name=lw_listen_test")
    other = await open_store(pg_url)
    try:
        assert await waited(waiter, 0.1) >= 0.05  # now listening
        with capture_logs() as logs:
            assert await terminate(pg_url, "lw_listen_test-listen") == 1
            # Losing the listener wakes the waiter (notices may have been missed).
            assert await waited(waiter, 10.0) < 5.0
            assert await waited(waiter, 0.1) >= 0.0  # reconnects (or backs off)
            took: list[float] = []

            async def wait() -> None:
                for _ in range(20):
                    took.append(await waited(waiter, 10.0))
                    if "store.listen_restored" in events(logs):
                        return

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.sleep(1.0)  # past the first backoff
                await other.create_run(new_run())
        assert {"store.listen_lost", "store.listen_restored"} <= set(events(logs))
        assert took and took[-1] < 5.0
    finally:
        await waiter.aclose()
        await other.aclose()


async def test_a_statement_on_a_lost_connection_is_a_store_error_then_the_pool_reconnects(
    pg_url: str,
) -> None:
    store = await open_store(f"{pg_url}?application_name=lw_pool_test&pool_size=2")
    try:
        record = await store.create_run(new_run())
        async with store._executor.reading():
            assert await terminate(pg_url, "lw_pool_test") >= 1
            # The connection this block holds is gone: a store error, nothing else.
            with pytest.raises(StoreError, match="postgresql"):
                await store._executor.fetch_one("SELECT 1 AS one")
        # The pool replaced it.
        again = await store.get_run(record.id)
        assert again is not None and again.id == record.id
    finally:
        await store.aclose()


async def ended_under_a_held_close(proxy: CommitDropper, pg_url: str, application: str) -> None:
    """End the sessions of ``application`` as pg_terminate_backend does, their last
    message delivered and their sockets' end held back by ``proxy``: asyncpg has read the
    server's goodbye on the idle connections, and not yet the close."""
    proxy.hold_close(10.0)
    assert await terminate(pg_url, application) >= 1
    # The goodbye goes through the proxy at once; asyncpg reads it a turn or two later.
    await anyio.sleep(0.1)


async def test_a_connection_whose_session_ended_unseen_is_traded_for_another_unused(
    pg_server: Any, pg_database: str
) -> None:
    """A terminated backend's goodbye reaches an idle connection before its socket's end;
    asyncpg then refuses the connection's next statement before sending it, with "cannot
    switch to state 12; another operation (2) is in progress": one operation, on a
    session already over. Once a reaper pass failed so. Nothing was sent, so a read or a
    statement that commits alone goes to another connection, and a commit is not said
    to have an unknown outcome."""
    host, port, user = upstream(pg_server.admin_url)
    pg_url = pg_server.url_for(pg_database)
    async with CommitDropper(host, port) as proxy:
        store = await open_store(proxy.url(pg_database, user, application_name="lw_ended"))
        reaper = LeaseReaper(store, interval_seconds=0.05, policy=RecoveryPolicy())
        try:
            run = await store.create_run(new_run())
            await held_together(store, 2)
            await ended_under_a_held_close(proxy, pg_url, "lw_ended")
            assert await reaper.reap_once() == ()

            await held_together(store, 2)
            await ended_under_a_held_close(proxy, pg_url, "lw_ended")
            (claimed,) = await store.claim_runs("w1", 1, 30.0, ["a"])
            assert (claimed.id, claimed.epoch) == (run.id, 1)

            await held_together(store, 2)
            await ended_under_a_held_close(proxy, pg_url, "lw_ended")
            assert [mark.run_id for mark in await store.running_leases()] == [run.id]
        finally:
            # Closing, the store ends its sessions itself: nothing to hold back.
            proxy.hold_close(0.0)
            await store.aclose()


def pg_executor(store: SQLStore) -> PostgresExecutor:
    executor = store._executor
    assert isinstance(executor, PostgresExecutor)
    return executor


def session_ended(connection: Any) -> bool:
    try:
        return bool(connection.is_closed())
    except asyncpg.InterfaceError:
        # asyncpg gave it back to the pool as the session ended.
        return True


async def backend_pid(store: SQLStore) -> int:
    row = await store._executor.fetch_one("SELECT pg_backend_pid() AS pid")
    assert row is not None
    return int(row["pid"])


async def test_a_connection_given_back_cleanly_serves_the_next_block(pg_url: str) -> None:
    """Without going back to the pool: asyncpg's acquire with a timeout and its release
    each start a task, and the pool hands out a new proxy of a connection each time."""
    store = await open_store(f"{pg_url}?pool_size=2")
    executor = pg_executor(store)
    try:
        async with executor.reading():
            first = executor._bound()
        async with executor.transaction():
            assert executor._bound() is first
        await store.create_run(new_run())
        async with executor.reading():
            assert executor._bound() is first
    finally:
        await store.aclose()


async def test_a_block_that_raised_gives_its_connection_back_to_the_pool(pg_url: str) -> None:
    store = await open_store(f"{pg_url}?pool_size=1")
    try:
        with pytest.raises(StoreError, match="DivisionByZero"):
            async with store._executor.transaction():
                await store._executor.execute("SELECT 1 / 0")
        assert pg_executor(store)._kept == []
        # Given back to the pool, which resets what it is given: its one connection works.
        record = await store.create_run(new_run())
        assert await store.get_run(record.id) is not None
    finally:
        await store.aclose()


async def test_a_task_waiting_for_the_pool_gets_the_connection_given_back(pg_url: str) -> None:
    store = await open_store(f"{pg_url}?pool_size=1")
    waited: list[float] = []

    async def second_reader() -> None:
        started = time.monotonic()
        assert await backend_pid(store) > 0
        waited.append(time.monotonic() - started)

    try:
        async with anyio.create_task_group() as tg, store._executor.reading():
            tg.start_soon(second_reader)
            # The reader is waiting for the pool's one connection, held here.
            await eventually(lambda: pg_executor(store)._acquiring == 1, 5.0)
        # Well within the pool's own wait (ACQUIRE_TIMEOUT_SECONDS, 30 s).
        assert waited and waited[0] < 5.0
    finally:
        await store.aclose()


async def test_a_kept_connection_whose_session_ended_is_replaced(pg_url: str) -> None:
    store = await open_store(f"{pg_url}?application_name=lw_kept_test&pool_size=1")
    try:
        first = await backend_pid(store)
        [kept] = pg_executor(store)._kept
        assert await terminate(pg_url, "lw_kept_test") >= 1
        # As soon as asyncpg reads the end of the session; a statement sent before that
        # fails as one on any lost connection does (the lost-connection test above).
        await eventually(lambda: session_ended(kept.connection), 5.0)
        assert await backend_pid(store) != first
    finally:
        await store.aclose()


async def test_a_kept_connection_goes_back_to_the_pool_to_be_recycled(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool closes a connection that ran its max_queries only as it is given back,
    which a kept one never was: a worker's sessions would have lived as long as it."""
    monkeypatch.setattr("leaseward.storage.postgres.MAX_QUERIES", 3)
    monkeypatch.setattr("leaseward.storage.postgres.BLOCKS_BETWEEN_POOL_CHECKS", 2)
    store = await open_store(f"{pg_url}?pool_size=1")
    try:
        pids = [await backend_pid(store) for _ in range(6)]
    finally:
        await store.aclose()
    # A rehearsal alone runs more than three statements: a session serves a block
    # taken from the pool and two kept, gives itself back, and the pool closes it.
    sessions = [len(list(blocks)) for _, blocks in itertools.groupby(pids)]
    assert len(sessions) >= 2 and max(sessions) <= 3, pids
    assert sessions[1:-1] == [3] * (len(sessions) - 2), pids


async def held_together(
    store: SQLStore, count: int, all_held: Callable[[], Awaitable[None]] | None = None
) -> list[int]:
    """The backends of ``count`` reading blocks held at once and given back once all are
    held (after ``all_held``): the executor then keeps every one of them."""
    executor = pg_executor(store)
    inside = anyio.Event()
    held: list[int] = []

    async def read_while_others_do() -> None:
        async with executor.reading():
            held.append(await backend_pid(store))
            if len(held) == count:
                if all_held is not None:
                    await all_held()
                inside.set()
            await inside.wait()

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(read_while_others_do)
    return held


async def application_connections(pg_url: str, application_name: str) -> int:
    database = pg_url.rpartition("/")[2].partition("?")[0]
    connection = await asyncpg.connect(pg_url)
    try:
        count = await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2",
            database,
            application_name,
        )
    finally:
        await connection.close()
    return int(count)


async def test_kept_connections_left_unused_are_closed_but_one(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As asyncpg closes its pool's idle connections: a worker gone quiet holds one."""
    monkeypatch.setattr("leaseward.storage.postgres.IDLE_CLOSE_SECONDS", 0.3)
    store = await open_store(f"{pg_url}?application_name=lw_idle_test&pool_size=3")
    executor = pg_executor(store)
    open_while_held: list[int] = []

    async def count_open() -> None:
        # While all three are held: no idle timer runs yet.
        open_while_held.append(await application_connections(pg_url, "lw_idle_test"))

    try:
        held = await held_together(store, 3, count_open)
        assert len(set(held)) == 3 and len(executor._kept) == 3
        assert open_while_held == [3]
        await eventually(lambda: len(executor._kept) == 1, 5.0)
        for _ in range(100):
            if await application_connections(pg_url, "lw_idle_test") == 1:
                break
            await anyio.sleep(0.05)
        assert await application_connections(pg_url, "lw_idle_test") == 1
        # The one left, and the pool's places of the others, serve as before.
        assert len(await held_together(store, 3)) == 3
    finally:
        await store.aclose()


async def test_a_kept_connection_in_use_is_not_closed_as_unused(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its idle time runs from its last block: two connections used every tenth of a
    second stay open past two idle times, while the third, left unused, is closed."""
    monkeypatch.setattr("leaseward.storage.postgres.IDLE_CLOSE_SECONDS", 2.0)
    store = await open_store(f"{pg_url}?pool_size=3")
    executor = pg_executor(store)
    try:
        opened = set(await held_together(store, 3))
        busy = set(await held_together(store, 2))
        started = time.monotonic()
        while time.monotonic() - started < 4.5:
            await anyio.sleep(0.1)
            assert set(await held_together(store, 2)) == busy
        await eventually(lambda: len(executor._kept) == 2, 5.0)
        assert set(await held_together(store, 2)) == busy < opened
    finally:
        await store.aclose()


async def test_kept_connections_end_at_once_when_a_lost_session_expires_them(
    pg_server: Any, pg_database: str
) -> None:
    """A server that lost one session may answer nothing more: the statement that found
    the loss fails without first waiting on the goodbye of every idle connection."""
    host, port, user = upstream(pg_server.admin_url)
    async with CommitDropper(host, port) as proxy:
        store = await open_store(proxy.url(pg_database, user, pool_size="3"))
        executor = pg_executor(store)
        try:
            held = await held_together(store, 3)
            assert len(executor._kept) == 3
            proxy.partition()
            started = time.monotonic()
            await executor._expire_connections()
            # A close waits up to 5 s (CLOSE_TIMEOUT_SECONDS) for each.
            assert time.monotonic() - started < 1.0
            assert executor._kept == []
            proxy.heal()
            assert await backend_pid(store) not in held
        finally:
            await store.aclose()


async def test_closing_a_store_gives_back_its_kept_connections_at_once(pg_url: str) -> None:
    store = await open_store(f"{pg_url}?pool_size=2")
    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(backend_pid, store)
    assert len(pg_executor(store)._kept) >= 1
    started = time.monotonic()
    await store.aclose()
    # The pool's close waits for every connection out: a kept one would hold it 5 s.
    assert time.monotonic() - started < 2.0


# -- connection loss under a running runtime ----------------------------------------------

# A lease long enough that the keeper's guard lets a lookup ride out its own outage or
# termination (the guard cuts a call off 1.25 s after the last renewal), short enough
# that an expired lease is reaped within the tests' waits.
FAST: dict[str, Any] = {
    "poll_interval_seconds": 0.02,
    "reap_interval_seconds": 0.05,
    "lease_seconds": 1.5,
}


def payer_with_lookup(
    calls: Calls, before_lookup: Any, *, lookup_timeout: float = 2.0
) -> tuple[App, list[float]]:
    """lookup (read-only) -> charge (non-idempotent write) -> "done"."""
    charged_at: list[float] = []
    looked_up: list[int] = []

    @tool(effect=ToolEffect.READ_ONLY, timeout_seconds=lookup_timeout)
    async def lookup(ctx: ToolContext) -> str:
        looked_up.append(ctx.epoch)
        if len(looked_up) == 1:
            await before_lookup()
        return "found"

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=1.0)
    async def charge(ctx: ToolContext, amount: int) -> int:
        calls.record(ctx, amount=amount)
        charged_at.append(time.monotonic())
        return amount

    provider = ScriptedProvider(
        [
            ProviderReply(tool_calls=[ToolCall("lookup", {}, "l1")]),
            ProviderReply(tool_calls=[ToolCall("charge", {"amount": 5}, "c1")]),
            ProviderReply(text="done"),
        ],
        timeout_seconds=0.3,
    )
    return App([Agent("payer", provider, tools=[lookup, charge])]), charged_at


async def test_terminated_backends_mid_run_are_replaced_and_the_run_completes(
    pg_url: str,
) -> None:
    calls = Calls()
    killed: list[int] = []

    async def kill_backends() -> None:
        killed.append(await terminate(pg_url))

    app, _ = payer_with_lookup(calls, kill_backends)
    with capture_logs() as logs:
        async with Runtime.open(pg_url, app, **FAST) as rt:
            await anyio.sleep(0.1)  # idle once: the listener is up
            run = await rt.wait(await rt.submit("payer", None), timeout=20)
            journal = await rt.steps(run.id)
    assert killed and killed[0] >= 2, "the pool and the listener were not terminated"
    assert (run.state, run.result) == (RunState.COMPLETED, "done")
    # Its lease held through the loss: the same worker finished it under the same epoch.
    assert (run.epoch, run.requeues) == (1, 0)
    assert len(calls) == 1
    charge_rows = [(s.status, s.epoch) for s in journal if s.tool == "charge"]
    assert [status for status, _ in charge_rows] == [StepStatus.SUCCEEDED]
    assert "store.listen_lost" in events(logs)


async def test_during_an_outage_a_write_is_not_called_and_the_run_completes_after_it(
    pg_server: Any, pg_database: str
) -> None:
    """The database refuses connections from inside a read tool; the next write's intent
    cannot be stored, so the write is not called (G3); the run's settle fails too, its
    lease runs out, and once the database is back the reaper requeues it and it
    completes, the write executed exactly once (G2)."""
    pg_url = pg_server.url_for(pg_database)
    calls = Calls()
    restored_at: list[float] = []

    async def outage() -> None:
        admin = await asyncpg.connect(pg_server.admin_url)
        try:
            await admin.execute(f'ALTER DATABASE "{pg_database}" ALLOW_CONNECTIONS false')
        finally:
            await admin.close()
        await terminate(pg_url)

    async def restore() -> None:
        admin = await asyncpg.connect(pg_server.admin_url)
        try:
            await admin.execute(f'ALTER DATABASE "{pg_database}" ALLOW_CONNECTIONS true')
        finally:
            await admin.close()
        restored_at.append(time.monotonic())

    app, charged_at = payer_with_lookup(calls, outage)
    try:
        with capture_logs() as logs:
            async with Runtime.open(pg_url, app, **FAST) as rt:
                run_id = await rt.submit("payer", None)
                await eventually(lambda: "run.attempt_failed" in events(logs), 20.0)
                assert len(calls) == 0
                await anyio.sleep(0.3)  # the store stays down a while
                await restore()
                run = await rt.wait(run_id, timeout=30)
                journal = await rt.steps(run_id)
    finally:
        if not restored_at:
            await restore()

    failed = [e for e in logs if e["event"] == "run.attempt_failed"]
    assert "intent of charge" in failed[0]["error"]
    assert (run.state, run.result) == (RunState.COMPLETED, "done")
    assert len(calls) == 1, "the write ran more than once, or never"
    assert charged_at[0] > restored_at[0], "the write ran while its intent could not be stored"
    assert calls.seen[0]["epoch"] == run.epoch >= 2
    charge_rows = [(s.status, s.epoch) for s in journal if s.tool == "charge"]
    assert charge_rows == [(StepStatus.SUCCEEDED, run.epoch)]
    seen = set(events(logs))
    assert "lease.reaped" in seen
    # The outage either cut the LISTEN connection or came before the claim loop had
    # opened it, depending on which task got there first.
    assert seen & {"store.listen_lost", "store.listen_failed"}


async def set_connections(pg_server: Any, pg_database: str, *, allowed: bool) -> None:
    admin = await asyncpg.connect(pg_server.admin_url)
    try:
        await admin.execute(
            f'ALTER DATABASE "{pg_database}" ALLOW_CONNECTIONS {"true" if allowed else "false"}'
        )
    finally:
        await admin.close()


STORE_FAULTS = {
    "persister.batch_failed",
    "lease.renew_failed",
    "claim.failed",
    "reaper.pass_failed",
    "reaper.expiry_failed",
    "worker.heartbeat_failed",
}


async def test_an_outage_is_told_once_per_kind_of_failure_and_its_end_once(
    pg_server: Any, pg_database: str
) -> None:
    """Four runs in calls through a store outage: each kind of failure is logged once with
    its error, where every batch, renewal, claim and reaper pass logged a line of its own
    (about ten a second), and the store's answer once it is back."""
    pg_url = pg_server.url_for(pg_database)
    in_calls: set[str] = set()

    @tool(effect=ToolEffect.READ_ONLY, timeout_seconds=5.0)
    async def wait(ctx: ToolContext) -> str:
        in_calls.add(ctx.run_id)
        await anyio.sleep(0.2)
        return "waited"

    provider = ScriptedProvider(
        lambda request: ProviderReply(tool_calls=[ToolCall("wait", {}, uuid.uuid4().hex[:8])]),
        timeout_seconds=0.3,
    )
    app = App([Agent("waiter", provider, tools=[wait])])
    restored = False
    try:
        with capture_logs() as logs:
            async with Runtime.open(pg_url, app, drain_seconds=0.2, **FAST) as rt:
                for _ in range(4):
                    await rt.submit("waiter", None)
                await eventually(lambda: len(in_calls) == 4, 10.0)
                await set_connections(pg_server, pg_database, allowed=False)
                await terminate(pg_url)
                # As it begins, a statement already on its way may still be answered.
                await eventually(lambda: "claim.failed" in events(logs), 5.0)
                await anyio.sleep(1.8)
                down = len(logs)
                await set_connections(pg_server, pg_database, allowed=True)
                restored = True
                await eventually(lambda: "store.answering" in events(logs[down:]), 10.0)
    finally:
        if not restored:
            await set_connections(pg_server, pg_database, allowed=True)

    # Shorter than the interval between a kind's lines: each kind is told once, with
    # its error, however often it failed (claims alone failed every 20 ms).
    told = [line for line in logs[:down] if line["event"] in STORE_FAULTS]
    assert {"claim.failed", "reaper.pass_failed"} <= {line["event"] for line in told}
    assert all(line["error"].startswith("postgresql") for line in told)
    kinds = Counter(line["event"] for line in told)
    assert all(count == 1 for count in kinds.values()), (kinds, events(logs[:down]))
    assert "store.answering" not in events(logs[:down])
    answering = next(line for line in logs[down:] if line["event"] == "store.answering")
    assert answering["log_level"] == "info"
    assert answering["failures"]["claim.failed"] > 10
    assert answering["after_seconds"] >= 1.8


# -- several worker processes on one database ---------------------------------------------

RUNS = 200
KILL_AFTER_CALLS = 60


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
async def test_three_worker_processes_one_killed_midway(pg_url: str, tmp_path: Path) -> None:
    calls_file = tmp_path / "calls.txt"
    async with Client.open(pg_url) as client:
        ids = [await client.submit("payer", i) for i in range(RUNS)]

    names = ("w1", "w2", "w3")
    victim = "w1"
    # Nobody claims before all three are up: on a loaded machine one slow to start
    # would otherwise find the work done. The victim's charges last a second, so that
    # once it has started one it surely holds runs when it is killed.
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "POOL_WORKER_BARRIER": f"{barrier}:{len(names)}",
    }
    workers = {
        name: subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                pg_url,
                name,
                str(calls_file),
                str(tmp_path / f"events-{name}.jsonl"),
            ],
            env={**env, "POOL_WORKER_CHARGE_SECONDS": "1.0" if name == victim else "0.02"},
            stderr=(tmp_path / f"stderr-{name}.txt").open("w"),
        )
        for name in names
    }
    try:

        def victim_busy() -> bool:
            # Inside a charge: a victim slow to open its store might otherwise be
            # killed after the others emptied the queue, holding nothing.
            lines = [line.split() for line in calls_file.read_text().splitlines()]
            callers = [fields[1] for fields in lines if len(fields) == 3]
            return len(callers) >= KILL_AFTER_CALLS and victim in callers

        await eventually(lambda: calls_file.exists() and victim_busy(), 60.0)
        workers[victim].send_signal(signal.SIGKILL)
        workers[victim].wait()
        killed_at = time.time()
        for name in names:
            if name != victim:
                assert workers[name].wait(timeout=90) == 0, (
                    tmp_path / f"stderr-{name}.txt"
                ).read_text()
    finally:
        for worker in workers.values():
            worker.kill()
            worker.wait()

    async with Client.open(pg_url) as client:
        runs = {run_id: await client.get(run_id) for run_id in ids}

    # G1: every run ended.
    assert all(run.state.terminal for run in runs.values())
    assert {run.state for run in runs.values()} <= {RunState.COMPLETED, RunState.DEAD_LETTERED}

    # G2: no write ran twice; a completed run's write ran exactly once.
    lines = [line.split() for line in calls_file.read_text().splitlines()]
    executions = Counter(run_id for run_id, _, _ in lines)
    assert max(executions.values()) == 1, "a non-idempotent write ran twice"
    for run_id, run in runs.items():
        if run.state is RunState.COMPLETED:
            assert executions[run_id] == 1, run_id
        else:
            assert run.reason is Reason.INTERRUPTED_WRITE, run

    # G6/G7: a run is held by one live worker at a time. Every claim of a run but
    # its last was the victim's; every reap took the victim's lease, after it died.
    everything = [e for name in names for e in read_events(tmp_path / f"events-{name}.jsonl")]
    # A worker stops once no run is queued or running (its last actors may still be
    # ending); one that stopped with claimed runs in hand would have released them to
    # the others, and their claims would read as taken leases: the drains say so.
    drained = [e for e in everything if e["event"] == "worker.draining"]
    claims: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for event in everything:
        if event["event"] == "run.claimed":
            claims[event["run_id"]].append((event["epoch"], event["worker_id"]))
    assert set(claims) == set(ids)
    for run_id, held in claims.items():
        held.sort()
        epochs = [epoch for epoch, _ in held]
        assert len(epochs) == len(set(epochs)), (run_id, held)
        assert all(worker == victim for _, worker in held[:-1]), (run_id, held, drained)
    reaps = [e for e in everything if e["event"] == "lease.reaped"]
    assert reaps, "the victim held no run when it was killed"
    assert {e["lease_owner"] for e in reaps} == {victim}
    assert all(e["time"] >= killed_at - 0.5 for e in reaps)
    assert not [e for e in everything if e["event"] == "lease.lost"]
    # The work was shared.
    assert {worker for _, worker, _ in lines} == set(names)


# -- the claim and reap scans use indexes; renewals write none ---------------------------


async def test_claim_and_lease_scans_use_indexes(pg_url: str) -> None:
    from leaseward.storage.queries import load_queries

    queries = load_queries("postgresql")
    connection = await asyncpg.connect(pg_url)
    try:
        await connection.execute(
            "INSERT INTO runs (id, agent, mode, state, reason, input_json, epoch, requeues,"
            " available_at, cancel_requested, created_at, updated_at, finished_at)"
            " SELECT 'done-' || n, 'a', 'queued', 'completed', 'completed', 'null', 1, 0,"
            " n, FALSE, n, n, n FROM generate_series(1, 20000) AS n"
        )
        # Some runs held and many waiting, as in a working store with a backlog: with
        # none held, the planner could pick any index that leads with the state; a plan
        # made for any LIMIT takes a tenth of the waiting ones, which a whole scan of
        # the table would beat unless each run picked is looked up by id.
        await connection.execute(
            "UPDATE runs SET state = CASE WHEN n <= 500 THEN 'running' ELSE 'queued' END,"
            " reason = NULL, finished_at = NULL,"
            " lease_expires_at = CASE WHEN n <= 500 THEN n END"
            " FROM generate_series(1, 10000) AS n WHERE id = 'done-' || n"
        )
        await connection.execute("ANALYZE runs")

        async def plan(name: str, **params: Any) -> str:
            text, names = translate_params(queries[name])
            rows = await connection.fetch(f"EXPLAIN {text}", *(params[n] for n in names))
            return "\n".join(row[0] for row in rows)

        claim = await claim_plan(connection)
        expired = await plan("running_leases", source="running")
    finally:
        await connection.close()
    assert "runs_claimable" in claim, claim
    assert "Index Scan using runs_pkey on runs " in claim, claim
    assert "Seq Scan on runs" not in claim, claim
    assert "Index Cond: (state = 'running'::text)" in expired, expired


async def claim_plan(connection: asyncpg.Connection[asyncpg.Record]) -> str:
    """The plan of the claim as its function keeps it: made once, for any arguments."""
    function = await connection.fetchrow(
        "SELECT prosrc, proargnames, oidvectortypes(proargtypes) AS types, proconfig"
        " FROM pg_proc WHERE proname = 'leaseward_claim_runs'"
    )
    assert function is not None
    assert "plan_cache_mode=force_generic_plan" in function["proconfig"]
    [query] = re.findall(r"RETURN QUERY(.*?);\s*END", function["prosrc"], re.DOTALL)
    for position, name in enumerate(function["proargnames"], 1):
        query = re.sub(rf"\b{name}\b", f"${position}", query)
    await connection.execute("SET plan_cache_mode = force_generic_plan")
    await connection.execute(f"PREPARE claim ({function['types']}) AS {query}")
    rows = await connection.fetch(
        "EXPLAIN EXECUTE claim('{a}', '{r1}', 5, 'queued', 'running', 'w', 30.0)"
    )
    return "\n".join(row[0] for row in rows)


async def test_lease_renewals_are_heap_only_updates(pg_url: str) -> None:
    """Renewals are the most frequent write: they must not write every index of a run."""
    from leaseward.storage.queries import load_queries

    text, names = translate_params(load_queries("postgresql")["renew_leases"])
    connection = await asyncpg.connect(pg_url)
    try:
        # An autovacuum worker analyzing the new rows holds a snapshot that keeps the
        # versions a renewal leaves from being pruned, so the next one finds no room.
        await connection.execute("ALTER TABLE runs SET (autovacuum_enabled = off)")
        await connection.execute(
            "INSERT INTO runs (id, agent, mode, state, input_json, epoch, requeues,"
            " lease_owner, lease_expires_at, lease_seconds, available_at, cancel_requested,"
            " created_at, updated_at)"
            " SELECT 'run-' || n, 'a', 'queued', 'running', 'null', 1, 0, 'w', 0, 30, 0,"
            " FALSE, 0, 0 FROM generate_series(1, 200) AS n"
        )
        items = json.dumps(
            [{"run_id": f"run-{n}", "epoch": 1, "lease_seconds": 30.0} for n in range(1, 201)]
        )
        params = {"items": items, "source": "running", "now": 0.0}
        hot: list[int] = []
        # One renewal a transaction, as the keeper and the Persister make them: the
        # versions an earlier one left are dead by then, and their room is reused.
        for _ in range(5):
            async with connection.transaction():
                renewed = await connection.fetch(text, *(params[n] for n in names))
                assert len(renewed) == 200
                hot.append(
                    await connection.fetchval(
                        "SELECT pg_stat_get_xact_tuples_hot_updated('runs'::regclass)"
                    )
                )
    finally:
        await connection.close()
    # The backend's counts accumulate until it reports them: the rounds are differences.
    rounds = [after - before for before, after in zip([0, *hot], hot, strict=False)]
    # The first round has the room fillfactor left, and changes no indexed column.
    assert rounds[0] == 200, rounds
    # Later rounds reuse the room a page prunes first. A page cannot prune while the
    # server keeps a snapshot older than its dead versions, which it did now and then
    # with other tests' sessions busy beside this one ([200, 7, 193, 13, 187]): such a
    # round sends its rows to the indexes, and the next finds room where they went.
    assert max(rounds[1:]) >= 180, rounds


async def test_an_older_workers_call_of_the_journal_function_still_fences_renews_and_writes(
    pg_url: str,
) -> None:
    """A worker from before migration 16 calls leaseward_write_journal with five
    arguments during a rolling deploy: its items renew their leases and write their
    rows, and an item under a stale epoch writes nothing."""
    store = await open_store(pg_url)
    try:
        await store.create_run(new_run())
        await store.create_run(new_run())
        held, stale = await store.claim_runs("w1", 2, 30.0, ["a"])
        before = await store.get_run(held.id)
        assert before is not None and before.lease_expires_at is not None
        items = [
            {"run_id": held.id, "epoch": held.epoch, "lease_seconds": 60.0},
            {"run_id": stale.id, "epoch": stale.epoch + 1, "lease_seconds": 60.0},
        ]
        steps = [
            [
                run.id,
                0,
                epoch,
                "provider",
                None,
                None,
                None,
                "succeeded",
                None,
                None,
                '{"text":"hi"}',
                None,
                None,
                True,
                None,
            ]
            for run, epoch in ((held, held.epoch), (stale, stale.epoch + 1))
        ]
        connection = await asyncpg.connect(pg_url)
        try:
            answer = await connection.fetchval(
                "SELECT leaseward_write_journal($1::jsonb, $2::jsonb, '[]'::jsonb, $3, $4)",
                json.dumps(items),
                json.dumps(steps),
                RunState.RUNNING.value,
                StepStatus.STARTED.value,
            )
        finally:
            await connection.close()
        assert json.loads(answer) == [[held.id, held.epoch, False]]
        renewed = await store.get_run(held.id)
        assert renewed is not None and renewed.lease_expires_at is not None
        assert renewed.lease_expires_at > before.lease_expires_at
        assert [step.seq for step in await store.list_steps(held.id)] == [0]
        assert await store.list_steps(stale.id) == []
    finally:
        await store.aclose()


async def test_a_claim_alone_is_one_statement_the_server_commits_by_itself(
    pg_url: str,
) -> None:
    """A worker's claim with nothing else to write is sent alone, one round trip where a
    transaction around it took three; beside other writes it stays in their transaction."""
    store, executor = await faulty_store(pg_url, writes_alone=True)
    claims: list[bool] = []

    async def note(statement: Statement) -> None:
        assert statement.transaction is not None
        claims.append(statement.transaction.alone)

    executor.inject(query("claim_runs"), note)
    try:
        first = await store.create_run(new_run())
        second = await store.create_run(new_run())
        (claimed,) = await store.claim_runs("w1", 1, 30.0, ["a"])
        assert claims == [True]
        assert claimed.id == first.id and claimed.epoch == 1

        results = await store.commit(
            WriteBatch(
                items=(BatchItem(claimed.id, claimed.epoch, lease_seconds=30.0),),
                claims=(ClaimRequest("w1", 1, 30.0, ("a",), (claimed.id,)),),
            )
        )
        assert claims == [True, False]
        assert results.items == (Stored(),)
        [(taken,)] = [unwrap(result) for result in results.claims]
        assert taken.id == second.id and taken.lease_owner == "w1"
    finally:
        await store.aclose()


async def test_a_claim_whose_answer_is_lost_leases_runs_a_reaper_gives_back(
    pg_url: str,
) -> None:
    """A claim sent alone may commit and its answer be lost: the worker is told the
    outcome is unknown and holds nothing it knows of. The run it leased is neither lost
    nor held twice: unrenewed, it is reaped and claimed again under a new epoch, and
    the first lease's epoch can write nothing."""
    store, executor = await faulty_store(pg_url, writes_alone=True)
    executor.inject(query("claim_runs"), after=lose_answer(), times=1)
    try:
        run = await store.create_run(new_run())
        with pytest.raises(CommitOutcomeUnknown):
            await store.claim_runs("w1", 1, 30.0, ["a"])
        leased = await store.get_run(run.id)
        assert leased is not None
        assert (leased.state, leased.epoch, leased.lease_owner) == (RunState.RUNNING, 1, "w1")

        (expired,) = await store.expired_runs(await store.running_leases())
        assert await store.reap(expired, Settlement(Event.REQUEUE))
        (again,) = await store.claim_runs("w2", 1, 30.0, ["a"])
        assert (again.id, again.epoch, again.lease_owner) == (run.id, 2, "w2")

        stale = StepWrite(
            seq=0, kind=StepKind.PROVIDER, status=StepStatus.SUCCEEDED, output_json='{"text":"x"}'
        )
        assert await store.commit_batch([BatchItem(run.id, 1, steps=(stale,))]) == [Fenced()]
        assert await store.list_steps(run.id) == []
    finally:
        await store.aclose()


async def test_a_batch_of_steps_renewals_and_settlements_is_one_statement(
    pg_url: str,
) -> None:
    """A batch that renews leases, writes steps and settles runs is one statement
    committed on its own, one round trip; a settlement that queues its run at once is a
    transaction, which tells the workers there is work, as is every batch of an executor
    that gains nothing by the one statement."""
    store, executor = await faulty_store(pg_url, writes_alone=True)
    one_statement = executor.inject(query("write_journal"))
    fence_apart = executor.inject(query("renew_leases"))
    try:
        await store.create_run(new_run())
        (run,) = await store.claim_runs("w1", 1, 30.0, ["a"])
        turn = StepWrite(
            seq=0, kind=StepKind.PROVIDER, status=StepStatus.SUCCEEDED, output_json='{"text":"hi"}'
        )
        renewal_and_turn = [
            BatchItem(run.id, run.epoch, lease_seconds=30.0),
            BatchItem(run.id, run.epoch, steps=(turn,), lease_seconds=30.0),
        ]
        assert await store.commit_batch(renewal_and_turn) == [Stored(), Stored()]
        assert (one_statement.fired, fence_apart.fired) == (1, 0)
        assert [step.seq for step in await store.list_steps(run.id)] == [0]

        assert await store.commit_batch([BatchItem(run.id, run.epoch, settlement=COMPLETE)]) == [
            Stored()
        ]
        assert (one_statement.fired, fence_apart.fired) == (2, 0)
        settled = await store.get_run(run.id)
        assert settled is not None and settled.state is RunState.COMPLETED

        await store.create_run(new_run())
        (released,) = await store.claim_runs("w1", 1, 30.0, ["a"])
        release = Settlement(Event.RELEASE)
        assert await store.commit_batch(
            [BatchItem(released.id, released.epoch, settlement=release)]
        ) == [Stored()]
        assert (one_statement.fired, fence_apart.fired) == (2, 1)
        queued = await store.get_run(released.id)
        assert queued is not None and queued.state is RunState.QUEUED
    finally:
        await store.aclose()
