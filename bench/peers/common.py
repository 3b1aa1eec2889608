"""What the three workloads share: their command line, the SQLite file, the JSON line.

Each workload (``leaseward_workload.py``, ``dbos_workload.py``,
``langgraph_workload.py``) runs in its own interpreter, started by
``compare.py``, and imports only this module from here and the standard
library besides its own system. It runs N concurrent runs of K durable tool
steps each on a fresh SQLite file and prints one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "STEPS_PER_RUN",
    "WAIT_TIMEOUT_SECONDS",
    "build_parser",
    "check_args",
    "count_rows",
    "emit",
    "journal_mode",
    "prepare_wal_file",
    "result",
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
        required=True,
        help="the SQLite file to create; it must not exist yet",
    )
    return parser


def check_args(args: argparse.Namespace) -> None:
    if args.concurrency < 1 or args.steps < 1:
        raise SystemExit("--concurrency and --steps must be >= 1")
    if args.db.exists():
        raise SystemExit(f"{args.db} exists already: every measurement takes a fresh file")


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
