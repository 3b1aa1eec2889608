"""Fresh PostgreSQL databases for the peers' workloads that run on PostgreSQL (DBOS,
procrastinate), through psycopg, which both bring; leaseward's own workload uses
``bench/pg_support.py`` with its own driver."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg

__all__ = ["count", "fresh_database"]


@contextmanager
def fresh_database(admin_url: str, prefix: str) -> Iterator[str]:
    """The URL of a new, empty database on ``admin_url``'s server; dropped on exit."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(admin_url)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def count(url: str, query: str) -> int:
    """The one number ``query`` (a ``SELECT count(*)`` of the caller's own) answers."""
    with psycopg.connect(url) as connection:
        row = connection.execute(query).fetchone()
        return int(row[0]) if row else 0
