"""The CLI's exit codes follow one rule, whichever store a command is given.

2 is a command that is wrong in itself, found before any store is asked; 1 is a
well-formed command that the store, or a run in it, refused. A store that is not
there is the second kind on both stores: a missing SQLite file as much as a missing
PostgreSQL database.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.acceptance.acceptance_support import (
    OPERATOR_COMMANDS,
    assert_one_line_error,
    leaseward,
    sqlite_url,
)
from tests.conftest import PgServer

EXIT_FAILURE = 1

EVERY_COMMAND = [
    *OPERATOR_COMMANDS,
    ("migrate",),
    ("daemon", "--app", "demo_app:app"),
    ("console", "--port", "0"),
]


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=" ".join)
def test_a_sqlite_store_that_is_not_there_is_a_failure(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    # In a directory that does not exist, so that not even migrate or a daemon can
    # create it.
    missing = tmp_path / "missing"
    result = leaseward(*command, "--store", sqlite_url(missing / "runs.db"))
    assert_one_line_error(result, EXIT_FAILURE, str(missing))
    assert not missing.exists()


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=" ".join)
def test_a_postgresql_database_that_is_not_there_is_a_failure(
    pg_server: PgServer, command: tuple[str, ...]
) -> None:
    database = f"lw_missing_{uuid.uuid4().hex[:8]}"
    url = pg_server.url_for(database)
    result = leaseward(*command, "--store", url)
    assert_one_line_error(
        result,
        EXIT_FAILURE,
        f"no leaseward store at {url}",
        f'database "{database}" does not exist',
        "createdb",
    )


@pytest.mark.parametrize("command", [("runs",), ("migrate",), ("daemon", "--app", "demo_app:app")])
def test_a_login_the_postgresql_server_refuses_is_a_failure(
    pg_server: PgServer, pg_database: str, command: tuple[str, ...]
) -> None:
    # As a SQLite file this user may not open: the store's answer, not the command's form.
    parts = urlsplit(pg_server.url_for(pg_database))
    role = f"lw_nobody_{uuid.uuid4().hex[:8]}"
    netloc = f"{role}@{parts.hostname}:{parts.port or 5432}"
    url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    result = leaseward(*command, "--store", url)
    assert_one_line_error(result, EXIT_FAILURE, f'role "{role}" does not exist')
