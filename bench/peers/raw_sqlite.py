"""The raw SQLite limits the journal is compared with: rows/s committed one per
transaction, and 100 rows per transaction.

Standard library only (``sqlite3``), any Python. Each mode writes to a fresh
file of the kind the systems use (created in WAL mode, ``synchronous=FULL`` on
the connection) for a fixed window (``--seconds``), on one connection in
autocommit mode with explicit ``BEGIN IMMEDIATE`` ... ``COMMIT``:

* ``single``: one row per transaction;
* ``batched``: ``--batch`` rows (default 100) per transaction.

A row is shaped like a leaseward journal row: a run id (32 hex characters), an
integer sequence number (the two are the primary key) and a JSON text of about
300 bytes, spread over 100 runs. Prints one JSON line: rows/s and the p50/p99
of one commit for each mode.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
import time
import uuid
from pathlib import Path
from typing import Any

RUNS = 100
BATCH = 100
SECONDS = 2.0
BODIES = 1000


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


def write(path: Path, batch: int, seconds: float) -> dict[str, Any]:
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute(
            "CREATE TABLE steps (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
            "body TEXT NOT NULL, PRIMARY KEY (run_id, seq))"
        )
        runs = [uuid.uuid4().hex for _ in range(RUNS)]
        # Made before the clock starts, so the figure is SQLite's and not json.dumps's.
        bodies = [body(runs[index % RUNS], index // RUNS) for index in range(BODIES)]
        rows, commits, waits = 0, 0, []
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            values = []
            for offset in range(batch):
                index = rows + offset
                run_id, seq = runs[index % RUNS], index // RUNS
                values.append((run_id, seq, bodies[index % BODIES]))
            begun = time.perf_counter()
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany("INSERT INTO steps VALUES (?, ?, ?)", values)
            connection.execute("COMMIT")
            waits.append(time.perf_counter() - begun)
            rows += batch
            commits += 1
        elapsed = time.perf_counter() - started
        size = connection.execute("SELECT avg(length(body)) FROM steps").fetchone()[0]
    finally:
        connection.close()
    waits.sort()

    def rank(q: float) -> float:
        return waits[max(1, math.ceil(q / 100 * len(waits))) - 1] * 1000

    return {
        "rows_per_commit": batch,
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
    if args.db.exists() or batched.exists():
        raise SystemExit(f"{args.db} or {batched} exists already: each mode takes a fresh file")
    if args.seconds <= 0 or args.batch < 1:
        raise SystemExit("--seconds must be > 0 and --batch >= 1")
    result = {
        "system": "raw",
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "synchronous": "FULL",
        "single": write(args.db, 1, args.seconds),
        "batched": write(batched, args.batch, args.seconds),
    }
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
