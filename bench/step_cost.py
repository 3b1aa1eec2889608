"""CPU cost of a durable step, by kind and by where the time goes.

The machine this runs on is shared, so wall-clock throughput says little about
leaseward's own cost: this measures CPU time (``time.process_time()``, every
thread of the process, the store's connection threads included) over a fixed
workload, each sample on a fresh SQLite file (WAL, ``synchronous=FULL``).

Per step, by kind. Five workloads of N concurrent runs (default N=100), each
scripted by a ``ScriptedProvider``:

* ``base``: the provider answers at once (submit, claim, one turn, settle);
* ``read-1`` and ``read-2``: K turns (default K=10) asking for one or two calls
  of a read-only tool, then an answer;
* ``write-1`` and ``write-2``: the same with a NON_IDEMPOTENT_WRITE tool, whose
  every call commits its intent before it runs and its outcome after.

The differences tell the kinds apart: a read call costs
``(read-2 - read-1) / (N K)``, a write call ``(write-2 - write-1) / (N K)``, and
a provider turn ``(read-1 - base) / (N K)`` less a read call. The workloads are
interleaved over the repetitions, and the medians are printed.

By area. The ``read-1`` and ``write-1`` workloads run once more under cProfile,
and the event loop thread's own time of every function is summed by where it
lives: validation (argument schemas, pydantic, jsonschema), JSON, store
(leaseward's storage layer, aiosqlite, sqlite3), actors (the actors and the run
machine), logs and metrics, anyio (anyio and asyncio), attrs (making and copying
the runtime's values), and the rest (builtins called from everywhere). Those
shares divide the event loop thread's CPU time (``time.thread_time()``) in an
unprofiled run of the same workload. The threads that run SQLite are not
profiled: their CPU is the process's less the event loop thread's, printed as
``store threads``. ``--top`` prints the heaviest functions too.

A submit loop's latency beside busy runs is measured by ``make bench-peers``
(``bench/peers/submit_loop.py``), beside the raw rate of the same run.

This is a benchmark: it asserts nothing about time.

    .venv/bin/python bench/step_cost.py
    .venv/bin/python bench/step_cost.py --repetitions 5 --top 25
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    RunState,
    Runtime,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)

AGENT = "bench"
WAIT_TIMEOUT_SECONDS = 600.0
POLL_INTERVAL_SECONDS = 0.05


@tool
async def lookup(ctx: ToolContext, key: str) -> str:
    """A read-only tool that does no work, so that the runtime's cost is what is measured."""
    return key


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def record(ctx: ToolContext, key: str) -> str:
    """A write that does no work: each call still commits its intent and its outcome."""
    return key


@dataclass(frozen=True)
class Workload:
    name: str
    tool: Tool | None
    calls_per_turn: int


WORKLOADS = (
    Workload("base", None, 0),
    Workload("read-1", lookup, 1),
    Workload("read-2", lookup, 2),
    Workload("write-1", record, 1),
    Workload("write-2", record, 2),
)
BY_NAME = {workload.name: workload for workload in WORKLOADS}


def make_app(workload: Workload, turns: int) -> App:
    used = workload.tool

    def reply(request: ProviderRequest) -> ProviderReply:
        # The input, then per turn the assistant's message and one per call: counted so,
        # not by reading every message, so that the script's own cost stays flat.
        turn = (len(request.messages) - 1) // (1 + workload.calls_per_turn)
        if used is None or turn >= turns:
            return ProviderReply(text="done")
        return ProviderReply(
            tool_calls=tuple(
                ToolCall(used.name, {"key": f"k{turn}.{index}"}, f"call-{turn}-{index}")
                for index in range(workload.calls_per_turn)
            )
        )

    tools = [] if used is None else [used]
    return App(agents=[Agent(AGENT, ScriptedProvider(reply), tools=tools, max_steps=turns + 1)])


@dataclass(frozen=True)
class Sample:
    cpu_seconds: float
    loop_cpu_seconds: float
    wall_seconds: float


