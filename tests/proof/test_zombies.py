"""A worker frozen (SIGSTOP) at each point past its lease, then continued (SIGCONT) after
another worker took its run over: none of its calls start, and nothing it records or
settles gets through, so the run and its journal stay exactly as the rescuer left them.

``outcome_commit`` is left out: a process frozen inside a transaction holds the
database's write lock (SQLite) or the run's row lock (PostgreSQL), so nobody can
take over until it is continued, and then its commit simply lands before the
reap. That is a lock, not a lease, question.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leaseward.storage.crash_points import POINTS
from tests.proof.test_crash_sweep import sqlite_urls, sweep

# Real worker processes killed and waited for: make test-fast skips these.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ZOMBIE_POINTS = [point for point in POINTS if point != "outcome_commit"]


@pytest.mark.parametrize("point", ZOMBIE_POINTS)
async def test_frozen_at_point_changes_nothing_once_continued(point: str, tmp_path: Path) -> None:
    await sweep(point, sqlite_urls(tmp_path), tmp_path, "stop")
