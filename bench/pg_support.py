"""PostgreSQL helpers for the benchmarks: a fresh database per measurement.

The URL given on the command line names a server and a maintenance database the
benchmark may create databases from (e.g. postgresql://postgres@127.0.0.1/postgres);
each measurement gets its own database, migrated, and drops it afterwards, so no
data of yours is touched.
"""

from __future__ import annotations

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
