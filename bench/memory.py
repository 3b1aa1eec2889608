"""Memory per concurrent run parked in a long tool call, and whether its lease holds.

A Runtime with ``concurrency=N`` is opened on a fresh SQLite file (WAL,
``synchronous=FULL``), or with ``--store postgresql://...`` on a fresh database
on that server (analyzed once the runs are submitted, as autovacuum would),
with one agent whose provider asks for one call of a read-only tool, ``park``,
and then answers. ``park`` counts its run in and waits on an ``anyio.Event``.
N runs are submitted with ``rt.submit_many`` in chunks (``--chunk``), and once
all N are inside the tool (counted by the tool itself) the process's resident
set size is sampled:

* ``current``: the resident pages of ``/proc/self/statm`` times the page size;
* ``peak``: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (KB on Linux).

Both are sampled twice: before the Runtime is opened (after the imports and the
app are built) and while all N runs are parked. The difference, divided by N, is
the memory one parked run costs: its RunActor and task, its conversation so far,
its lease and the store's share, plus the run id the benchmark keeps. Then the
event is set, every run finishes (one ``rt.wait`` per run, 100 at a time in a
task group), and the time from the release until the last wait returned is
reported, with the time it took to get all N parked.

Leases (``--lease-seconds``, the Runtime's default unless given): the runs stay
parked ``--hold-seconds`` more (two lease periods unless given) before the
release, while the LeaseKeeper renews every lease of a call in flight every
lease / 3. The table says what the keeper did meanwhile: renewals answered,
renewals failed, calls it cut off, leases it found lost, and leases the reaper
reaped. A lease that held has none of the last three; ``done`` then counts every
run completed after the release. Beside them, the garbage collector's full
collections while the runs were held and its longest pause then (``gc.callbacks``):
a full collection walks every object the parked runs hold, and the event loop, the
keeper's renewals with it, waits until it is done.

``--kind approval`` measures runs waiting for a person instead: the tool
requires approval, so each run parks in ``waiting_for_approval``, holding no
worker and no lease (``concurrency`` stays at most 1,000), and the RSS is
sampled once the store counts all N waiting. They are left waiting: the
figure is the memory a waiting run costs the process.

Each size is measured in a subprocess of its own (this script, with
``--child N``), so that one measurement's peak cannot hide in the next one's
baseline. By default N=10,000, and N=1,000 first for scale; ``--quick`` measures
N=1,000 only. The target the figures are compared with: under 50 KB per parked
run at 10,000 runs.

If not every run gets parked within ``--park-timeout`` seconds, the script
says how far it got (runs parked, runs the Supervisor holds, runs by state in
the store) instead of a figure per run.

Results are printed and written as JSON to ``bench/results/memory-<UTC
timestamp>.json`` (copied to ``memory-latest.json``). A benchmark, not a test:
it asserts nothing.

    .venv/bin/python bench/memory.py                  # N = 1,000 and 10,000
    .venv/bin/python bench/memory.py --quick          # N = 1,000
    .venv/bin/python bench/memory.py --runs 20000 --scale 0
    .venv/bin/python bench/memory.py --store postgresql://postgres@127.0.0.1/postgres \\
        --runs 10000 --scale 0 --lease-seconds 5
    .venv/bin/python bench/memory.py --runs 100000 --scale 0 --park-timeout 900
    .venv/bin/python bench/memory.py --runs 100000 --scale 0 --kind approval
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from collector_pauses import CollectorPauses
from pg_support import admin, exit_unless_answering, fresh_database
from steps import RESULTS_DIR, environment, saved, write_results

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    tool,
)
from leaseward.app import LEASE_SECONDS

AGENT = "parker"
APPROVAL_CONCURRENCY = 1_000
WAITERS = 100
RUNS = 10_000
SCALE_RUNS = 1_000
QUICK_RUNS = 1_000
TARGET_KB_PER_RUN = 50.0
TOOL_TIMEOUT_SECONDS = 3600.0
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class Parking:
    """Where the ``park`` tool counts its callers and waits for the release."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        # Runs, not calls: a run whose call was cut off calls again when it is retried.
        self.runs: set[str] = set()
        self.all_parked = anyio.Event()
        self.release = anyio.Event()

    @property
    def parked(self) -> int:
        return len(self.runs)

    async def park(self, run_id: str) -> None:
        self.runs.add(run_id)
        if self.parked >= self.expected:
            self.all_parked.set()
        await self.release.wait()