async def run_workload(
    workload: Workload,
    *,
    runs: int,
    turns: int,
    directory: Path,
    profiler: cProfile.Profile | None = None,
    tune_collector: bool = True,
) -> Sample:
    """N runs of ``workload`` on a fresh file, timed from the first submit to the last finish."""
    path = directory / f"{workload.name}-{time.monotonic_ns()}.db"
    url = f"sqlite:///{path}?synchronous=full"
    async with Runtime.open(
        url,
        make_app(workload, turns),
        concurrency=runs,
        poll_interval_seconds=POLL_INTERVAL_SECONDS,
        tune_collector=tune_collector,
    ) as rt:
        cpu, loop_cpu, wall = time.process_time(), time.thread_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        run_ids = await rt.submit_many(AGENT, [{"n": index} for index in range(runs)])
        infos = await rt.wait_all(run_ids, timeout=WAIT_TIMEOUT_SECONDS)
        if profiler is not None:
            profiler.disable()
        sample = Sample(
            time.process_time() - cpu, time.thread_time() - loop_cpu, time.perf_counter() - wall
        )
        unfinished = [info.state for info in infos if info.state is not RunState.COMPLETED]
        if unfinished:
            raise SystemExit(f"{workload.name}: {len(unfinished)} runs did not complete")
        # What each run must have journaled: a provider turn each, a row per call.
        expected = 1 + (turns + turns * workload.calls_per_turn if workload.tool else 0)
        journaled = len(await rt.steps(run_ids[0]))
        if journaled != expected:
            raise SystemExit(f"{workload.name}: {journaled} journal rows, not {expected}")
    return sample


# -- per step, by kind ---------------------------------------------------------------------------


def step_costs(medians: dict[str, float], runs: int, turns: int) -> dict[str, float]:
    """CPU µs per step of each kind, from the workloads' median CPU seconds."""
    steps = runs * turns
    read_call = (medians["read-2"] - medians["read-1"]) / steps
    write_call = (medians["write-2"] - medians["write-1"]) / steps
    turn = (medians["read-1"] - medians["base"]) / steps - read_call
    return {
        "provider turn": turn * 1e6,
        "read call": read_call * 1e6,
        "write call (intent + outcome)": write_call * 1e6,
        "read step (turn + call)": (turn + read_call) * 1e6,
        "write step (turn + call)": (turn + write_call) * 1e6,
        "run overhead (submit, claim, settle)": medians["base"] / runs * 1e6,
    }


async def measure_kinds(args: argparse.Namespace, directory: Path) -> None:
    cpu: dict[str, list[float]] = {workload.name: [] for workload in WORKLOADS}
    for repetition in range(args.repetitions):
        for workload in WORKLOADS:
            sample = await run_workload(
                workload, runs=args.runs, turns=args.turns, directory=directory
            )
            cpu[workload.name].append(sample.cpu_seconds)
            print(
                f"  rep {repetition + 1} {workload.name:8} cpu {sample.cpu_seconds:7.3f} s  "
                f"loop thread {sample.loop_cpu_seconds:7.3f} s  wall {sample.wall_seconds:7.3f} s",
                flush=True,
            )
    medians = {name: statistics.median(values) for name, values in cpu.items()}
    print(f"\nCPU µs per durable step, N={args.runs}, K={args.turns}, median of {args.repetitions}")
    for kind, micros in step_costs(medians, args.runs, args.turns).items():
        print(f"  {kind:38} {micros:9.1f}")


# -- by area -------------------------------------------------------------------------------------

AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "validation",
        (
            "/runtime/schema.py",
            "/runtime/strict.py",
            "pydantic",
            "jsonschema",
            "referencing",
            "rpds",
        ),
    ),
    ("JSON", ("/json/", "/runtime/encoding.py", "_json")),
    ("store", ("/storage/", "leaseward.storage", "aiosqlite", "sqlite3", "SimpleQueue")),
    ("actors", ("/actors/", "leaseward.actors", "/runtime/machine/", "leaseward.runtime.machine")),
    ("logs, metrics", ("structlog", "/logging/", "prometheus_client", "/runtime/logs.py")),
    (
        "anyio",
        (
            "/anyio/",
            "/asyncio/",
            "selectors",
            "_asyncio",
            "_contextvars",
            "_socket",
            "threading",
            "weakref",
        ),
    ),
    ("attrs", ("/attr/", "attrs generated")),
)


def area_of(filename: str, function: str) -> str:
    where = f"{filename} {function}"
    for area, markers in AREAS:
        if any(marker in where for marker in markers):
            return area
    return "other"


IDLE = "{method 'poll' of 'select.epoll' objects}"
"""Where the event loop waits for work: wall time under the profiler, not CPU."""


async def measure_areas(args: argparse.Namespace, directory: Path) -> None:
    for name in ("read-1", "write-1"):
        workload = BY_NAME[name]
        # A CPU-time timer costs a system call per event and would swamp what it measures,
        # so the profile (wall time, idle waits left out) gives only the shares, and an
        # unprofiled run of the same workload gives the CPU time they are shares of.
        plain = await run_workload(workload, runs=args.runs, turns=args.turns, directory=directory)
        profiler = cProfile.Profile()
        await run_workload(
            workload, runs=args.runs, turns=args.turns, directory=directory, profiler=profiler
        )
        stats = pstats.Stats(profiler)
        # Each function's (file, line, name) and (calls, primitive calls, own time, ...);
        # the stub does not declare the attribute.
        raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
        raw = vars(stats)["stats"]
        by_area: dict[str, float] = {}
        for (filename, _, function), (_, _, tottime, _, _) in raw.items():
            if f"{filename} {function}".endswith(IDLE):
                continue
            area = area_of(filename, function)
            by_area[area] = by_area.get(area, 0.0) + tottime
        profiled = sum(by_area.values())
        steps = args.runs * args.turns
        loop_per_step = plain.loop_cpu_seconds / steps * 1e6
        threads = max(plain.cpu_seconds - plain.loop_cpu_seconds, 0.0) / steps * 1e6
        print(
            f"\n{name}: CPU µs per step (provider turn + call) by area; total "
            f"{plain.cpu_seconds / steps * 1e6:.1f} with run overhead"
        )
        for area, seconds in sorted(by_area.items(), key=lambda kv: -kv[1]):
            share = seconds / profiled if profiled else 0.0
            print(f"  {area:14} {share * loop_per_step:9.1f}  {share:6.1%} of the event loop")
        print(f"  {'store threads':14} {threads:9.1f}  (SQLite's connection threads)")
        if args.top:
            for order in ("cumulative", "tottime"):
                print(f"\n{name}: top {args.top} by {order}")
                stats.sort_stats(order).print_stats(args.top)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, metavar="N")
    parser.add_argument("--turns", type=int, default=10, metavar="K")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--top", type=int, default=0, help="print the heaviest N functions")
    parser.add_argument("--no-steps", action="store_true", help="skip the per-kind workloads")
    parser.add_argument("--no-areas", action="store_true", help="skip the profile by area")
    parser.add_argument("--store-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if min(args.runs, args.turns, args.repetitions) < 1 or args.top < 0:
        parser.error("--runs, --turns and --repetitions must be at least 1, --top at least 0")

    async def measure(directory: Path) -> None:
        sections: list[Callable[[argparse.Namespace, Path], Awaitable[None]]] = []
        if not args.no_steps:
            sections.append(measure_kinds)
        if not args.no_areas:
            sections.append(measure_areas)
        for section in sections:
            await section(args, directory)

    with tempfile.TemporaryDirectory(prefix="step-cost-", dir=args.store_dir) as directory:
        anyio.run(measure, Path(directory))


if __name__ == "__main__":
    main()
