"""A client never creates a store: a mistyped path is refused, not a new empty database that
no worker reads. A Runtime creates one, and says where."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from leaseward import Agent, App, Client, ProviderReply, Runtime, ScriptedProvider, StoreNotFound
from tests.integration.support import capture_logs

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.05}
HINT = "a daemon or `leaseward migrate` creates one"


def echo_app() -> App:
    return App([Agent("echo", ScriptedProvider([ProviderReply(text="done")]))])


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


async def test_client_open_refuses_a_missing_sqlite_file_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreNotFound) as raised:
        async with Client.open("sqlite:///lesaeward.db"):
            pass
    assert raised.value.message == f"no leaseward store at {tmp_path / 'lesaeward.db'}; {HINT}"
    assert raised.value.location == str(tmp_path / "lesaeward.db")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content", ["empty", "other-database", "not-a-database"])
async def test_client_open_refuses_a_sqlite_file_that_is_no_leaseward_store(
    tmp_path: Path, content: str
) -> None:
    path = tmp_path / "app.db"
    if content == "empty":
        path.touch()
    elif content == "other-database":
        other = sqlite3.connect(path)
        other.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
        other.commit()
        other.close()
    else:
        path.write_text("notes\n")
    before = files(tmp_path)
    said = f"{path} is not a SQLite database" if content == "not-a-database" else HINT
    with pytest.raises(StoreNotFound) as raised:
        async with Client.open(f"sqlite:///{path}"):
            pass
    assert said in raised.value.message and "\n" not in raised.value.message
    assert files(tmp_path) == before


async def test_client_open_refuses_a_postgresql_database_without_the_schema(
    request: pytest.FixtureRequest,
) -> None:
    server: Any = request.getfixturevalue("pg_server")
    name = server.create_database(migrated=False)
    request.addfinalizer(lambda: server.drop(name))
    url = server.url_for(name)
    with pytest.raises(StoreNotFound, match=f"no leaseward store at .*/{name}; {HINT}"):
        async with Client.open(url):
            pass
    pg = await asyncpg.connect(url)
    try:
        assert await pg.fetchval("SELECT to_regclass('schema_migrations')") is None
    finally:
        await pg.close()


async def test_client_open_uses_a_store_a_runtime_created(store_url: str) -> None:
    async with Runtime.open(store_url, echo_app(), **FAST) as rt:
        run_id = await rt.submit("echo", 1)
        await rt.wait(run_id, timeout=10)
    async with Client.open(store_url) as client:
        assert (await client.get(run_id)).result == "done"


async def test_runtime_open_creates_a_sqlite_store_and_logs_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with capture_logs() as logs:
        async with Runtime.open("sqlite:///runs.db", echo_app(), **FAST):
            pass
        async with Runtime.open("sqlite:///runs.db", echo_app(), **FAST):
            pass
    created = [entry for entry in logs if entry["event"] == "store.created"]
    assert created == [
        {"event": "store.created", "log_level": "info", "store": str(tmp_path / "runs.db")}
    ]


@pytest.mark.parametrize("synchronous", ["normal", "off", "full", "extra"])
async def test_a_worker_on_a_sqlite_store_that_is_not_fsynced_at_each_commit_says_so(
    tmp_path: Path, synchronous: str
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}?synchronous={synchronous}"
    with capture_logs() as logs:
        async with Runtime.open(url, echo_app(), **FAST):
            pass
        async with Client.open(url):
            pass
    relaxed = [entry for entry in logs if entry["event"] == "store.durability_relaxed"]
    if synchronous in ("full", "extra"):
        assert relaxed == []
    else:
        [warning] = relaxed
        assert warning["log_level"] == "warning"
        assert warning["synchronous"] == synchronous.upper()
        assert "a write whose intent was lost runs again" in warning["consequence"]


@pytest.mark.parametrize("setting", ["synchronous_commit = off", "synchronous_commit = local", ""])
async def test_a_worker_on_a_postgresql_database_that_commits_before_flushing_says_so(
    request: pytest.FixtureRequest, setting: str
) -> None:
    server: Any = request.getfixturevalue("pg_server")
    name = server.create_database()
    request.addfinalizer(lambda: server.drop(name))
    url = server.url_for(name)
    if setting:
        pg = await asyncpg.connect(url)
        try:
            await pg.execute(f'ALTER DATABASE "{name}" SET {setting}')
        finally:
            await pg.close()
    with capture_logs() as logs:
        async with Runtime.open(url, echo_app(), **FAST):
            pass
    relaxed = [entry for entry in logs if entry["event"] == "store.durability_relaxed"]
    if setting.endswith("off"):
        [warning] = relaxed
        assert (warning["fsync"], warning["synchronous_commit"]) == ("on", "off")
        assert "a write whose intent was lost runs again" in warning["consequence"]
    else:
        assert relaxed == []
