"""PostgreSQL helpers for the benchmarks: a fresh database per measurement.

The URL given on the command line names a server and a maintenance database the
benchmark may create databases from (e.g. postgresql://postgres@127.0.0.1/postgres);
each measurement gets its own database, migrated, and drops it afterwards, so no
data of yours is touched.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from leaseward.storage import open_store


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, ""))


async def admin(url: str, *statements: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


async def _answers(url: str, timeout: float) -> None:
    connection = await asyncpg.connect(url, timeout=timeout)
    await connection.close()


def exit_unless_answering(url: str, timeout: float = 5.0) -> None:
    """Stop with one line, before any measurement, when the server in ``url`` does not
    take a connection: a benchmark that meets it mid-way ends in a traceback and may
    have written a results file of nothing but failures."""
    try:
        asyncio.run(_answers(url, timeout))
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        parts = urlsplit(url)
        where = f"{parts.hostname or 'localhost'}:{parts.port or 5432}"
        detail = str(exc).strip() or type(exc).__name__
        raise SystemExit(f"PostgreSQL at {where} does not answer: {detail}") from None


@asynccontextmanager
async def fresh_database(admin_url: str, label: str = "bench") -> AsyncIterator[str]:
    """The URL of a new, migrated database on ``admin_url``'s server; dropped on exit."""
    name = f"leaseward_{label}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    await admin(admin_url, f'CREATE DATABASE "{name}"')
    url = with_database(admin_url, name)
    try:
        store = await open_store(url)
        await store.aclose()
        yield url
    finally:
        await admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
