"""Fixtures of the acceptance tests; the helpers are in acceptance_support.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.acceptance_support import DaemonPool, sqlite_url


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[DaemonPool]:
    pool = DaemonPool(tmp_path)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """A directory holding only the database (and SQLite's side files)."""
    directory = tmp_path / "store"
    directory.mkdir()
    return directory


@pytest.fixture
def url(store_dir: Path) -> str:
    return sqlite_url(store_dir / "runs.db")


@pytest.fixture
def calls_file(tmp_path: Path) -> Path:
    return tmp_path / "calls.jsonl"


@pytest.fixture
def provider_file(tmp_path: Path) -> Path:
    return tmp_path / "provider.jsonl"