def make_app(parking: Parking, *, approval: bool = False) -> App:
    @tool(timeout_seconds=TOOL_TIMEOUT_SECONDS, requires_approval=approval)
    async def park(ctx: ToolContext) -> str:
        """A read-only tool that waits until the benchmark releases it."""
        await parking.park(ctx.run_id)
        return "released"

    def reply(request: ProviderRequest) -> ProviderReply:
        if not any(message.role is Role.ASSISTANT for message in request.messages):
            return ProviderReply(tool_calls=(ToolCall(park.name, {}, "park-0"),))
        return ProviderReply(text="done")

    return App(agents=[Agent(AGENT, ScriptedProvider(reply), tools=[park], max_steps=2)])


def current_rss_kb() -> float:
    """Resident set size now, from /proc/self/statm (pages) in KB."""
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * PAGE_SIZE / 1024


def peak_rss_kb() -> float:
    """The process's peak resident set size so far; ru_maxrss is in KB on Linux."""
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def rss() -> dict[str, float]:
    return {"current_kb": current_rss_kb(), "peak_kb": peak_rss_kb()}


async def store_states(rt: Runtime, runs: int) -> dict[str, int]:
    """How many runs the store has in each state (read back, for a report)."""
    found = await rt.runs(limit=runs + 100)
    return dict(Counter(info.state.value for info in found))


@asynccontextmanager
async def store_url(store: str | None, db: Path) -> AsyncIterator[str]:
    if store is None:
        yield f"sqlite:///{db.resolve()}?synchronous=full"
    else:
        async with fresh_database(store, "memory") as url:
            yield url


def lease_figures(rt: Runtime) -> dict[str, int]:
    keeper = rt.supervisor.keeper.stats
    return {
        "renewals": keeper.renewals,
        "renewal_batches": keeper.renewal_batches,
        "renewals_failed": keeper.renewals_failed,
        "cut_off": keeper.guard_cancels,
        "lost": keeper.leases_lost,
        "reaped": int(rt.supervisor.metrics.leases_reaped._value.get()),
    }


def longest_renewal(rt: Runtime) -> float:
    return round(rt.supervisor.keeper.stats.longest_renewal_seconds, 3)


def since(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in after}


async def until_waiting(rt: Runtime, runs: int, timeout: float) -> int:
    """Wait until the store counts ``runs`` runs waiting for approval; returns the count."""
    waiting = 0
    with anyio.move_on_after(timeout):
        while waiting < runs:
            await anyio.sleep(0.5)
            waiting = (await rt.run_counts()).get(RunState.WAITING_FOR_APPROVAL, 0)
    return waiting


