"""Leases, renewal and reaping with real worker processes: how fast a dead worker's runs
run again, and whether a live worker's runs are ever taken from it.

Every worker is a subprocess of this script (``--worker``) embedding a ``Runtime`` with
one agent: its provider asks for one call of the tool ``call`` (an ``IDEMPOTENT_WRITE``,
so a reaped call is run again with the same key), the tool sleeps for the seconds the
run's input says, and the provider answers. Workers write their own wall-clock
timestamps (``time.time()``) as JSON lines, one file per process, unbuffered, so a line
written before a SIGKILL is read afterwards:

* ``start`` / ``end``: the tool began / ended a call (``end`` says ``done`` or
  ``cancelled``), with the run, the call and the epoch it ran under;
* ``claim``: the worker's Supervisor got a run from a claim (logged when the claim's
  commit returned);
* ``reap``: the worker's reaper settled an expired lease (stamped when the reap's
  write was sent, logged once it applied: its commit returns after it lands, which may
  be after a survivor has claimed the run), with the epoch reaped and the state it
  moved the run to.

The parent records when it sent each SIGKILL (``time.time()`` right after ``os.kill``
returned; the victim runs no instruction after that) and reads the victims' lease
expiries from the store right after. All processes share one machine and one clock.

**Detection and recovery** (``detection``). A victim worker claims K runs, each inside
a call of ``CALL_SECONDS`` (60 s, longer than any lease measured; the tool's timeout
is 120 s). Once all K calls have started, one survivor (SQLite) or two (PostgreSQL,
three workers in all) open on the same store; after a random pause of up to a third of
the lease (so the kill falls anywhere between two renewals) the victim is SIGKILLed.
Per run:

* ``lease left``: the victim's lease expiry in the store minus the kill time;
* ``reaped``: kill to a survivor's reaper settling the run (its ``reap`` line);
* ``claimed``: kill to a survivor claiming it at a higher epoch;
* ``rerun``: kill to the tool starting the call again in a survivor: the run is
  running again. This is the figure the bound is for.

Each cell (lease_seconds, reap_interval_seconds, K) prints p50, p99 (nearest rank) and
max of ``reaped`` and ``rerun`` beside the bound lease_seconds + reap_interval_seconds,
and counts the runs whose rerun came later than the bound and later than the bound +
0.5 s (the target is a p99 within the bound + 0.5 s). ``--grid cross`` (the default)
measures every lease with every reap interval at the middle K and every lease with
every K at the middle reap interval; ``--grid full`` every combination. Except with
``--quick``, the Runtime's own default lease and reap interval are measured too, at the
middle K.

**Live workers are never reaped** (``live``, SQLite). A live worker claims runs whose
calls last 0.5, 1, 5 and 20 times lease_seconds; then a second worker (the watcher)
opens on the same store, so a run reaped from the first would run again there. The
same is measured under leaseward's renewal and under step-boundary renewal, where the
lease is renewed only when a step is recorded (a benchmark-only policy: the bench
worker replaces the lease keeper's per-call guard with a no-op before it opens). Two
more scenarios put calls of 5 x lease_seconds in flight and then either SIGSTOP the
live worker (``paused``) or hold SQLite's write lock from the parent (``BEGIN
IMMEDIATE``, ``blocked``) for lease_seconds + reap_interval_seconds + 1 s. Counted:

* ``live reaps``: leases reaped (every worker here is alive, if paused);
* ``double``: calls with two executions overlapping in time (a second start before
  the first ended), and ``done twice``: calls whose tool ran to the end twice;
* ``guard cancels``: calls the lease keeper cancelled because the lease could not be
  renewed; ``renewal commits``: the keeper's grouped renewal statements, and the lease
  renewals the runs' own step records carried (the metrics counter less the keeper's).

The wait ends once every call has ended and every run is finished or waits out a retry
backoff, or after the longest call and two more rounds of reaping.

**Many workers on PostgreSQL** (``many_workers``). Four worker processes on one fresh
database, a steady stream of short runs (a 1 s call each) submitted at ``--rate``,
and every ``--kill-every`` seconds one worker SIGKILLed and a new one started in its
place. Reported: runs finished per second, submit-to-finish latency (the store's
created_at and finished_at), detection (kill to each run the victim held, read from the
store right after the kill, being claimed by another worker), and double claims: a
(run, epoch) claimed twice, or two executions of one call overlapping in time (an
execution of a killed worker ends at its kill). Both must be 0.

On PostgreSQL every process uses a pool of ``PG_POOL_SIZE`` connections: the server is
shared, and the runs mostly wait in their calls.

Results go to ``bench/results/leases-<UTC timestamp>.json`` (copied to
``leases-latest.json``) with the git revision and the machine, and the plots to
``leases-detection.png``, ``leases-live.png`` and ``leases-many-workers.png``; a
``--quick`` run's only under its timestamp. This is a
benchmark, not a test: it asserts nothing about time.

    .venv/bin/python bench/leases.py                 # the defaults; about 12 minutes
    .venv/bin/python bench/leases.py --quick         # SQLite only unless --pg-url; < 2 min
    .venv/bin/python bench/leases.py --grid full --leases 2,5,15,30
    .venv/bin/python bench/leases.py --parts live --live-lease 5 --ratios 0.5,1,5,20
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import attrs
import lease_costs
from anyio.streams.buffered import BufferedByteReceiveStream
from steps import (
    RESULTS_DIR,
    describe,
    environment,
    percentile,
    saved,
    shown,
    without_password,
    write_results,
)

from leaseward import (
    Agent,
    App,
    Client,
    ProviderReply,
    ProviderRequest,
    Role,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.actors.persister import Persister
from leaseward.app import LEASE_SECONDS, REAP_INTERVAL_SECONDS
from leaseward.runtime.errors import LeasewardError
from leaseward.runtime.listing import RunListing
from leaseward.runtime.runs import RunRecord
from leaseward.storage import open_store
from leaseward.storage.protocol import ClaimRequest, Reap

AGENT = "leased"
TOOL = "call"
CALL_ID = "call-1"
CALL_SECONDS = 60.0
"""How long a victim's calls last in the detection part: longer than every lease measured."""
DETECTION_TOOL_TIMEOUT_SECONDS = 120.0
TARGET_SLACK_SECONDS = 0.5
"""The target: a p99 of kill-to-rerun within lease_seconds + reap_interval_seconds + this."""
SHORT_CALL_SECONDS = 1.0
"""The calls of the many-workers part: at 40 runs/s, each worker holds several at a kill."""
STOP_DRAIN_SECONDS = 1.0
WORKER_OPEN_TIMEOUT_SECONDS = 60.0
WORKER_STOP_TIMEOUT_SECONDS = 20.0
POLL_SECONDS = 0.05
PG_POOL_SIZE = 6
"""Connections per process on PostgreSQL: the server is shared, and runs mostly wait."""
LEASEWARD = "leaseward"
STEP_BOUNDARY = "step-boundary"
POLICIES = (LEASEWARD, STEP_BOUNDARY)
CALLS, PAUSED, BLOCKED = "calls", "paused", "blocked"
DISRUPTION_RATIO = 5.0
"""Calls in the paused and blocked scenarios last this many leases: they outlast both."""
PARTS = ("detection", "live", "many-workers", "history", "fleet")
DEFAULT_PG_URL = os.environ.get(
    "LEASEWARD_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)

# -- the worker process ---------------------------------------------------------------------


@attrs.frozen
class WorkerConfig:
    url: str
    worker_id: str
    events_dir: str
    lease_seconds: float
    reap_interval_seconds: float
    concurrency: int
    tool_timeout_seconds: float
    policy: str = LEASEWARD
    hold: bool = False
    """Import and wait for a line on stdin before opening the Runtime."""


class EventLog:
    """JSON lines, one ``os.write`` each, unbuffered: what is written survives a SIGKILL."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._pid = os.getpid()

    def write(self, kind: str, /, **fields: Any) -> None:
        self.write_at(kind, time.time(), **fields)

    def write_at(self, kind: str, at: float, /, **fields: Any) -> None:
        line = json.dumps({"e": kind, "pid": self._pid, "t": at, **fields})
        os.write(self._fd, (line + "\n").encode())


def read_events(directory: Path) -> list[dict[str, Any]]:
    """Every complete line every worker wrote so far, in the order of their timestamps."""
    events: list[dict[str, Any]] = []
    for path in directory.glob("*.jsonl"):
        text = path.read_text(encoding="utf-8")
        events.extend(
            json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")
        )
    events.sort(key=lambda event: event["t"])
    return events


def worker_app(config: WorkerConfig, events: EventLog) -> App:
    @tool(
        name=TOOL, effect=ToolEffect.IDEMPOTENT_WRITE, timeout_seconds=config.tool_timeout_seconds
    )
    async def call(ctx: ToolContext, seconds: float) -> str:
        """Sleeps for ``seconds``: a provider or an API call that takes that long."""
        fields = {"run": ctx.run_id, "call": ctx.call_id, "epoch": ctx.epoch}
        events.write("start", **fields)
        status = "cancelled"
        try:
            await anyio.sleep(seconds)
            status = "done"
        finally:
            events.write("end", status=status, **fields)
        return "ok"

    def reply(request: ProviderRequest) -> ProviderReply:
        if any(message.role is Role.ASSISTANT for message in request.messages):
            return ProviderReply(text="done")
        run_input = json.loads(
            str(next(m for m in request.messages if m.role is Role.USER).content)
        )
        return ProviderReply(
            tool_calls=(ToolCall(TOOL, {"seconds": run_input["seconds"]}, CALL_ID),)
        )

    return App([Agent(AGENT, ScriptedProvider(reply), tools=[call], max_steps=2)])


def log_claims_and_reaps(events: EventLog) -> None:
    """Wrap the Persister's claim and reap writes, for every instance, before any is
    made: the reaper's first pass runs as the Runtime opens.

    A reap is stamped as its write is sent, and logged once it has applied. The commit
    lies between the two, and a survivor may claim the run the moment it lands, so the
    time the reaper hears back can come after the claim's (by the width of a batch, or
    of another process's turn): the send keeps reaped before claimed, always."""
    claim, reap = Persister.claim, Persister.reap

    async def logged_claim(self: Persister, request: ClaimRequest) -> tuple[RunRecord, ...]:
        records = await claim(self, request)
        for record in records:
            events.write("claim", run=record.id, epoch=record.epoch)
        return records

    async def logged_reap(
        self: Persister, reaps: Sequence[Reap]
    ) -> tuple[bool | LeasewardError, ...]:
        sent_at = time.time()
        results = await reap(self, reaps)
        for sent, applied in zip(reaps, results, strict=True):
            if applied is True:
                run = sent.expired.run
                events.write_at(
                    "reap", sent_at, run=run.id, epoch=run.epoch, state=sent.settlement.target.value
                )
        return results

    Persister.claim = logged_claim  # type: ignore[method-assign]
    Persister.reap = logged_reap  # type: ignore[method-assign]


def renew_at_step_boundaries_only() -> None:
    """The comparison policy: the lease keeper is handed no lease, neither a call's nor
    a commit's, so no lease is renewed but by the run's own step records, and no call
    is cancelled for want of one. Every way a lease reaches the keeper is replaced:
    a run's actor hands its calls' leases over with ``hold``, not ``guarding``."""
    from leaseward.actors.lease_keeper import LeaseKeeper

    def unguarded(self: LeaseKeeper, *args: Any, **kwargs: Any) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def not_held(self: LeaseKeeper, *args: Any, **kwargs: Any) -> None:
        return None

    LeaseKeeper.guarding = unguarded  # type: ignore[method-assign,assignment]
    LeaseKeeper.hold = not_held  # type: ignore[method-assign]
    LeaseKeeper.hold_commit = not_held  # type: ignore[method-assign]


def counter(rt: Runtime, name: str) -> int:
    value = rt.supervisor.metrics.registry.get_sample_value(f"{name}_total")
    return int(value or 0)


def worker_stats(rt: Runtime) -> dict[str, Any]:
    persister = rt.supervisor.persister.stats
    keeper = rt.supervisor.keeper.stats
    return {
        "worker_id": rt.worker_id,
        "pid": os.getpid(),
        "transactions": persister.batches,
        "persist_requests": persister.items,
        # The metric counts the keeper's renewals and those that rode on step records.
        "step_renewals": counter(rt, "leaseward_leases_renewed") - keeper.renewals,
        "reaps": counter(rt, "leaseward_leases_reaped"),
        "keeper": {
            "renewal_batches": keeper.renewal_batches,
            "renewals": keeper.renewals,
            "renewals_failed": keeper.renewals_failed,
            "guard_cancels": keeper.guard_cancels,
        },
    }


async def read_line() -> str:
    return await anyio.to_thread.run_sync(sys.stdin.readline)


async def worker_main(config: WorkerConfig) -> None:
    events = EventLog(Path(config.events_dir) / f"{config.worker_id}.jsonl")
    if config.policy == STEP_BOUNDARY:
        renew_at_step_boundaries_only()
    log_claims_and_reaps(events)
    app = worker_app(config, events)
    if config.hold:
        await read_line()
    async with Runtime.open(
        config.url,
        app,
        concurrency=config.concurrency,
        lease_seconds=config.lease_seconds,
        reap_interval_seconds=config.reap_interval_seconds,
        worker_id=config.worker_id,
        drain_seconds=STOP_DRAIN_SECONDS,
    ) as rt:
        print("open", flush=True)
        # Until the parent says stop, or goes away.
        await read_line()
        # The calls still in flight are the benchmark's own minute-long writes: waiting
        # for them, as a graceful stop does, would only stretch every cell by a minute.
        rt.stop_now()
    print(json.dumps(worker_stats(rt)), flush=True)


# -- workers seen from the parent -------------------------------------------------------------


class Worker:
    """A worker subprocess: open it, kill it, pause it, or stop it and read its counters."""

    def __init__(self, config: WorkerConfig, process: anyio.abc.Process, log: Path) -> None:
        self.config = config
        self.process = process
        self.log = log
        assert process.stdout is not None and process.stdin is not None
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self.killed_at: float | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def spawn(cls, config: WorkerConfig, log_dir: Path) -> Worker:
        log_path = log_dir / f"{config.worker_id}.log"
        with log_path.open("ab") as log:
            process = await anyio.open_process(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--worker",
                    json.dumps(attrs.asdict(config)),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        return cls(config, process, log_path)

    async def _line(self, timeout: float) -> str:
        try:
            with anyio.fail_after(timeout):
                return (await self._stdout.receive_until(b"\n", 1 << 20)).decode()
        except (TimeoutError, anyio.IncompleteRead, anyio.EndOfStream) as exc:
            tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(
                f"worker {self.config.worker_id} did not answer ({type(exc).__name__}); "
                f"its log ends: {' | '.join(tail) or '(empty)'}"
            ) from exc

    async def opened(self) -> None:
        """Let a held worker open its Runtime, and return once it has."""
        if self.config.hold:
            assert self.process.stdin is not None
            await self.process.stdin.send(b"open\n")
        line = await self._line(WORKER_OPEN_TIMEOUT_SECONDS)
        if line != "open":
            raise RuntimeError(f"worker {self.config.worker_id} said {line!r} instead of opening")

    async def kill(self) -> float:
        """SIGKILL; returns the wall-clock time it was sent."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.killed_at = time.time()
        await self.process.wait()
        return self.killed_at

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    async def stop(self) -> dict[str, Any]:
        """Drain and close; returns the worker's counters."""
        assert self.process.stdin is not None
        try:
            await self.process.stdin.send(b"stop\n")
            stats: dict[str, Any] = json.loads(await self._line(WORKER_STOP_TIMEOUT_SECONDS))
            with anyio.fail_after(WORKER_STOP_TIMEOUT_SECONDS):
                await self.process.wait()
            return stats
        finally:
            if self.process.returncode is None:
                await self.kill()
            await self.process.aclose()


async def stop_all(workers: Sequence[Worker]) -> list[dict[str, Any]]:
    """Stop the workers at once, each draining on its own; their counters, in order."""
    stats: list[dict[str, Any]] = [{} for _ in workers]

    async def stop(index: int) -> None:
        stats[index] = await workers[index].stop()

    async with anyio.create_task_group() as tasks:
        for index in range(len(workers)):
            tasks.start_soon(stop, index)
    return stats


@asynccontextmanager
async def workers_in(log_dir: Path) -> AsyncIterator[list[Worker]]:
    """Whatever workers a measurement starts, none outlives it."""
    started: list[Worker] = []
    try:
        yield started
    finally:
        with anyio.CancelScope(shield=True):
            for worker in started:
                if worker.process.returncode is None:
                    await worker.kill()


# -- stores ---------------------------------------------------------------------------------


SQLITE, POSTGRESQL = "sqlite", "postgresql"


@asynccontextmanager
async def fresh_store(
    store: str, directory: Path, pg_url: str | None, label: str
) -> AsyncIterator[str]:
    if store == SQLITE:
        path = directory / "runs.db"
        await (await open_store(f"sqlite:///{path}")).aclose()
        yield f"sqlite:///{path}"
        return
    from pg_support import fresh_database

    assert pg_url is not None
    async with fresh_database(pg_url, label) as url:
        yield f"{url}{'&' if '?' in url else '?'}pool_size={PG_POOL_SIZE}"


async def wait_until(
    condition: Callable[[], Any], deadline: float, poll: float = POLL_SECONDS
) -> bool:
    """Poll ``condition`` (sync or async) until it holds or the wall clock passes ``deadline``."""
    while True:
        result = condition()
        if hasattr(result, "__await__"):
            result = await result
        if result:
            return True
        if time.time() >= deadline:
            return False
        await anyio.sleep(poll)


def started_calls(events: Iterable[dict[str, Any]], pid: int) -> set[str]:
    return {e["run"] for e in events if e["e"] == "start" and e["pid"] == pid}


async def terminal(client: Client, run_ids: Sequence[str]) -> dict[str, RunRecord]:
    records: dict[str, RunRecord] = {}
    for run_id in run_ids:
        record = await client.store.get_run(run_id)
        if record is not None:
            records[run_id] = record
    return records


# -- analysis: pure functions over the workers' lines ----------------------------------------


@attrs.frozen
class Execution:
    run: str
    call: str
    epoch: int
    pid: int
    start: float
    end: float
    status: str
    """``done``, ``cancelled``, ``killed`` (its process was SIGKILLed) or ``open``."""


def executions(events: Sequence[dict[str, Any]], killed_at: dict[int, float]) -> list[Execution]:
    """Every call execution, ended by its ``end`` line, its process's kill, or never."""
    ends = {(e["run"], e["call"], e["epoch"], e["pid"]): e for e in events if e["e"] == "end"}
    found = []
    for e in events:
        if e["e"] != "start":
            continue
        end = ends.get((e["run"], e["call"], e["epoch"], e["pid"]))
        if end is not None:
            stop, status = end["t"], end["status"]
        elif e["pid"] in killed_at:
            stop, status = killed_at[e["pid"]], "killed"
        else:
            stop, status = float("inf"), "open"
        found.append(Execution(e["run"], e["call"], e["epoch"], e["pid"], e["t"], stop, status))
    return found


@attrs.frozen
class Repeats:
    """How often calls ran more than once, and how often at the same time."""

    started_twice: int
    """Calls started more than once (a retry after a reap or a guard cancel)."""
    overlapping: int
    """Calls with a second execution starting before an earlier one ended."""
    overlap_seconds: float
    """The longest such overlap."""
    done_twice: int
    """Calls whose tool ran to the end more than once."""

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "overlap_seconds": round(self.overlap_seconds, 3)}


def repeats(found: Iterable[Execution]) -> Repeats:
    by_call: dict[tuple[str, str], list[Execution]] = defaultdict(list)
    for execution in found:
        by_call[(execution.run, execution.call)].append(execution)
    started_twice = overlapping = done_twice = 0
    longest = 0.0
    for runs in by_call.values():
        runs.sort(key=lambda x: x.start)
        started_twice += len(runs) > 1
        done_twice += sum(1 for x in runs if x.status == "done") > 1
        latest_end = runs[0].end
        overlap = 0.0
        for later in runs[1:]:
            if later.start < latest_end:
                overlap = max(overlap, min(latest_end, later.end) - later.start)
            latest_end = max(latest_end, later.end)
        overlapping += overlap > 0
        longest = max(longest, overlap)
    return Repeats(started_twice, overlapping, longest, done_twice)


def double_claims(events: Iterable[dict[str, Any]]) -> int:
    """(run, epoch) pairs claimed more than once: two holders of one lease."""
    seen: dict[tuple[str, int], int] = defaultdict(int)
    for e in events:
        if e["e"] == "claim":
            seen[(e["run"], e["epoch"])] += 1
    return sum(1 for count in seen.values() if count > 1)


def first_after(
    events: Iterable[dict[str, Any]], kind: str, run: str, epoch: int, *, later: bool, not_pid: int
) -> float | None:
    """The first ``kind`` line of ``run`` at ``epoch`` (or, with ``later``, above it) that
    another process than ``not_pid`` wrote."""
    for e in events:
        if e["e"] != kind or e["run"] != run or e["pid"] == not_pid:
            continue
        if e["epoch"] > epoch if later else e["epoch"] == epoch:
            return float(e["t"])
    return None


def spread(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    return {
        "p50": round(percentile(values, 50), 3),
        "p99": round(percentile(values, 99), 3),
        "max": round(max(values), 3),
    }


# -- part 1: detection and recovery ------------------------------------------------------------


@attrs.frozen
class Cell:
    store: str
    lease_seconds: float
    reap_interval_seconds: float
    runs: int

    @property
    def bound(self) -> float:
        return self.lease_seconds + self.reap_interval_seconds

    @property
    def label(self) -> str:
        return (
            f"{self.store} lease={self.lease_seconds:g} reap={self.reap_interval_seconds:g} "
            f"K={self.runs}"
        )


def median_of(values: Sequence[Any]) -> Any:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def detection_cells(
    store: str,
    leases: Sequence[float],
    reaps: Sequence[float],
    ks: Sequence[int],
    grid: str,
    *,
    runtime_defaults: bool,
) -> list[Cell]:
    """Every lease with every reap interval shorter than it, at the middle K, and with every
    K at the middle reap interval (``cross``), or every combination (``full``); with
    ``runtime_defaults``, the Runtime's own lease and reap interval at the middle K as well."""
    mid_reap, mid_k = median_of(reaps), median_of(ks)
    cells = [
        Cell(store, lease, reap, k)
        for lease in leases
        for reap in reaps
        for k in ks
        # A reap interval not shorter than the lease is refused by the Runtime.
        if reap < lease and (grid == "full" or k == mid_k or reap == mid_reap)
    ]
    own = Cell(store, LEASE_SECONDS, REAP_INTERVAL_SECONDS, mid_k)
    if runtime_defaults and own not in cells:
        cells.append(own)
    return cells


async def measure_detection(
    cell: Cell, work: Path, pg_url: str | None, rng: random.Random
) -> dict[str, Any]:
    survivors = 1 if cell.store == SQLITE else 2
    events_dir = work / "events"
    events_dir.mkdir()
    async with fresh_store(cell.store, work, pg_url, "leases") as url, workers_in(work) as started:

        def config(name: str, hold: bool) -> WorkerConfig:
            return WorkerConfig(
                url=url,
                worker_id=name,
                events_dir=str(events_dir),
                lease_seconds=cell.lease_seconds,
                reap_interval_seconds=cell.reap_interval_seconds,
                concurrency=cell.runs,
                tool_timeout_seconds=DETECTION_TOOL_TIMEOUT_SECONDS,
                hold=hold,
            )

        victim = await Worker.spawn(config("victim", False), work)
        started.append(victim)
        # Survivors import meanwhile, and open only once the victim holds every run.
        for index in range(survivors):
            started.append(await Worker.spawn(config(f"survivor-{index}", True), work))
        await victim.opened()
        async with Client.open(url) as client:
            run_ids = await client.submit_many(AGENT, [{"seconds": CALL_SECONDS}] * cell.runs)
            wanted = set(run_ids)
            if not await wait_until(
                lambda: wanted <= started_calls(read_events(events_dir), victim.pid),
                time.time() + WORKER_OPEN_TIMEOUT_SECONDS,
            ):
                raise RuntimeError(f"the victim did not start all {cell.runs} calls")
            for survivor in started[1:]:
                await survivor.opened()
            await anyio.sleep(rng.uniform(0, cell.lease_seconds / 3))
            held = {run_id: r.epoch for run_id, r in (await terminal(client, run_ids)).items()}
            killed_at = await victim.kill()
            after = await terminal(client, run_ids)
            expiries = [
                r.lease_expires_at for r in after.values() if r.lease_expires_at is not None
            ]
            # However the runtime sets leases, wait for the longest one plus a reaper pass.
            longest = max(expiries, default=killed_at + cell.lease_seconds)
            deadline = longest + cell.reap_interval_seconds + 15.0

            def all_rerun() -> bool:
                events = read_events(events_dir)
                return all(
                    first_after(events, "start", run_id, epoch, later=True, not_pid=victim.pid)
                    for run_id, epoch in held.items()
                )

            await wait_until(all_rerun, deadline)
            stats = await stop_all(started[1:])
            final = await terminal(client, run_ids)
    events = read_events(events_dir)
    per_run: list[dict[str, Any]] = []
    for run_id, epoch in held.items():
        expires = after[run_id].lease_expires_at

        def since_kill(
            kind: str, later: bool, run_id: str = run_id, epoch: int = epoch
        ) -> float | None:
            found = first_after(events, kind, run_id, epoch, later=later, not_pid=victim.pid)
            return None if found is None else round(found - killed_at, 4)

        per_run.append(
            {
                "run": run_id,
                "lease_left": None if expires is None else round(expires - killed_at, 4),
                "reaped": since_kill("reap", False),
                "claimed": since_kill("claim", True),
                "rerun": since_kill("start", True),
            }
        )
    rerun = [r["rerun"] for r in per_run if r["rerun"] is not None]
    return {
        **attrs.asdict(cell),
        "bound_seconds": cell.bound,
        "workers": survivors + 1,
        "lease_left": spread([r["lease_left"] for r in per_run if r["lease_left"] is not None]),
        "reaped": spread([r["reaped"] for r in per_run if r["reaped"] is not None]),
        "claimed": spread([r["claimed"] for r in per_run if r["claimed"] is not None]),
        "rerun": spread(rerun),
        "not_rerun": cell.runs - len(rerun),
        "over_bound": sum(1 for value in rerun if value > cell.bound),
        "over_target": sum(1 for value in rerun if value > cell.bound + TARGET_SLACK_SECONDS),
        "repeats": repeats(executions(events, {victim.pid: killed_at})).to_json(),
        "final_states": count_states(final.values()),
        "survivors": stats,
        "runs_measured": per_run,
    }


def count_states(records: Iterable[RunRecord]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for record in records:
        key = record.state.value
        if record.reason is not None and record.state is not RunState.COMPLETED:
            key += f"/{record.reason.value}"
        counts[key] += 1
    return dict(sorted(counts.items()))


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_detection(cells: Sequence[dict[str, Any]]) -> None:
    header = (
        f"{'store':<10} {'lease':>5} {'reap':>4} {'K':>4} {'bound':>5} "
        f"{'left p50':>8} {'reaped p50':>10} {'p99':>6} {'max':>6} "
        f"{'rerun p50':>9} {'p99':>6} {'max':>6} {'>bound':>6} {'>+0.5':>5} {'missing':>7} "
        f"{'double':>6}"
    )
    print(header)
    print("-" * len(header))
    for c in cells:
        print(
            f"{c['store']:<10} {c['lease_seconds']:>5g} {c['reap_interval_seconds']:>4g} "
            f"{c['runs']:>4} "
            f"{c['bound_seconds']:>5g} {seconds(c['lease_left']['p50']):>8} "
            f"{seconds(c['reaped']['p50']):>10} {seconds(c['reaped']['p99']):>6} "
            f"{seconds(c['reaped']['max']):>6} {seconds(c['rerun']['p50']):>9} "
            f"{seconds(c['rerun']['p99']):>6} {seconds(c['rerun']['max']):>6} "
            f"{c['over_bound']:>6} {c['over_target']:>5} {c['not_rerun']:>7} "
            f"{c['repeats']['overlapping']:>6}"
        )
    print(
        "seconds from the SIGKILL: left = the victim's lease still to run in the store; reaped = "
        "a survivor's reaper settled the run;\nrerun = the call started again in a survivor. "
        "bound = lease + reap interval; >bound, >+0.5 = runs rerun later than the bound, than "
        "the bound + 0.5 s;\nmissing = runs not rerun before the wait gave up; double = calls "
        "whose executions overlapped (must be 0)."
    )


# -- part 2: live workers are never reaped ------------------------------------------------------


@attrs.frozen
class LiveScenario:
    policy: str
    scenario: str
    lease_seconds: float
    reap_interval_seconds: float
    ratios: tuple[float, ...]
    runs_per_ratio: int

    @property
    def disruption_seconds(self) -> float:
        return self.lease_seconds + self.reap_interval_seconds + 1.0

    @property
    def label(self) -> str:
        return f"live {self.policy} {self.scenario} lease={self.lease_seconds:g}"


def hold_write_lock(path: Path, seconds: float) -> tuple[float, float]:
    """Hold SQLite's write lock from a connection of our own, as a stuck writer would;
    returns when it was taken and when it was let go."""
    connection = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        connection.execute("BEGIN IMMEDIATE")
        taken = time.time()
        time.sleep(seconds)
        connection.execute("ROLLBACK")
        return taken, time.time()
    finally:
        connection.close()


async def measure_live(scenario: LiveScenario, work: Path) -> dict[str, Any]:
    lease, reap = scenario.lease_seconds, scenario.reap_interval_seconds
    ratios = scenario.ratios if scenario.scenario == CALLS else (DISRUPTION_RATIO,)
    inputs = [ratio for ratio in ratios for _ in range(scenario.runs_per_ratio)]
    longest_call = max(ratios) * lease
    events_dir = work / "events"
    events_dir.mkdir()
    async with fresh_store(SQLITE, work, None, "live") as url, workers_in(work) as started:

        def config(name: str, hold: bool) -> WorkerConfig:
            return WorkerConfig(
                url=url,
                worker_id=name,
                events_dir=str(events_dir),
                lease_seconds=lease,
                reap_interval_seconds=reap,
                concurrency=len(inputs),
                tool_timeout_seconds=longest_call * 1.5 + 5.0,
                policy=scenario.policy,
                hold=hold,
            )

        live = await Worker.spawn(config("live", False), work)
        watcher = await Worker.spawn(config("watcher", True), work)
        started.extend([live, watcher])
        await live.opened()
        async with Client.open(url) as client:
            run_ids = await client.submit_many(AGENT, [{"seconds": r * lease} for r in inputs])
            ratio_of = dict(zip(run_ids, inputs, strict=True))
            if not await wait_until(
                lambda: set(run_ids) <= started_calls(read_events(events_dir), live.pid),
                time.time() + WORKER_OPEN_TIMEOUT_SECONDS,
            ):
                raise RuntimeError("the live worker did not start every call")
            await watcher.opened()
            began = disrupted = resumed = time.time()
            if scenario.scenario == PAUSED:
                live.signal(signal.SIGSTOP)
                disrupted = time.time()
                await anyio.sleep(scenario.disruption_seconds)
                live.signal(signal.SIGCONT)
                resumed = time.time()
            elif scenario.scenario == BLOCKED:
                disrupted, resumed = await anyio.to_thread.run_sync(
                    hold_write_lock, work / "runs.db", scenario.disruption_seconds
                )

            async def all_finished() -> bool:
                # Every call has ended, and every run is finished or waits out a backoff
                # (under step-boundary renewal a run reaped twice is retried 30 s later):
                # nothing more would happen before the wait below gives up.
                if any(x.status == "open" for x in executions(read_events(events_dir), {})):
                    return False
                records = await terminal(client, run_ids)
                later = time.time() + lease + reap
                return all(
                    r.state.terminal or (r.state is RunState.QUEUED and r.available_at > later)
                    for r in records.values()
                )

            await wait_until(all_finished, began + longest_call + 2 * (lease + reap + 2) + 10, 0.2)
            live_stats, watcher_stats = await stop_all([live, watcher])
            stats = {"live": live_stats, "watcher": watcher_stats}
            final = await terminal(client, run_ids)
    events = read_events(events_dir)
    found = executions(events, {})
    reaps = [e for e in events if e["e"] == "reap"]
    per_ratio = []
    for ratio in ratios:
        runs = {run_id for run_id, r in ratio_of.items() if r == ratio}
        mine = [x for x in found if x.run in runs]
        per_ratio.append(
            {
                "ratio": ratio,
                "call_seconds": ratio * lease,
                "runs": len(runs),
                "live_reaps": sum(1 for e in reaps if e["run"] in runs),
                "cancelled_calls": sum(1 for x in mine if x.status == "cancelled"),
                "repeats": repeats(mine).to_json(),
                "final_states": count_states(final[r] for r in runs if r in final),
            }
        )
    workers = list(stats.values())
    cut_off = [x for x in found if x.pid == live.pid and x.status == "cancelled"]
    return {
        **attrs.asdict(scenario),
        "disruption_seconds": None if scenario.scenario == CALLS else scenario.disruption_seconds,
        # When the live worker's own calls ended cancelled, from the pause or block's
        # start and from its end (negative: cut off before the block was lifted).
        "cancelled_after_start": spread([x.end - disrupted for x in cut_off]),
        "cancelled_after_end": spread([x.end - resumed for x in cut_off]),
        "per_ratio": per_ratio,
        "live_reaps": sum(s["reaps"] for s in workers),
        "guard_cancels": sum(s["keeper"]["guard_cancels"] for s in workers),
        "renewal_batches": sum(s["keeper"]["renewal_batches"] for s in workers),
        "background_renewals": sum(s["keeper"]["renewals"] for s in workers),
        "step_renewals": sum(s["step_renewals"] for s in workers),
        "transactions": sum(s["transactions"] for s in workers),
        "repeats": repeats(found).to_json(),
        "unfinished": sum(1 for r in final.values() if not r.state.terminal),
        "worker_stats": stats,
    }


def print_live(results: Sequence[dict[str, Any]]) -> None:
    header = (
        f"{'policy':<13} {'scenario':<8} {'lease':>5} {'ratio':>5} {'call s':>6} {'runs':>4} "
        f"{'live reaps':>10} {'double':>6} {'done twice':>10} {'rerun':>5} {'cancelled':>9}  "
        "final states"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        for row in r["per_ratio"]:
            states = ", ".join(f"{k} {v}" for k, v in row["final_states"].items())
            print(
                f"{r['policy']:<13} {r['scenario']:<8} {r['lease_seconds']:>5g} {row['ratio']:>5g} "
                f"{row['call_seconds']:>6g} {row['runs']:>4} {row['live_reaps']:>10} "
                f"{row['repeats']['overlapping']:>6} {row['repeats']['done_twice']:>10} "
                f"{row['repeats']['started_twice']:>5} {row['cancelled_calls']:>9}  {states}"
            )
    print()
    header = (
        f"{'policy':<13} {'scenario':<8} {'live reaps':>10} {'double':>6} {'guard cancels':>13} "
        f"{'renewal batches':>15} {'renewals':>8} {'step renewals':>13} {'transactions':>12} "
        f"{'unfinished':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['policy']:<13} {r['scenario']:<8} {r['live_reaps']:>10} "
            f"{r['repeats']['overlapping']:>6} {r['guard_cancels']:>13} {r['renewal_batches']:>15} "
            f"{r['background_renewals']:>8} {r['step_renewals']:>13} {r['transactions']:>12} "
            f"{r['unfinished']:>10}"
        )
    print(
        "ratio = call length / lease_seconds; paused = SIGSTOP, blocked = SQLite's write lock "
        "held, each for lease + reap interval + 1 s.\nlive reaps = leases reaped (no worker died); "
        "double = calls with overlapping executions; done twice = calls run to the end twice;\n"
        "rerun = calls started more than once; cancelled = executions that ended cancelled; "
        "guard cancels = calls the lease keeper cancelled;\nrenewal batches / renewals = the "
        "keeper's grouped renewal statements / leases they renewed; step renewals = renewals "
        "carried by step records;\ntransactions = the workers' Persister transactions; "
        "unfinished = runs not terminal when the wait gave up."
    )
    for r in results:
        start, end = r["cancelled_after_start"], r["cancelled_after_end"]
        if r["scenario"] == CALLS or start["max"] is None:
            continue
        what = "SIGSTOP" if r["scenario"] == PAUSED else "the lock was taken"
        back = "SIGCONT" if r["scenario"] == PAUSED else "it was let go"
        print(
            f"{r['policy']} {r['scenario']} (lease {r['lease_seconds']:g} s): the live worker's "
            f"calls ended cancelled {seconds(start['p50'])} s (max {seconds(start['max'])}) after "
            f"{what}, {seconds(end['p50'])} s (max {seconds(end['max'])}) after {back}"
        )


# -- part 5: many workers on PostgreSQL ---------------------------------------------------------


@attrs.frozen
class ManyWorkers:
    workers: int
    seconds: float
    kill_every_seconds: float
    rate: float
    lease_seconds: float
    reap_interval_seconds: float
    concurrency: int = 16

    @property
    def kills(self) -> int:
        """One every ``kill_every_seconds`` while runs are being submitted."""
        return max(0, math.ceil(self.seconds / self.kill_every_seconds) - 1)


async def measure_many_workers(
    setup: ManyWorkers, work: Path, pg_url: str, tick: Callable[[str], None]
) -> dict[str, Any]:
    events_dir = work / "events"
    events_dir.mkdir()
    kills: list[dict[str, Any]] = []
    killed_at: dict[int, float] = {}
    submitted: list[str] = []
    generation = 0
    async with fresh_store(POSTGRESQL, work, pg_url, "fleet") as url, workers_in(work) as started:

        async def start(slot: int) -> Worker:
            nonlocal generation
            generation += 1
            worker = await Worker.spawn(
                WorkerConfig(
                    url=url,
                    worker_id=f"worker-{slot}-{generation}",
                    events_dir=str(events_dir),
                    lease_seconds=setup.lease_seconds,
                    reap_interval_seconds=setup.reap_interval_seconds,
                    concurrency=setup.concurrency,
                    tool_timeout_seconds=10.0,
                ),
                work,
            )
            started.append(worker)
            return worker

        slots = [await start(slot) for slot in range(setup.workers)]
        for worker in slots:
            await worker.opened()
        async with Client.open(url) as client:
            began = time.time()
            end_at = began + setup.seconds

            async def submit() -> None:
                while (now := time.time()) < end_at:
                    # Owed since the start, so that slow submits do not lower the rate.
                    count = int(setup.rate * (now - began)) - len(submitted)
                    if count > 0:
                        submitted.extend(
                            await client.submit_many(
                                AGENT, [{"seconds": SHORT_CALL_SECONDS}] * count
                            )
                        )
                    await anyio.sleep(0.1)

            async def kill_and_restart() -> None:
                for index in range(setup.kills):
                    # On a fixed schedule: a restart's start-up does not push the next kill.
                    await anyio.sleep(began + (index + 1) * setup.kill_every_seconds - time.time())
                    slot = index % setup.workers
                    victim = slots[slot]
                    at = await victim.kill()
                    killed_at[victim.pid] = at
                    running = await client.store.list_runs(
                        RunListing(state=RunState.RUNNING, limit=10_000)
                    )
                    held = {
                        r.id: r.epoch for r in running if r.lease_owner == victim.config.worker_id
                    }
                    kills.append(
                        {
                            "t": at,
                            "pid": victim.pid,
                            "worker": victim.config.worker_id,
                            "held": held,
                        }
                    )
                    slots[slot] = await start(slot)
                    await slots[slot].opened()
                    tick(f"many workers: killed {victim.config.worker_id}")

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(submit)
                tasks.start_soon(kill_and_restart)

            async def all_finished() -> bool:
                counts = await client.store.count_runs()
                return all(state.terminal or not n for state, n in counts.items())

            running = await client.store.list_runs(RunListing(state=RunState.RUNNING, limit=10_000))
            expiries = [r.lease_expires_at or 0.0 for r in running]
            # Runs a killed worker held come back once their lease ran out and a reaper passed.
            longest = max([time.time(), *expiries])
            await wait_until(all_finished, longest + setup.reap_interval_seconds + 15.0, 0.2)
            finished_at = time.time()
            stats = await stop_all(slots)
            records = list((await terminal(client, submitted)).values())
    events = read_events(events_dir)
    detection = []
    for kill in kills:
        for run_id, epoch in kill["held"].items():
            claimed = first_after(events, "claim", run_id, epoch, later=True, not_pid=kill["pid"])
            detection.append(None if claimed is None else claimed - kill["t"])
    found = executions(events, killed_at)
    done = [r for r in records if r.finished_at is not None]
    latencies = [r.finished_at - r.created_at for r in done if r.finished_at is not None]
    last = max((r.finished_at for r in done if r.finished_at is not None), default=finished_at)
    in_window = sum(1 for r in done if r.finished_at is not None and r.finished_at < end_at)
    measured = [d for d in detection if d is not None]
    return {
        **attrs.asdict(setup),
        "bound_seconds": setup.lease_seconds + setup.reap_interval_seconds,
        "submitted": len(submitted),
        "finished": len(done),
        "final_states": count_states(records),
        "runs_per_second": round(in_window / setup.seconds, 2),
        "last_finished_after_seconds": round(last - began, 3),
        "latency": spread(latencies),
        "kills": len(kills),
        "held_at_kills": len(detection),
        "detection": spread(measured),
        "not_reclaimed": len(detection) - len(measured),
        "double_claims": double_claims(events),
        "repeats": repeats(found).to_json(),
        "timeline": {
            "began": began,
            "kills": [k["t"] - began for k in kills],
            "finished": sorted(
                round(r.finished_at - began, 3) for r in done if r.finished_at is not None
            ),
            "detection": [round(d, 3) for d in measured],
        },
        "worker_stats": stats,
    }


def print_many_workers(r: dict[str, Any]) -> None:
    print(
        f"{r['workers']} workers on PostgreSQL for {r['seconds']:g} s, {r['rate']:g} runs/s "
        "submitted "
        f"(a {SHORT_CALL_SECONDS:g} s call each), lease {r['lease_seconds']:g} s, reap every "
        f"{r['reap_interval_seconds']:g} s; one worker SIGKILLed and replaced every "
        f"{r['kill_every_seconds']:g} s"
    )
    latency, detection = r["latency"], r["detection"]
    print(
        f"  submitted {r['submitted']}, finished {r['finished']} "
        f"({r['runs_per_second']:g} runs/s while submitting; the last "
        f"{r['last_finished_after_seconds']:.1f} s after the first submit); "
        f"final states {r['final_states']}\n"
        f"  submit to finish: p50 {seconds(latency['p50'])} s, p99 {seconds(latency['p99'])} s, "
        f"max {seconds(latency['max'])} s\n"
        f"  {r['kills']} kills holding {r['held_at_kills']} runs; kill to claimed elsewhere: "
        f"p50 {seconds(detection['p50'])} s, p99 {seconds(detection['p99'])} s, max "
        f"{seconds(detection['max'])} s (bound {r['bound_seconds']:g} s); not reclaimed "
        f"{r['not_reclaimed']}\n"
        f"  double claims: {r['double_claims']} (run, epoch) claimed twice, "
        f"{r['repeats']['overlapping']} calls with overlapping executions (both must be 0); "
        f"{r['repeats']['started_twice']} calls started again after a kill"
    )


# -- plots ------------------------------------------------------------------------------------


def plot_all(document: dict[str, Any], results_dir: Path, tag: str = "") -> list[Path]:
    """The plots, named ``leases-<part><tag>.png``: a quick run tags them with its time,
    leaving the committed ones to the full run they show."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots skipped: matplotlib is not installed (pip install '.[bench]')")
        return []
    drawn = []
    if document.get("detection"):
        drawn.append(
            plot_detection(plt, document["detection"], results_dir / f"leases-detection{tag}.png")
        )
    if document.get("live"):
        drawn.append(plot_live(plt, document["live"], results_dir / f"leases-live{tag}.png"))
    if document.get("many_workers"):
        drawn.append(
            plot_many_workers(
                plt, document["many_workers"], results_dir / f"leases-many-workers{tag}.png"
            )
        )
    return drawn


def plot_detection(plt: Any, cells: Sequence[dict[str, Any]], path: Path) -> Path:
    stores = sorted({c["store"] for c in cells}, key=[SQLITE, POSTGRESQL].index)
    leases = sorted({c["lease_seconds"] for c in cells})
    figure, axes = plt.subplots(
        len(stores),
        len(leases),
        figsize=(max(8.0, 4 * len(leases)), 0.6 + 3.2 * len(stores)),
        squeeze=False,
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    reaps = sorted({c["reap_interval_seconds"] for c in cells})
    for row, store in enumerate(stores):
        for column, lease in enumerate(leases):
            ax = axes[row][column]
            drawn = False
            for index, reap in enumerate(reaps):
                values = sorted(
                    r["rerun"]
                    for c in cells
                    if (c["store"], c["lease_seconds"], c["reap_interval_seconds"])
                    == (store, lease, reap)
                    for r in c["runs_measured"]
                    if r["rerun"] is not None
                )
                if not values:
                    continue
                drawn = True
                color = colors[index % len(colors)]
                # From 0 at the first value, so that a single run still draws its step.
                fractions = [0.0] + [(i + 1) / len(values) for i in range(len(values))]
                ax.step(
                    [values[0], *values],
                    fractions,
                    where="post",
                    color=color,
                    label=f"reap {reap:g} s (n={len(values)})",
                )
                ax.axvline(lease + reap, color=color, linestyle=":", linewidth=1)
            if not drawn:
                ax.axis("off")
                continue
            ax.set_title(f"{store}, lease {lease:g} s")
            ax.set_xlabel("kill to call running again (s)")
            ax.set_ylabel("fraction of runs")
            ax.set_ylim(0, 1.02)
            # From the kill: how the time splits between the lease and the reaper shows.
            ax.set_xlim(left=0)
            ax.legend(fontsize="small", loc="lower right")
    figure.suptitle(
        "SIGKILLed worker: time until its runs run again (dotted: lease + reap interval)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_live(plt: Any, results: Sequence[dict[str, Any]], path: Path) -> Path:
    figure, (reaps_ax, cost_ax) = plt.subplots(1, 2, figsize=(12, 4))
    labels, live, double = [], [], []
    for r in results:
        for row in r["per_ratio"]:
            labels.append(f"{r['policy']}\n{r['scenario']} {row['ratio']:g}x")
            live.append(row["live_reaps"])
            double.append(row["repeats"]["overlapping"])
    positions = range(len(labels))
    for offset, values, label in ((-0.2, live, "live reaps"), (0.2, double, "double executions")):
        bars = reaps_ax.bar([p + offset for p in positions], values, width=0.4, label=label)
        # A zero is the result here, so it is written out rather than left as no bar.
        reaps_ax.bar_label(bars, fontsize="x-small")
    reaps_ax.set_xticks(list(positions), labels, fontsize="x-small", rotation=60, ha="right")
    reaps_ax.set_ylabel("count")
    reaps_ax.set_ylim(0, max([1, *live, *double]) * 1.15)
    reaps_ax.set_title("calls of ratio x lease_seconds; nobody died")
    reaps_ax.legend()
    names = [f"{r['policy']}\n{r['scenario']}" for r in results]
    positions = range(len(names))
    for offset, key, label in (
        (-0.2, "renewal_batches", "keeper renewal batches"),
        (0.2, "step_renewals", "renewals on step records"),
    ):
        bars = cost_ax.bar(
            [p + offset for p in positions], [r[key] for r in results], width=0.4, label=label
        )
        cost_ax.bar_label(bars, fontsize="x-small")
    cost_ax.set_xticks(list(positions), names, fontsize="x-small")
    cost_ax.set_title("renewal commits spent")
    cost_ax.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_many_workers(plt: Any, r: dict[str, Any], path: Path) -> Path:
    figure, ax = plt.subplots(figsize=(10, 3.5))
    finished = r["timeline"]["finished"]
    if finished:
        width = 1.0
        buckets = int(max(finished) // width) + 1
        counts = [0] * buckets
        for t in finished:
            counts[int(t // width)] += 1
        ax.step(
            [i * width for i in range(buckets)],
            counts,
            where="post",
            label="runs finished per second",
        )
    for index, t in enumerate(r["timeline"]["kills"]):
        ax.axvline(
            t, color="red", linestyle=":", label="a worker SIGKILLed" if index == 0 else None
        )
    ax.set_xlabel("seconds since the first submit")
    ax.set_ylabel("runs/s")
    ax.set_title(
        f"{r['workers']} workers on PostgreSQL, one killed every {r['kill_every_seconds']:g} s; "
        f"detection p99 {seconds(r['detection']['p99'])} s (bound {r['bound_seconds']:g} s)"
    )
    ax.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


# -- the driver ----------------------------------------------------------------------------------


class Progress:
    """``[#####.....] 12/40 label`` on stderr: redrawn in place on a terminal; otherwise a
    line as each unit starts, and one at the end."""

    def __init__(self, total: int, width: int = 30) -> None:
        self.total = max(total, 1)
        self.done = 0
        self._width = width
        self._tty = sys.stderr.isatty()

    def show(self, label: str) -> None:
        filled = min(self._width, self._width * self.done // self.total)
        bar = "#" * filled + "." * (self._width - filled)
        line = f"[{bar}] {self.done}/{self.total} {label}"
        if self._tty:
            sys.stderr.write(f"\r\033[K{line}")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def tick(self, label: str) -> None:
        self.done += 1
        if self._tty or self.done >= self.total:
            self.show(label)

    def close(self) -> None:
        if self._tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


@attrs.frozen
class Plan:
    detection: tuple[Cell, ...]
    live: tuple[LiveScenario, ...]
    many_workers: ManyWorkers | None

    @property
    def units(self) -> int:
        many = self.many_workers
        return len(self.detection) + len(self.live) + (0 if many is None else many.kills + 1)


def plan(args: argparse.Namespace, pg_url: str | None) -> Plan:
    parts = set(args.parts)
    cells: list[Cell] = []
    if "detection" in parts:
        own = not args.quick
        cells += detection_cells(
            SQLITE, args.leases, args.reaps, args.ks, args.grid, runtime_defaults=own
        )
        if pg_url is not None:
            cells += detection_cells(
                POSTGRESQL, args.pg_leases, args.pg_reaps, args.ks, args.grid, runtime_defaults=own
            )
    live: list[LiveScenario] = []
    if "live" in parts:
        for scenario in args.scenarios:
            for policy in args.policies:
                if args.quick and policy != LEASEWARD and scenario != CALLS:
                    continue
                live.append(
                    LiveScenario(
                        policy,
                        scenario,
                        args.live_lease,
                        args.live_reap,
                        tuple(args.ratios),
                        args.runs_per_ratio,
                    )
                )
    many = None
    if "many-workers" in parts and pg_url is not None:
        many = ManyWorkers(
            workers=args.workers,
            seconds=args.many_seconds,
            kill_every_seconds=args.kill_every,
            rate=args.rate,
            lease_seconds=args.many_lease,
            reap_interval_seconds=args.many_reap,
        )
    return Plan(tuple(cells), tuple(live), many)


async def run_all(args: argparse.Namespace, pg_url: str | None, work: Path) -> dict[str, Any]:
    todo = plan(args, pg_url)
    costs = [part for part in lease_costs.SECTIONS if part in args.parts]
    progress = Progress(todo.units + lease_costs.planned_units(args.quick, pg_url, sections=costs))
    rng = random.Random(args.seed)
    document: dict[str, Any] = {
        "detection": [],
        "live": [],
        "many_workers": None,
        "history": None,
        "fleet": None,
        "failures": [],
    }
    counter = 0

    def scratch(name: str) -> Path:
        nonlocal counter
        counter += 1
        directory = work / f"{counter:03d}-{name}"
        directory.mkdir()
        return directory

    async def attempt(label: str, body: Callable[[], Awaitable[dict[str, Any]]]) -> Any:
        progress.show(label)
        try:
            return await body()
        except Exception as exc:
            document["failures"].append({"unit": label, "error": describe(exc)})
            print(f"\nfailed ({label}): {describe(exc)}", file=sys.stderr, flush=True)
            return None

    for cell in todo.detection:
        found = await attempt(
            cell.label, partial(measure_detection, cell, scratch("detection"), pg_url, rng)
        )
        if found is not None:
            document["detection"].append(found)
        progress.tick(cell.label)
    for scenario in todo.live:
        found = await attempt(scenario.label, partial(measure_live, scenario, scratch("live")))
        if found is not None:
            document["live"].append(found)
        progress.tick(scenario.label)
    if todo.many_workers is not None:
        assert pg_url is not None
        setup = todo.many_workers
        document["many_workers"] = await attempt(
            "many workers",
            partial(measure_many_workers, setup, scratch("many"), pg_url, progress.tick),
        )
        progress.tick("many workers")
    if "history" in costs:
        document["history"] = await attempt(
            "history",
            partial(
                lease_costs.history_section, quick=args.quick, pg_url=pg_url, tick=progress.tick
            ),
        )
    if "fleet" in costs:
        document["fleet"] = await attempt(
            "fleet",
            partial(lease_costs.fleet_section, quick=args.quick, pg_url=pg_url, tick=progress.tick),
        )
    progress.close()
    return document


def parse_list(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            values = [kind(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a comma-separated list: {text!r}") from None
        if not values or any(v <= 0 for v in values):
            raise argparse.ArgumentTypeError("values must be positive")
        return values

    return parse


def parse_choices(choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        values = [part.strip() for part in text.split(",") if part.strip()]
        if not values or any(v not in choices for v in values):
            raise argparse.ArgumentTypeError(f"a comma-separated subset of {', '.join(choices)}")
        return values

    return parse


QUICK = {
    "leases": [2.0],
    "reaps": [0.5],
    "ks": [1, 10],
    "pg_leases": [2.0],
    "pg_reaps": [0.5],
    "live_reap": 0.5,
    "ratios": [0.5, 1.0, 5.0],
    "runs_per_ratio": 2,
    "many_seconds": 20.0,
    "kill_every": 5.0,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Lease renewal and reaping with real worker processes: time from a SIGKILL "
        "until a dead worker's runs run again, reaps of live workers under leaseward's renewal and "
        "under step-boundary renewal, and four PostgreSQL workers with one killed over and over.",
        epilog="The parts: detection (SQLite, and PostgreSQL with 3 workers), live (SQLite), "
        "many-workers (PostgreSQL). Results: bench/results/leases-<UTC timestamp>.json, "
        "leases-latest.json and leases-*.png.",
    )
    floats, ints = parse_list(float), parse_list(int)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="under 2 minutes: SQLite only (PostgreSQL only with --pg-url), lease 2 s with "
        "reap 0.5 s, K = 1 and 10, call ratios 0.5,1,5 at lease 2 s under both policies, "
        "paused and blocked under leaseward's only",
    )
    parser.add_argument(
        "--parts",
        type=parse_choices(PARTS),
        default=list(PARTS),
        metavar="P,P",
        help=f"which parts to run (default: {','.join(PARTS)})",
    )
    parser.add_argument(
        "--pg-url",
        default=None,
        metavar="postgresql://...",
        help="server and maintenance database to create fresh databases on (default: "
        f"$LEASEWARD_TEST_PG_URL or {DEFAULT_PG_URL}; with --quick, PostgreSQL runs only when "
        "this is given)",
    )
    parser.add_argument("--no-pg", action="store_true", help="skip every PostgreSQL measurement")
    parser.add_argument(
        "--grid",
        choices=["cross", "full"],
        default="cross",
        help="detection cells: cross = every lease with every reap interval at the middle K and "
        "with every K at the middle reap interval; full = every combination (default: %(default)s)",
    )
    parser.add_argument(
        "--leases",
        type=floats,
        default=[2.0, 5.0, 15.0, 30.0],
        metavar="S,S",
        help="lease_seconds on SQLite (default: 2,5,15,30)",
    )
    parser.add_argument(
        "--reaps",
        type=floats,
        default=[0.5, 1.0, 5.0],
        metavar="S,S",
        help="reap_interval_seconds on SQLite (default: 0.5,1,5)",
    )
    parser.add_argument(
        "--ks",
        type=ints,
        default=[1, 10, 100],
        metavar="K,K",
        help="runs the killed worker holds (default: 1,10,100)",
    )
    parser.add_argument(
        "--pg-leases",
        type=floats,
        default=[2.0, 5.0],
        metavar="S,S",
        help="lease_seconds on PostgreSQL (default: 2,5)",
    )
    parser.add_argument(
        "--pg-reaps",
        type=floats,
        default=[1.0],
        metavar="S,S",
        help="reap_interval_seconds on PostgreSQL (default: 1)",
    )
    parser.add_argument(
        "--live-lease",
        type=float,
        default=2.0,
        help="lease_seconds of the live part (default: %(default)s)",
    )
    parser.add_argument(
        "--live-reap",
        type=float,
        default=1.0,
        help="reap_interval_seconds of the live part (default: %(default)s)",
    )
    parser.add_argument(
        "--ratios",
        type=floats,
        default=[0.5, 1.0, 5.0, 20.0],
        metavar="R,R",
        help="call lengths in leases (default: 0.5,1,5,20)",
    )
    parser.add_argument(
        "--runs-per-ratio", type=int, default=3, help="runs per call length (default: %(default)s)"
    )
    parser.add_argument(
        "--policies",
        type=parse_choices(POLICIES),
        default=list(POLICIES),
        metavar="P,P",
        help=f"renewal policies of the live part (default: {','.join(POLICIES)})",
    )
    parser.add_argument(
        "--scenarios",
        type=parse_choices((CALLS, PAUSED, BLOCKED)),
        default=[CALLS, PAUSED, BLOCKED],
        metavar="S,S",
        help="live scenarios: calls, paused, blocked (default: all)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=4,
        help="worker processes of the many-workers part (default: %(default)s)",
    )
    parser.add_argument(
        "--many-seconds",
        type=float,
        default=60.0,
        help="how long runs are submitted and workers killed (default: %(default)s)",
    )
    parser.add_argument(
        "--kill-every",
        type=float,
        default=10.0,
        help="seconds between kills (default: %(default)s)",
    )
    parser.add_argument(
        "--rate", type=float, default=40.0, help="runs submitted per second (default: %(default)s)"
    )
    parser.add_argument(
        "--many-lease",
        type=float,
        default=5.0,
        help="lease_seconds of the many-workers part (default: %(default)s)",
    )
    parser.add_argument(
        "--many-reap",
        type=float,
        default=1.0,
        help="reap_interval_seconds of the many-workers part (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=1,
        help="seed of the kill times' random pauses (default: %(default)s)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where stores, worker logs and event files go (kept); default: a temporary directory",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="where the JSON and the plots go (default: bench/results)",
    )
    return parser


def apply_quick(args: argparse.Namespace, argv: Sequence[str]) -> None:
    """--quick changes only what the command line left at its default."""
    given = {
        arg.split("=")[0].lstrip("-").replace("-", "_") for arg in argv if arg.startswith("--")
    }
    for name, value in QUICK.items():
        if name not in given:
            setattr(args, name, value)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        anyio.run(worker_main, WorkerConfig(**json.loads(argv[1])))
        return
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:
        apply_quick(args, argv)
    # Checked before anything runs: a lease of 0 used to fail in every worker, cell
    # after cell, each with the Runtime's traceback.
    sizes = {
        "--live-lease": args.live_lease,
        "--live-reap": args.live_reap,
        "--runs-per-ratio": args.runs_per_ratio,
        "--workers": args.workers,
        "--many-seconds": args.many_seconds,
        "--kill-every": args.kill_every,
        "--rate": args.rate,
        "--many-lease": args.many_lease,
        "--many-reap": args.many_reap,
    }
    not_positive = [flag for flag, value in sizes.items() if not value > 0]
    if not_positive:
        parser.error(f"{', '.join(not_positive)} must be greater than 0")
    pg_url: str | None = None
    if not args.no_pg and (args.pg_url is not None or not args.quick):
        pg_url = args.pg_url or DEFAULT_PG_URL
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if args.work_dir is None:
            work = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="leaseward-leases-"))
            )
        else:
            work = args.work_dir
            work.mkdir(parents=True, exist_ok=True)
        measured = anyio.run(run_all, args, pg_url, work)
    total = time.perf_counter() - started

    print(
        "leaseward leases: worker processes on SQLite (WAL)"
        f"{'' if pg_url is None else ' and PostgreSQL'}; "
        f"{os.cpu_count()} CPUs; a run = one call of an IDEMPOTENT_WRITE tool"
    )
    if pg_url is None:
        print(
            "PostgreSQL: skipped ("
            + ("--no-pg" if args.no_pg else "--quick without --pg-url")
            + ")"
        )
    if measured["detection"]:
        print()
        print(
            f"Detection and recovery: a worker holding K runs, each in a {CALL_SECONDS:g} s call, "
            "SIGKILLed"
        )
        print_detection(measured["detection"])
    if measured["live"]:
        print()
        print(
            "Live workers: calls longer and shorter than the lease, a paused worker, a blocked "
            "store"
        )
        print_live(measured["live"])
    if measured["many_workers"]:
        print()
        print_many_workers(measured["many_workers"])
    if measured["history"]:
        print()
        lease_costs.print_history(measured["history"])
    if measured["fleet"]:
        print()
        lease_costs.print_fleet(measured["fleet"])
    for failure in measured["failures"]:
        print(f"FAILED {failure['unit']}: {failure['error']}")
    print(f"total {total:.1f} s")

    document = {
        "benchmark": "leases",
        "started_utc": stamp,
        "command": [Path(sys.argv[0]).name, *argv],
        "settings": {
            key: value if not isinstance(value, Path) else str(value)
            for key, value in sorted(vars(args).items())
            if key not in ("pg_url", "work_dir", "results_dir")
        },
        "postgresql": None if pg_url is None else without_password(pg_url),
        "environment": environment(),
        "total_seconds": round(total, 3),
        **measured,
    }
    path = write_results(args.results_dir, "leases", document, latest=not args.quick)
    print(saved(path, latest=not args.quick))
    for plot in plot_all(document, args.results_dir, f"-{stamp}" if args.quick else ""):
        print(f"plot: {shown(plot)}")
    if measured["failures"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
