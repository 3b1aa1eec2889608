"""What the workloads share: their command line, the SQLite file, the waits, the JSON line.

Each workload (``leaseward_workload.py``, ``dbos_workload.py``,
``langgraph_workload.py``, ``procrastinate_workload.py``) runs in its own
interpreter, started by ``compare.py``, and imports only this module from here
and the standard library besides its own system. It runs N concurrent runs of K
durable tool steps each on a fresh SQLite file (or a fresh PostgreSQL database,
``--pg-url``, where the system has one) and prints one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "STEPS_PER_RUN",
    "WAIT_TIMEOUT_SECONDS",
    "add_pg_url",
    "build_parser",
    "check_args",
    "count_rows",
    "emit",
    "journal_mode",
    "prepare_wal_file",
    "result",
    "waits",
]

STEPS_PER_RUN = 10
WAIT_TIMEOUT_SECONDS = 600.0


def build_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=100,
        metavar="N",
        help="runs started at once; all N run concurrently (default: %(default)s)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=STEPS_PER_RUN,
        metavar="K",
        help="durable tool steps per run (default: %(default)s)",
    )
    parser.add_argument(
        "--db",
        type=Path,
        default=None,
        help="the SQLite file to create; it must not exist yet",
    )
    return parser


def add_pg_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pg-url",
        default=None,
        metavar="postgresql://...",
        help="instead of --db: a PostgreSQL server and maintenance database; the workload "
        "creates a fresh database there and drops it afterwards",
    )


def check_args(args: argparse.Namespace) -> None:
    if args.concurrency < 1 or args.steps < 1:
        raise SystemExit("--concurrency and --steps must be >= 1")
    if (args.db is None) == (getattr(args, "pg_url", None) is None):
        raise SystemExit("give one of --db (a fresh SQLite file) and --pg-url")
    if args.db is not None and args.db.exists():
        raise SystemExit(f"{args.db} exists already: every measurement takes a fresh file")


def waits(seconds: Sequence[float], what: str) -> dict[str, Any]:
    """Nearest-rank p50 and p99 (and the max) of the waits for durable writes, in ms."""
    ordered = sorted(seconds)

    def rank(q: float) -> float:
        if not ordered:
            return 0.0
        return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1] * 1000

    return {
        "count": len(ordered),
        "p50_ms": rank(50),
        "p99_ms": rank(99),
        "max_ms": ordered[-1] * 1000 if ordered else 0.0,
        "what": what,
    }


def prepare_wal_file(path: Path) -> str:
    """Create the database file in WAL mode before the system opens it; WAL is
    a property of the file, so every later connection uses it."""
    connection = sqlite3.connect(path)
    try:
        mode = str(connection.execute("PRAGMA journal_mode=WAL").fetchone()[0])
    finally:
        connection.close()
    if mode.lower() != "wal":
        raise SystemExit(f"could not put {path} in WAL mode (journal_mode={mode})")
    return mode.lower()


def journal_mode(path: Path) -> str:
    """The file's journal mode, read back after the measurement."""
    connection = sqlite3.connect(path)
    try:
        return str(connection.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    finally:
        connection.close()


def count_rows(path: Path, tables: Sequence[str]) -> dict[str, int]:
    """Rows in each of ``tables`` (names from the caller's code, not input)."""
    connection = sqlite3.connect(path)
    try:
        return {
            table: int(connection.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
            for table in tables
        }
    finally:
        connection.close()


def result(
    *,
    system: str,
    args: argparse.Namespace,
    completed: int,
    steps: int,
    rows: int,
    seconds: float,
    config: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON object a workload prints: the same keys for every system."""
    runs: int = args.concurrency
    return {
        "system": system,
        "concurrency": runs,
        "runs": runs,
        "completed": completed,
        "steps_per_run": args.steps,
        "steps": steps,
        "rows": rows,
        "rows_per_run": rows / runs,
        "seconds": seconds,
        "steps_per_second": steps / seconds if seconds > 0 else 0.0,
        "rows_per_second": rows / seconds if seconds > 0 else 0.0,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "config": dict(config),
        **(extra or {}),
    }


def emit(payload: Mapping[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n")
    sys.stdout.flush()
