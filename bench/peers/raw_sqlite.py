"""The raw SQLite limits the journal and the submits are compared with: rows/s
committed one per transaction, 100 rows per transaction, and a run row alone.

Standard library only (``sqlite3``), any Python. Each mode writes to a fresh
file of the kind the systems use (created in WAL mode, ``synchronous=FULL`` on
the connection) for a fixed window (``--seconds``), on one connection in
autocommit mode with explicit ``BEGIN IMMEDIATE`` ... ``COMMIT``:

* ``single``: one row per transaction;
* ``batched``: ``--batch`` rows (default 100) per transaction;
* ``run_row``: one run row per transaction, as a submit's, into the ``runs`` table
  of leaseward's own SQLite schema (every migration in ``storage/sql/migrations``
  applied to the file first): the least a submit that commits on its own can
  cost, with the run's id, claim and listing indexes and its count to update.

In the first two a row is shaped like a leaseward journal row: a run id (32 hex
characters), an integer sequence number (the two are the primary key) and a JSON
text of about 300 bytes, spread over 100 runs. Prints one JSON line: rows/s and
the p50/p99 of one commit for each mode.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

RUNS = 100
BATCH = 100
SECONDS = 2.0
BODIES = 1000
MIGRATIONS = Path(__file__).resolve().parents[2] / "storage" / "sql" / "migrations"
INSERT_STEP = "INSERT INTO steps VALUES (?, ?, ?)"
STEP_SIZE = "SELECT avg(length(body)) FROM steps"
RUN_SIZE = "SELECT avg(length(input_json)) FROM runs"
# The columns a submit's insert gives a new queued run (storage/sql/queries/sqlite.sql,
# insert_runs), the rest left to their defaults as there.
INSERT_RUN = (
    "INSERT INTO runs (id, agent, mode, state, input_json, epoch, requeues, lease_seconds, "
    "available_at, cancel_requested, created_at, updated_at, request_digest) "
    "VALUES (?, 'quick', 'queued', 'queued', ?, 0, 0, 300.0, ?, 0, ?, ?, ?)"
)


def body(run_id: str, seq: int) -> str:
    """About 300 bytes of JSON, like a tool step's recorded call and outcome."""
    return json.dumps(
        {
            "kind": "tool",
            "run_id": run_id,
            "seq": seq,
            "tool": "lookup",
            "call_id": f"call-{seq}",
            "arguments": {"key": f"k{seq}", "query": "the customer's last three orders"},
            "status": "succeeded",
            "output": {"value": f"k{seq}", "rows": [1, 2, 3], "note": "x" * 64},
            "attempt": 1,
        },
        separators=(",", ":"),
    )


def journal_rows(connection: sqlite3.Connection, batch: int) -> Iterator[list[tuple[Any, ...]]]:
    """Batches of journal-shaped rows, into a table of their own."""
    connection.execute(
        "CREATE TABLE steps (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
        "body TEXT NOT NULL, PRIMARY KEY (run_id, seq))"
    )
    runs = [uuid.uuid4().hex for _ in range(RUNS)]
    # Made before the clock starts, so the figure is SQLite's and not json.dumps's.
    bodies = [body(runs[index % RUNS], index // RUNS) for index in range(BODIES)]
    for rows in itertools.count(0, batch):
        yield [
            (runs[index % RUNS], index // RUNS, bodies[index % BODIES])
            for index in range(rows, rows + batch)
        ]


def run_rows(connection: sqlite3.Connection) -> Iterator[list[tuple[Any, ...]]]:
    """One new queued run a transaction, into leaseward's own schema."""
    for migration in sorted(MIGRATIONS.glob("*.sqlite.sql")):
        connection.executescript(migration.read_text())
    digest = "0" * 64
    for index in itertools.count():
        now = time.time()
        yield [(uuid.uuid4().hex, json.dumps({"loop": index}), now, now, now, digest)]


def write(
    path: Path,
    seconds: float,
    insert: str,
    batches: Callable[[sqlite3.Connection], Iterator[list[tuple[Any, ...]]]],
    size_sql: str,
) -> dict[str, Any]:
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        connection.execute("PRAGMA synchronous=FULL")
        made = batches(connection)
        values = next(made)
        per_commit = len(values)
        rows, commits, waits = 0, 0, []
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            begun = time.perf_counter()
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany(insert, values)
            connection.execute("COMMIT")
            waits.append(time.perf_counter() - begun)
            rows += len(values)
            commits += 1
            values = next(made)
        elapsed = time.perf_counter() - started
        size = connection.execute(size_sql).fetchone()[0]
    finally:
        connection.close()
    waits.sort()

    def rank(q: float) -> float:
        return waits[max(1, math.ceil(q / 100 * len(waits))) - 1] * 1000

    return {
        "rows_per_commit": per_commit,
        "rows": rows,
        "commits": commits,
        "seconds": elapsed,
        "rows_per_second": rows / elapsed,
        "commit_p50_ms": rank(50),
        "commit_p99_ms": rank(99),
        "row_bytes": size,
        "journal_mode": str(mode).lower(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", type=Path, required=True, help="the file for the single mode; it must not exist"
    )
    parser.add_argument("--seconds", type=float, default=SECONDS, help="window per mode")
    parser.add_argument("--batch", type=int, default=BATCH, help="rows per commit when batched")
    args = parser.parse_args()
    batched = args.db.with_name(f"{args.db.stem}-batched{args.db.suffix}")
    run_row = args.db.with_name(f"{args.db.stem}-run-row{args.db.suffix}")
    if args.db.exists() or batched.exists() or run_row.exists():
        raise SystemExit(f"{args.db} or a sibling exists already: each mode takes a fresh file")
    if args.seconds <= 0 or args.batch < 1:
        raise SystemExit("--seconds must be > 0 and --batch >= 1")
    result = {
        "system": "raw",
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "synchronous": "FULL",
        "single": write(
            args.db, args.seconds, INSERT_STEP, lambda c: journal_rows(c, 1), STEP_SIZE
        ),
        "batched": write(
            batched, args.seconds, INSERT_STEP, lambda c: journal_rows(c, args.batch), STEP_SIZE
        ),
        "run_row": write(run_row, args.seconds, INSERT_RUN, run_rows, RUN_SIZE),
    }
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
