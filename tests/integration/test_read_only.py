"""Opening a store read-only, and a writer on a store it cannot write: on every dialect.

A read-only open is what the operator's looking commands (``runs``, ``show``,
``dead-letters``) use: it must work where only reading is allowed, change nothing
(not even a migration), and say in one error when the schema is not the one this
leaseward knows. A store opened for writing must find out at once that it cannot
write, not at its first claim.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from leaseward import Client, SchemaMismatch, StoreError, StoreNotFound
from leaseward.client import open_existing_store
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.lifecycle import RunMode
from leaseward.runtime.runs import NewRun
from leaseward.storage import open_store
from leaseward.storage.migrations import MIGRATIONS
from tests.file_modes import unwritable

pytestmark = pytest.mark.anyio

NEWEST = MIGRATIONS[-1].version


def new_run(agent: str = "a") -> NewRun:
    return NewRun(id=str(uuid.uuid4()), agent=agent, mode=RunMode.QUEUED, input_json=dump_json(1))


def path_of(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


async def execute(url: str, *statements: str) -> None:
    """Statements on a connection of the test's own, outside leaseward."""
    if url.startswith("sqlite"):
        connection = sqlite3.connect(path_of(url), isolation_level=None)
        try:
            for statement in statements:
                connection.execute(statement)
        finally:
            connection.close()
        return
    pg = await asyncpg.connect(url)
    try:
        for statement in statements:
            await pg.execute(statement)
    finally:
        await pg.close()


async def versions(url: str) -> list[int]:
    if url.startswith("sqlite"):
        connection = sqlite3.connect(path_of(url))
        try:
            rows = connection.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()
        finally:
            connection.close()
        return [row[0] for row in rows]
    pg = await asyncpg.connect(url)
    try:
        return [
            r["version"] for r in await pg.fetch("SELECT version FROM schema_migrations ORDER BY 1")
        ]
    finally:
        await pg.close()


@pytest.fixture
async def one_run(anyio_backend: str, store_url: str) -> AsyncIterator[str]:
    """The id of the one run in a migrated store that no process has open."""
    store = await open_store(store_url)
    try:
        record = await store.create_run(new_run())
    finally:
        await store.aclose()
    yield record.id


@asynccontextmanager
async def cannot_write(store_url: str) -> AsyncIterator[None]:
    """The store refuses this process's writes: an immutable file, or a read-only database."""
    if store_url.startswith("sqlite"):
        with unwritable(path_of(store_url)):
            yield
        return
    # New sessions of the database start read-only, as on a hot standby.
    database = urlsplit(store_url).path.lstrip("/")
    await execute(store_url, f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
    yield


async def test_a_read_only_store_reads_and_refuses_every_change(
    store_url: str, one_run: str
) -> None:
    store = await open_store(store_url, read_only=True)
    try:
        record = await store.get_run(one_run)
        assert record is not None and record.agent == "a"
        assert [r.id for r in await store.list_runs()] == [one_run]
        assert await store.list_steps(one_run) == []
        assert await store.schema_version() == NEWEST
        with pytest.raises(StoreError):
            await store.create_run(new_run())
        with pytest.raises(StoreError):
            await store.request_cancel(one_run)
        with pytest.raises(StoreError):
            await store.migrate()
    finally:
        await store.aclose()
    store = await open_store(store_url, read_only=True)
    try:
        assert [r.id for r in await store.list_runs()] == [one_run]
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (f"DELETE FROM schema_migrations WHERE version = {NEWEST}", "older"),
        (f"INSERT INTO schema_migrations VALUES ({NEWEST + 1}, 'future', 0)", "newer"),
    ],
)
async def test_a_read_only_open_of_another_schema_version_is_refused_and_migrates_nothing(
    store_url: str, one_run: str, change: str, fragment: str
) -> None:
    await execute(store_url, change)
    before = await versions(store_url)
    with pytest.raises(StoreError, match=fragment) as raised:
        await open_store(store_url, read_only=True)
    assert "\n" not in raised.value.message
    assert await versions(store_url) == before


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (f"DELETE FROM schema_migrations WHERE version = {NEWEST}", "older"),
        (f"INSERT INTO schema_migrations VALUES ({NEWEST + 1}, 'future', 0)", "newer"),
    ],
)
async def test_a_client_never_migrates_another_schema_version(
    store_url: str, one_run: str, change: str, fragment: str
) -> None:
    """Only `leaseward migrate` and a worker upgrade a schema: a submit from a newer CLI
    must not upgrade a store under the workers of the version before."""
    await execute(store_url, change)
    before = await versions(store_url)
    with pytest.raises(SchemaMismatch, match=fragment) as raised:
        await open_existing_store(store_url)
    assert "leaseward migrate" in raised.value.message or fragment == "newer"
    with pytest.raises(SchemaMismatch, match=fragment):
        async with Client.open(store_url):
            pass
    assert await versions(store_url) == before


async def test_a_read_only_open_of_a_database_without_the_schema_is_refused(
    request: pytest.FixtureRequest, tmp_path: Path, dialect: str
) -> None:
    if dialect == "sqlite":
        path = tmp_path / "empty.db"
        path.touch()
        url = f"sqlite:///{path}"
    else:
        server: Any = request.getfixturevalue("pg_server")
        name = server.create_database(migrated=False)
        request.addfinalizer(lambda: server.drop(name))
        url = server.url_for(name)
    with pytest.raises(StoreNotFound, match=r"no leaseward store at"):
        await open_store(url, read_only=True)
    if dialect == "sqlite":
        assert path.stat().st_size == 0
    else:
        pg = await asyncpg.connect(url)
        try:
            assert await pg.fetchval("SELECT to_regclass('schema_migrations')") is None
        finally:
            await pg.close()


async def test_a_store_this_process_cannot_write_is_refused_when_opened_for_writing(
    store_url: str, one_run: str
) -> None:
    async with cannot_write(store_url):
        with pytest.raises(StoreError, match="cannot write to the store") as raised:
            await open_store(store_url)
        assert "\n" not in raised.value.message
        # Looking still works.
        store = await open_store(store_url, read_only=True)
        try:
            assert [r.id for r in await store.list_runs()] == [one_run]
        finally:
            await store.aclose()


# -- SQLite: a file in a directory where its side files cannot be created --------------------


async def test_sqlite_read_only_in_an_unwritable_directory_reads_a_quiet_database(
    db_url: str,
) -> None:
    store = await open_store(db_url)
    try:
        run = await store.create_run(new_run())
    finally:
        await store.aclose()
    path = path_of(db_url)
    before = sorted(p.name for p in path.parent.iterdir())
    with unwritable(path, path.parent):
        store = await open_store(db_url, read_only=True)
        try:
            assert [r.id for r in await store.list_runs()] == [run.id]
        finally:
            await store.aclose()
    assert sorted(p.name for p in path.parent.iterdir()) == before == ["runs.db"]


async def test_sqlite_read_only_sees_what_a_live_writer_has_only_in_its_write_ahead_log(
    db_url: str,
) -> None:
    store = await open_store(db_url)
    try:
        run = await store.create_run(new_run("before"))
    finally:
        await store.aclose()
    path = path_of(db_url)
    # A writer that keeps its change in the -wal (no checkpoint) and stays open: the
    # file alone is stale, so reading it as immutable would be wrong.
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("UPDATE runs SET agent = 'in-the-log' WHERE id = ?", (run.id,))
        with unwritable(path.parent):
            store = await open_store(db_url, read_only=True)
            try:
                found = await store.get_run(run.id)
            finally:
                await store.aclose()
    finally:
        writer.close()
    assert found is not None and found.agent == "in-the-log"
