"""procrastinate's side of the comparison on PostgreSQL: N jobs deferred, run by one worker.

procrastinate is a PostgreSQL task queue, not an agent runtime: it has no
journal of steps inside a job, so a job counts as one durable step (its row in
``procrastinate_jobs``, inserted by the defer and updated as the worker starts
and finishes it, each a commit). The job is an async task that does no work.

Untimed: a fresh database on ``--pg-url``'s server (created here, dropped
afterwards), ``App.open_async`` (a psycopg connection pool) and
``schema_manager.apply_schema_async()``. Timed, from before the first defer
until the worker has run every job: N ``defer_async`` calls at once with
``asyncio.gather`` (one per job, as an application makes them), then one
worker in this process, ``run_worker_async(wait=False, concurrency=C)``, which
returns once the queue is empty. Afterwards, untimed, the succeeded jobs and
the event rows are counted. The wait for a durable write is the time of each
``defer_async`` (one job inserted and committed).

Run with the peers' venv (``bench/.venv-peers/bin/python``); prints one JSON line.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from importlib.metadata import version

import procrastinate
from common import build_parser, emit, waits
from common import result as make_result
from peer_databases import count, fresh_database

WORKER_CONCURRENCY = 10


@dataclass(frozen=True)
class Measured:
    seconds: float
    defer_seconds: float
    open_seconds: float
    succeeded: int
    jobs: int
    events: int
    defer_waits: list[float]


async def measure(url: str, jobs: int, worker_concurrency: int) -> Measured:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="step")
    async def step(key: str) -> str:
        return key

    defer_waits: list[float] = []

    async def defer(index: int) -> None:
        started = time.perf_counter()
        await step.defer_async(key=f"k{index}")
        defer_waits.append(time.perf_counter() - started)

    async with app.open_async():
        opened = time.perf_counter()
        await app.schema_manager.apply_schema_async()
        open_seconds = time.perf_counter() - opened
        started = time.perf_counter()
        await asyncio.gather(*(defer(index) for index in range(jobs)))
        deferred = time.perf_counter() - started
        await app.run_worker_async(wait=False, concurrency=worker_concurrency)
        seconds = time.perf_counter() - started
    return Measured(
        seconds=seconds,
        defer_seconds=deferred,
        open_seconds=open_seconds,
        succeeded=count(url, "SELECT count(*) FROM procrastinate_jobs WHERE status='succeeded'"),
        jobs=count(url, "SELECT count(*) FROM procrastinate_jobs"),
        events=count(url, "SELECT count(*) FROM procrastinate_events"),
        defer_waits=defer_waits,
    )


def main() -> None:
    parser = build_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--pg-url",
        required=True,
        metavar="postgresql://...",
        help="a PostgreSQL server and maintenance database to create a fresh database from",
    )
    parser.add_argument(
        "--worker-concurrency",
        type=int,
        default=WORKER_CONCURRENCY,
        help="jobs the one worker runs at once (default: %(default)s)",
    )
    args = parser.parse_args()
    if args.concurrency < 1 or args.worker_concurrency < 1:
        raise SystemExit("--concurrency and --worker-concurrency must be >= 1")
    # One job is one step: --steps does not apply.
    args.steps = 1
    with fresh_database(args.pg_url, "procrastinate_peers") as url:
        measured = asyncio.run(measure(url, args.concurrency, args.worker_concurrency))
    emit(
        make_result(
            system="procrastinate",
            args=args,
            completed=measured.succeeded,
            steps=measured.succeeded,
            rows=measured.jobs + measured.events,
            seconds=measured.seconds,
            config={
                "version": version("procrastinate"),
                "store": "PostgreSQL, a fresh database, PsycopgConnector",
                "worker": f"one worker, concurrency={args.worker_concurrency}, wait=False",
                "durable": "procrastinate_jobs (one row per job: deferred, started, finished) "
                "and procrastinate_events",
            },
            extra={
                "open_seconds": measured.open_seconds,
                "submit_seconds": measured.defer_seconds,
                "tables": {
                    "procrastinate_jobs": measured.jobs,
                    "procrastinate_events": measured.events,
                },
                "wait": waits(measured.defer_waits, "each defer_async (one job committed)"),
            },
        )
    )


if __name__ == "__main__":
    main()