async def measure(
    runs: int,
    chunk: int,
    db: Path,
    park_timeout: float,
    *,
    store: str | None = None,
    lease_seconds: float = LEASE_SECONDS,
    hold_seconds: float | None = None,
    kind: str = "call",
) -> dict[str, Any]:
    approval = kind == "approval"
    parking = Parking(runs)
    app = make_app(parking, approval=approval)
    hold = 2 * lease_seconds if hold_seconds is None else hold_seconds
    result: dict[str, Any] = {
        "runs": runs,
        "chunk": chunk,
        "kind": kind,
        "store": "sqlite" if store is None else "postgresql",
        "lease_seconds": lease_seconds,
        "hold_seconds": 0.0 if approval else hold,
    }
    concurrency = min(runs, APPROVAL_CONCURRENCY) if approval else runs

    async with store_url(store, db) as url:
        before = rss()
        result["rss_before"] = before
        opened = time.perf_counter()
        async with Runtime.open(
            url,
            app,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            reap_interval_seconds=min(2.0, lease_seconds / 2),
            poll_interval_seconds=0.05,
        ) as rt:
            result["open_seconds"] = time.perf_counter() - opened
            started = time.perf_counter()
            run_ids: list[str] = []
            for offset in range(0, runs, chunk):
                inputs = [{"n": n} for n in range(offset, min(runs, offset + chunk))]
                run_ids.extend(await rt.submit_many(AGENT, inputs))
            result["submit_seconds"] = time.perf_counter() - started
            if store is not None:
                # What autovacuum does after a bulk insert (the CI server runs without
                # it): a fresh database's statistics know no runs, and the claims would
                # be planned as sorts of every queued run.
                await admin(url, "ANALYZE runs")
            if approval:
                result["parked"] = await until_waiting(rt, runs, park_timeout)
            else:
                with anyio.move_on_after(park_timeout):
                    await parking.all_parked.wait()
                result["parked"] = parking.parked
            result["park_seconds"] = time.perf_counter() - started
            result["active_runs"] = rt.supervisor.active_runs
            if result["parked"] < runs:
                # Not all of them got in: say how far it got instead of a figure per run.
                result["rss_parked"] = rss()
                result["store_states"] = await store_states(rt, runs)
                result["all_parked"] = False
                result["leases"] = lease_figures(rt)
                result["longest_renewal_seconds"] = longest_renewal(rt)
                parking.release.set()
                return result
            result["all_parked"] = True
            parked = rss()
            result["rss_parked"] = parked
            result["kb_per_run_current"] = (parked["current_kb"] - before["current_kb"]) / runs
            result["kb_per_run_peak"] = (parked["peak_kb"] - before["peak_kb"]) / runs
            if approval:
                result["leases"] = lease_figures(rt)
                result["completed"] = 0
                return result

            # Parked, the calls' leases live on the keeper's renewals alone.
            at_park = lease_figures(rt)
            with CollectorPauses() as pauses:
                await anyio.sleep(hold)
            result["gc_while_held"] = pauses.figures()
            result["leases"] = since(lease_figures(rt), at_park)
            result["longest_renewal_seconds"] = longest_renewal(rt)
            result["rss_held"] = rss()

            infos: list[Any] = []
            # Each wait reads its run from the store: N reads at once would queue for
            # the store's few connections longer than a connection may be waited for.
            readers = anyio.CapacityLimiter(WAITERS)

            async def wait(run_id: str) -> None:
                async with readers:
                    infos.append(await rt.wait(run_id, timeout=park_timeout))

            released = time.perf_counter()
            parking.release.set()
            async with anyio.create_task_group() as waits:
                for run_id in run_ids:
                    waits.start_soon(wait, run_id)
            result["release_seconds"] = time.perf_counter() - released
            result["completed"] = sum(1 for info in infos if info.state is RunState.COMPLETED)
            result["leases_total"] = lease_figures(rt)
            stats = rt.supervisor.persister.stats
            result["persister"] = {
                "items": stats.items,
                "batches": stats.batches,
                "largest_batch": stats.largest_batch,
                "commit_seconds": round(stats.commit_seconds, 6),
            }
        result["rss_after"] = rss()
    return result


