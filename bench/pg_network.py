"""leaseward on PostgreSQL across a network: the same workload with a delay on the wire.

``make bench-peers`` measures PostgreSQL on the same machine, where a round trip
costs tens of microseconds. Workers on other machines pay a network's round trip
for every message a batch needs. Here a TCP relay (this file with ``--relay``, in a
process of its own) forwards the worker's connections to the server and holds
every chunk it forwards for ``--delay-ms`` in each direction, so each round trip
costs twice that more; the event loop's timer holds a delay below a millisecond for
about a millisecond, so each cell's round trip is measured and printed too (the
least of 50 statements that do nothing, as a worker measures it when it opens).
``bench/peers/leaseward_workload.py`` runs as in
``make bench-peers`` (N runs of K steps, a read-only and a NON_IDEMPOTENT_WRITE
tool, a fresh database each) with each delay, 0 meaning directly to the server,
and on SQLite for scale; interleaved, medians and ranges printed, the JSON (with the
commit, the machine and the date) to ``bench/results/pg-network-<UTC timestamp>.json``,
copied to ``pg-network-latest.json``. This is a benchmark: it asserts nothing about
time.

    .venv/bin/python bench/pg_network.py --pg-url postgresql://postgres@127.0.0.1/postgres
    .venv/bin/python bench/pg_network.py --pg-url ... --delay-ms 0,0.5,2 --repetitions 5
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
from pg_support import exit_unless_answering
from steps import RESULTS_DIR, environment, shown, without_password, write_results

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "peers" / "leaseward_workload.py"
CHUNK_BYTES = 65536
ROUND_TRIPS_TIMED = 50


# -- the relay ------------------------------------------------------------------------------


async def _forward(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float
) -> None:
    """Copy one direction, each chunk held ``delay`` seconds from when it arrived: in
    order, and without holding up the chunks behind it for longer."""
    held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await held.get()
            if not data:
                writer.close()
                return
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            writer.write(data)
            await writer.drain()

    delivering = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(CHUNK_BYTES)
            held.put_nowait((time.monotonic() + delay, data))
            if not data:
                break
        await delivering
    finally:
        delivering.cancel()


async def relay(upstream: tuple[str, int], delay: float) -> None:
    async def serve(client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        try:
            server_in, server_out = await asyncio.open_connection(*upstream)
        except OSError:
            client_out.close()
            return
        await asyncio.gather(
            _forward(client_in, server_out, delay),
            _forward(server_in, client_out, delay),
            return_exceptions=True,
        )
        client_out.close()
        server_out.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    # The parent reads the port from the first line.
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


# -- the measurements -------------------------------------------------------------------------


def through(url: str, port: int) -> str:
    """``url`` with the relay's address; TLS off, so that the relay only copies bytes."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    query = dict(parse_qsl(parts.query))
    query["sslmode"] = "disable"
    netloc = f"{user}@127.0.0.1:{port}" if user else f"127.0.0.1:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), ""))


async def _least_round_trip(url: str) -> float:
    connection = await asyncpg.connect(url)
    try:
        least = float("inf")
        for _ in range(ROUND_TRIPS_TIMED):
            started = time.perf_counter()
            await connection.execute("SELECT 1")
            least = min(least, time.perf_counter() - started)
        return least
    finally:
        await connection.close()


