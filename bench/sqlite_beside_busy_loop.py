"""How long SQLite's thread takes to commit a batch while another thread runs Python.

The Persister commits a batch on SQLite's connection thread while the event loop
runs the steps of the runs the last batch answered. Each time that thread needs
the interpreter's lock back (after every row ``executemany`` binds, after every
statement) and the loop is running Python, it waits up to the interpreter's switch
interval (5 ms) for the loop to be made to let go. This measures one batch of
``--rows`` journal-like rows (WAL, ``synchronous=FULL``, a fresh file), committed
alone and beside a thread that only counts, three ways: ``executemany`` (a
statement a row), one ``INSERT ... SELECT`` from a JSON set (one statement), and
the same without ``BEGIN``/``COMMIT`` (SQLite's own transaction). Standard
library only; prints one line a way and repetition.
"""

from __future__ import annotations

import argparse
import functools
import json
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

COLUMNS = "run_id, seq, kind, output_json"
PAYLOAD = json.dumps({"text": "x" * 200})


def open_database(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute(
        "CREATE TABLE steps (run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,"
        " output_json TEXT, PRIMARY KEY (run_id, seq))"
    )
    return connection


def batch(rows: int, seq: int) -> list[tuple[str, int, str, str]]:
    return [(f"run-{n}", seq, "tool", PAYLOAD) for n in range(rows)]


def writers(
    connection: sqlite3.Connection,
) -> dict[str, Callable[[list[tuple[str, int, str, str]]], None]]:
    def row_by_row(rows: list[tuple[str, int, str, str]]) -> None:
        connection.execute("BEGIN IMMEDIATE")
        connection.executemany(f"INSERT INTO steps ({COLUMNS}) VALUES (?, ?, ?, ?)", rows)
        connection.execute("COMMIT")

    insert_set = (
        f"INSERT INTO steps ({COLUMNS}) SELECT value ->> 0, value ->> 1, value ->> 2,"
        " value ->> 3 FROM json_each(?)"
    )

    def one_statement(rows: list[tuple[str, int, str, str]]) -> None:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(insert_set, (json.dumps(rows),))
        connection.execute("COMMIT")

    def autocommit(rows: list[tuple[str, int, str, str]]) -> None:
        connection.execute(insert_set, (json.dumps(rows),))

    return {"executemany": row_by_row, "one statement": one_statement, "autocommit": autocommit}


def beside_busy_thread(write: Callable[[], None]) -> float:
    """Seconds ``write`` takes on a thread of its own while this one runs Python."""
    done = threading.Event()

    def timed() -> None:
        write()
        done.set()

    writer = threading.Thread(target=timed)
    started = time.perf_counter()
    writer.start()
    count = 0
    while not done.is_set():
        for _ in range(1000):
            count += 1
    writer.join()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500, help="rows a batch (default: 500)")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    if args.rows < 1 or args.repetitions < 1:
        raise SystemExit("--rows and --repetitions must be at least 1")
    print(
        f"one batch of {args.rows} rows, WAL, synchronous=FULL; switch interval "
        f"{sys.getswitchinterval() * 1000:g} ms"
    )
    with tempfile.TemporaryDirectory() as directory:
        connection = open_database(Path(directory) / "steps.db")
        seq = 0
        for repetition in range(1, args.repetitions + 1):
            for name, write in writers(connection).items():
                seq += 1
                rows = batch(args.rows, seq)
                started = time.perf_counter()
                write(rows)
                alone = time.perf_counter() - started
                seq += 1
                beside = beside_busy_thread(functools.partial(write, batch(args.rows, seq)))
                print(
                    f"rep {repetition}  {name:14s} alone {alone * 1000:7.1f} ms   "
                    f"beside a busy thread {beside * 1000:8.1f} ms"
                )
        connection.close()


if __name__ == "__main__":
    main()
