"""Shared fixtures: anyio's pytest plugin on asyncio, and a fresh SQLite file per test."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def anyio_backend() -> str:
    # leaseward runs on asyncio; anyio's own plugin drives the async tests so
    # they use the same primitives (task groups, cancel scopes) as the code.
    return "asyncio"


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"