def child(args: argparse.Namespace) -> None:
    """One measurement in this process; prints one JSON line."""
    with tempfile.TemporaryDirectory(prefix="leaseward-memory-") as tmp:
        result = anyio.run(
            lambda: measure(
                args.child,
                args.chunk,
                Path(tmp) / "runs.db",
                args.park_timeout,
                store=args.store,
                lease_seconds=args.lease_seconds,
                hold_seconds=args.hold_seconds,
                kind=args.kind,
            )
        )
    result["fd_limit"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    print(json.dumps(result))


def run_child(args: argparse.Namespace, runs: int) -> dict[str, Any]:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(runs),
        "--chunk",
        str(args.chunk),
        "--park-timeout",
        str(args.park_timeout),
        "--lease-seconds",
        str(args.lease_seconds),
        "--kind",
        args.kind,
        *(() if args.store is None else ("--store", args.store)),
        *(() if args.hold_seconds is None else ("--hold-seconds", str(args.hold_seconds))),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0 or not done.stdout.strip():
        return {
            "runs": runs,
            "failed": True,
            "returncode": done.returncode,
            "stderr": done.stderr[-4000:],
            "process_seconds": seconds,
        }
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_seconds"] = seconds
    if done.stderr.strip():
        result["stderr"] = done.stderr[-4000:]
    return result


def mb(kb: float) -> str:
    return f"{kb / 1024:.1f}"


def print_table(results: Sequence[dict[str, Any]]) -> None:
    header = (
        f"{'N':>6} {'kind':>8} {'parked':>6} {'before MB':>9} {'parked MB':>9} {'diff MB':>8} "
        f"{'KB/run':>7} {'peak KB/run':>11} {'to park s':>9} {'release s':>9} {'done':>6}  "
        f"{'lease s':>7} {'held s':>6} {'renewed':>8} {'failed':>6} {'cut off':>7} "
        f"{'lost':>5} {'reaped':>6} {'renew s':>7} {'full GCs':>8} {'GC s':>5}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        if r.get("failed"):
            print(f"{r['runs']:>6} FAILED (exit {r['returncode']}): see stderr below")
            continue
        before, parked = r["rss_before"], r["rss_parked"]
        leases = r["leases"]
        lease_cells = (
            f"{r['lease_seconds']:>7g} {r['hold_seconds']:>6g} {leases['renewals']:>8} "
            f"{leases['renewals_failed']:>6} {leases['cut_off']:>7} {leases['lost']:>5} "
            f"{leases['reaped']:>6} {r.get('longest_renewal_seconds', 0.0):>7.3f}"
        )
        held_gc = r.get("gc_while_held")
        if held_gc is not None:
            lease_cells += f" {held_gc['full_collections']:>8} {held_gc['longest_seconds']:>5.2f}"
        if not r["all_parked"]:
            print(
                f"{r['runs']:>6} {r['kind']:>8} {r['parked']:>6} {mb(before['current_kb']):>9} "
                f"{mb(parked['current_kb']):>9}   NOT ALL PARKED within the timeout: "
                f"Supervisor holds {r['active_runs']}, store {r['store_states']}; {lease_cells}"
            )
            continue
        diff = parked["current_kb"] - before["current_kb"]
        release = r.get("release_seconds")
        print(
            f"{r['runs']:>6} {r['kind']:>8} {r['parked']:>6} {mb(before['current_kb']):>9} "
            f"{mb(parked['current_kb']):>9} {mb(diff):>8} {r['kb_per_run_current']:>7.1f} "
            f"{r['kb_per_run_peak']:>11.1f} {r['park_seconds']:>9.2f} "
            f"{'-' if release is None else f'{release:.2f}':>9} {r['completed']:>6}  "
            f"{lease_cells}"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Memory (RSS) per concurrent run parked in a long tool call, and the "
        "time to release and finish them all; SQLite, one process per size; results as JSON."
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=RUNS,
        metavar="N",
        help="runs parked at once, with concurrency=N (default: %(default)s)",
    )
    parser.add_argument(
        "--scale",
        type=int,
        default=SCALE_RUNS,
        metavar="N",
        help="also measure this many runs first, for scale; 0 skips it (default: %(default)s)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"measure {QUICK_RUNS} runs only (--runs {QUICK_RUNS} --scale 0)",
    )
    parser.add_argument(
        "--chunk",
        type=int,
        default=1000,
        help="runs per rt.submit_many call (default: %(default)s)",
    )
    parser.add_argument(
        "--park-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for all runs to be parked, and for each to finish "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="where memory-<UTC timestamp>.json and memory-latest.json go (default: bench/results)",
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="postgresql://...",
        help="a PostgreSQL server to measure on, in a fresh database (default: a SQLite file)",
    )
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=LEASE_SECONDS,
        help="the Runtime's lease_seconds (default: %(default)s, its default)",
    )
    parser.add_argument(
        "--hold-seconds",
        type=float,
        default=None,
        help="how long the runs stay parked before the release (default: 2 leases)",
    )
    parser.add_argument(
        "--kind",
        choices=("call", "approval"),
        default="call",
        help="runs parked inside a call, or waiting for approval (default: %(default)s)",
    )
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.chunk < 1 or args.park_timeout <= 0 or args.lease_seconds <= 0:
        raise SystemExit("--chunk must be >= 1, --park-timeout and --lease-seconds > 0")
    if args.hold_seconds is not None and args.hold_seconds < 0:
        raise SystemExit("--hold-seconds must be >= 0")
    if args.child is not None:
        child(args)
        return
    if args.quick:
        args.runs, args.scale = QUICK_RUNS, 0
    if args.runs < 1 or args.scale < 0:
        raise SystemExit("--runs must be >= 1 and --scale >= 0")
    if args.store is not None:
        exit_unless_answering(args.store)
    sizes = [args.scale, args.runs] if args.scale and args.scale != args.runs else [args.runs]

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    started = time.perf_counter()
    results = []
    for runs in sizes:
        print(f"measuring N={runs} ...", file=sys.stderr, flush=True)
        results.append(run_child(args, runs))
    total = time.perf_counter() - started

    where = "SQLite WAL synchronous=full" if args.store is None else "PostgreSQL"
    what = (
        "waiting for approval (concurrency <= 1000)"
        if args.kind == "approval"
        else "inside a read-only tool at once (concurrency=N)"
    )
    print(f"leaseward memory per parked run: N runs {what}, {where}, one process per N")
    print()
    print_table(results)
    print()
    print(
        "before = RSS after the imports, before Runtime.open; parked = RSS with all N runs "
        "inside the tool;\ndiff and KB/run from the current RSS (/proc/self/statm); peak = "
        "ru_maxrss; to park s = from the first\nsubmit until all N were inside the tool; "
        "release s = from the release until every rt.wait returned (100 at a time);\n"
        "done = runs completed; while parked for held s: renewed = lease renewals answered, "
        "failed = renewals\nnot stored, cut off = calls the keeper cancelled, lost = leases "
        "it found taken, reaped = leases the reaper\nsettled (a lease that held: the last "
        "three 0); renew s = the longest a renewal took to be answered;\n"
        "full GCs = the garbage collector's full collections while held, GC s = its "
        "longest pause then.\n"
        f"Target: under {TARGET_KB_PER_RUN:g} KB per parked run at "
        f"{RUNS:,} runs."
    )
    for r in results:
        if r.get("stderr"):
            print(f"\nstderr of N={r['runs']}:\n{r['stderr']}")
    print(f"total {total:.1f} s")

    document = {
        "benchmark": "memory",
        "started_utc": stamp,
        "command": [Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)],
        "settings": {
            "sizes": sizes,
            "chunk": args.chunk,
            "park_timeout_seconds": args.park_timeout,
            "tool_timeout_seconds": TOOL_TIMEOUT_SECONDS,
            "store": "sqlite" if args.store is None else "postgresql",
            "lease_seconds": args.lease_seconds,
            "hold_seconds": args.hold_seconds,
            "kind": args.kind,
            "target_kb_per_run": TARGET_KB_PER_RUN,
        },
        "environment": environment(),
        "total_seconds": round(total, 3),
        "measurements": results,
    }
    path = write_results(args.results_dir, "memory", document, latest=not args.quick)
    print(saved(path, latest=not args.quick))
    failed = [str(r["runs"]) for r in results if r.get("failed")]
    if failed:
        # make bench-peers reads this exit status to tell a measurement from a failure.
        raise SystemExit(f"FAILED: the measurement of N={', '.join(failed)} (its stderr above)")


if __name__ == "__main__":
    main()