def run_workload(args: argparse.Namespace, store: list[str], write: bool) -> float:
    command = [
        sys.executable,
        str(WORKLOAD),
        "--concurrency",
        str(args.concurrency),
        "--steps",
        str(args.steps),
        *store,
        *(["--write"] if write else []),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the workload failed: {done.stderr.strip()[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["steps_per_second"])


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def figure(entry: dict[str, float]) -> str:
    return f"{entry['median']:,.0f} ({entry['min']:,.0f}-{entry['max']:,.0f})"


def measure(
    args: argparse.Namespace,
) -> tuple[dict[str, dict[str, list[float]]], dict[str, float]]:
    upstream = urlsplit(args.pg_url)
    relays: dict[float, subprocess.Popen[str]] = {}
    urls: dict[float, str] = {}
    try:
        for delay in args.delays:
            if delay == 0:
                urls[delay] = args.pg_url
                continue
            process = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--relay",
                    f"{upstream.hostname or '127.0.0.1'}:{upstream.port or 5432}",
                    "--delay-ms",
                    str(delay),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert process.stdout is not None
            relays[delay] = process
            urls[delay] = through(args.pg_url, int(process.stdout.readline()))
        found: dict[str, dict[str, list[float]]] = {}
        round_trips = {
            f"{delay:g} ms": asyncio.run(_least_round_trip(url)) * 1000
            for delay, url in urls.items()
        }
        with tempfile.TemporaryDirectory() as scratch:
            cells: list[tuple[str, str | None]] = [
                *((f"{delay:g} ms", urls[delay]) for delay in args.delays),
                ("SQLite", None),
            ]
            for repetition in range(args.repetitions):
                for cell, url in cells:
                    for kind in ("read", "write"):
                        fresh = Path(scratch) / f"{repetition}-{kind}.db"
                        store = ["--pg-url", url] if url else ["--db", str(fresh)]
                        rate = run_workload(args, store, write=kind == "write")
                        found.setdefault(cell, {}).setdefault(kind, []).append(rate)
                        print(
                            f"rep {repetition + 1} {cell:>8} {kind:>5}: {rate:,.0f} steps/s",
                            flush=True,
                        )
        return found, round_trips
    finally:
        for process in relays.values():
            process.terminate()
            process.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-url", help="a server and maintenance database (see pg_support)")
    parser.add_argument(
        "--delay-ms",
        default="0,0.5",
        help="each direction's delay, comma-separated; 0 is no relay (default: %(default)s)",
    )
    parser.add_argument("--concurrency", type=int, default=100, metavar="N")
    parser.add_argument("--steps", type=int, default=10, metavar="K")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="where pg-network-<UTC timestamp>.json and pg-network-latest.json go "
        "(default: bench/results)",
    )
    parser.add_argument("--relay", metavar="HOST:PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        args.delays = [float(part) for part in args.delay_ms.split(",") if part.strip()]
    except ValueError:
        raise SystemExit(f"--delay-ms takes numbers: {args.delay_ms!r}") from None
    if not args.delays or any(delay < 0 for delay in args.delays):
        raise SystemExit("--delay-ms takes one or more numbers, none negative")
    if args.relay:
        host, _, port = args.relay.rpartition(":")
        asyncio.run(relay((host, int(port)), args.delays[0] / 1000))
        return
    if not args.pg_url:
        raise SystemExit("--pg-url is required (a server and maintenance database)")
    if args.concurrency < 1 or args.steps < 1 or args.repetitions < 1:
        raise SystemExit("--concurrency, --steps and --repetitions are at least 1")
    exit_unless_answering(args.pg_url)

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    found, round_trips = measure(args)
    summary = {
        cell: {kind: spread(rates) for kind, rates in kinds.items()}
        for cell, kinds in found.items()
    }
    sqlite = summary["SQLite"]
    print(
        f"\nleaseward, N={args.concurrency}, K={args.steps}, steps/s median (min-max) "
        f"of {args.repetitions}; delay is each direction's, the round trip as measured"
    )
    print(
        f"{'store':>16} {'round trip':>11} {'read':>22} {'write':>22} "
        f"{'read/SQLite':>12} {'write/SQLite':>13}"
    )
    for cell, kinds in summary.items():
        name = cell if cell == "SQLite" else f"PG, {cell}"
        trip = f"{round_trips[cell]:.2f} ms" if cell in round_trips else "-"
        print(
            f"{name:>16} {trip:>11} {figure(kinds['read']):>22} {figure(kinds['write']):>22} "
            f"{kinds['read']['median'] / sqlite['read']['median']:>11.2f}x "
            f"{kinds['write']['median'] / sqlite['write']['median']:>12.2f}x"
        )
    command = [Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]
    document = {
        "benchmark": "pg-network",
        "started_utc": stamp,
        "command": [without_password(part) for part in command],
        "environment": environment(),
        "concurrency": args.concurrency,
        "steps": args.steps,
        "repetitions": args.repetitions,
        "delays_ms": args.delays,
        "round_trips_ms": round_trips,
        "measured": found,
        "summary": summary,
    }
    path = write_results(args.results_dir, "pg-network", document)
    print(f"results: {shown(path)} (and pg-network-latest.json)")


if __name__ == "__main__":
    main()
