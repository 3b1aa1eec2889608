"""DBOS Transact's side of the peer comparison: N concurrent workflows of K async steps.

The system database is a fresh SQLite file (``system_database_url``
``sqlite:///...``), created here in WAL mode before DBOS opens it. DBOS sets
``busy_timeout`` and IMMEDIATE transactions on its connections but neither the
journal mode nor ``synchronous``; a SQLAlchemy ``connect`` listener reads the
``synchronous`` each new connection starts with (reported as
``synchronous_default``) and sets it to FULL. With ``--pg-url`` it is instead a
fresh PostgreSQL database (``system_database_url`` ``postgresql://...``, which
DBOS reaches through psycopg), created here and dropped afterwards.

Untimed: ``DBOS(config=...)`` and ``DBOS.launch()`` (schema migrations, the
background threads). Timed, from before the first start until every workflow
has returned: N ``DBOS.start_workflow_async`` calls at once with
``asyncio.gather``, then every handle's ``get_result()``. Each workflow awaits
K ``@DBOS.step()`` calls of an async read that does no work; DBOS records each
step's output in ``operation_outputs`` before the workflow goes on. The wait
for a durable write is the time of each ``await lookup(...)`` inside the
workflow, as the workflow sees it: the step's (empty) body and its recorded
output.

Run with the peers' venv (``bench/.venv-peers/bin/python``); prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from importlib.metadata import version
from typing import Any

import sqlalchemy as sa
from common import (
    add_pg_url,
    build_parser,
    check_args,
    count_rows,
    emit,
    journal_mode,
    prepare_wal_file,
    waits,
)
from common import result as make_result
from dbos import DBOS, DBOSConfig
from peer_databases import count, fresh_database

SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
TABLES = ("workflow_status", "workflow_input", "workflow_output", "operation_outputs")

# What each new connection of DBOS's engine reported before the listener set FULL,
# and after; filled in by full_sync below.
seen_default: set[int] = set()
seen_after: set[int] = set()
# Seconds each awaited step took, as its workflow saw it.
step_waits: list[float] = []


@sa.event.listens_for(sa.engine.Engine, "connect")
def full_sync(dbapi_connection: Any, connection_record: Any) -> None:
    if not hasattr(dbapi_connection, "create_function"):
        return  # PostgreSQL: durable on commit already (synchronous_commit=on)
    cursor = dbapi_connection.cursor()
    try:
        seen_default.add(int(cursor.execute("PRAGMA synchronous").fetchone()[0]))
        cursor.execute("PRAGMA synchronous=FULL")
        seen_after.add(int(cursor.execute("PRAGMA synchronous").fetchone()[0]))
    finally:
        cursor.close()


@DBOS.step()
async def lookup(key: str) -> str:
    """A read that does no work, so what DBOS records is what is measured."""
    return key


@DBOS.workflow()
async def agent_run(index: int, steps: int) -> int:
    for turn in range(steps):
        started = time.perf_counter()
        await lookup(f"k{turn}")
        step_waits.append(time.perf_counter() - started)
    return index


def names(values: set[int]) -> str:
    return ",".join(SYNCHRONOUS_NAMES.get(v, str(v)) for v in sorted(values)) or "unknown"


async def main() -> None:
    parser = build_parser(__doc__.splitlines()[0])
    add_pg_url(parser)
    args = parser.parse_args()
    check_args(args)
    if args.pg_url is None:
        prepare_wal_file(args.db)
        await measure(args, f"sqlite:///{args.db.resolve()}")
        return
    with fresh_database(args.pg_url, "dbos_peers") as url:
        await measure(args, url)


async def measure(args: argparse.Namespace, url: str) -> None:
    config: DBOSConfig = {
        "name": "leaseward-peers-bench",
        "system_database_url": url,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    opened = time.perf_counter()
    DBOS.launch()
    open_seconds = time.perf_counter() - opened
    try:
        started = time.perf_counter()
        handles = await asyncio.gather(
            *(DBOS.start_workflow_async(agent_run, i, args.steps) for i in range(args.concurrency))
        )
        submitted = time.perf_counter() - started
        results = await asyncio.gather(*(handle.get_result() for handle in handles))
        seconds = time.perf_counter() - started
    finally:
        DBOS.destroy()

    counts = (
        {table: count(url, f'SELECT count(*) FROM dbos."{table}"') for table in TABLES}
        if args.pg_url
        else count_rows(args.db, TABLES)
    )
    steps = counts["operation_outputs"]
    rows = sum(counts.values())
    emit(
        make_result(
            system="dbos-pg" if args.pg_url else "dbos",
            args=args,
            completed=sum(1 for i, r in enumerate(results) if r == i),
            steps=steps,
            rows=rows,
            seconds=seconds,
            config={
                "version": version("dbos"),
                "store": "PostgreSQL system database, a fresh database (postgresql://...)"
                if args.pg_url
                else "SQLite system database (system_database_url sqlite:///...)",
                "journal_mode": "-" if args.pg_url else journal_mode(args.db),
                "synchronous_default": "-" if args.pg_url else names(seen_default),
                "synchronous": "-" if args.pg_url else names(seen_after),
                "durable": "operation_outputs (one row per step); workflow_status "
                "(inserted at start, updated at the end), workflow_input, workflow_output",
            },
            extra={
                "open_seconds": open_seconds,
                "submit_seconds": submitted,
                "tables": counts,
                "wait": waits(step_waits, "each await of a @DBOS.step() inside the workflow"),
            },
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
