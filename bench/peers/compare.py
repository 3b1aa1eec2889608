"""leaseward side by side with DBOS Transact and LangGraph: durable tool steps per second.

The same work on every system: N concurrent runs of K durable tool steps each
(default N=100, K=10), on a fresh SQLite file in WAL mode with
``synchronous=FULL``, timed end to end from before the first run is submitted
or started until every run has finished. Four systems:

* ``leaseward``: ``leaseward_workload.py`` with leaseward's venv, group commit on;
* ``dbos``: ``dbos_workload.py`` with the peers' venv (``bench/.venv-peers``);
* ``langgraph``: ``langgraph_workload.py`` with the peers' venv;
* ``leaseward-no-group-commit``: leaseward again, one commit per journal row.

Each measurement is its own subprocess with its own fresh file, under a
timeout. The systems are interleaved: one repetition runs every concurrency
level on every system in that order, then the next repetition begins, so a
machine that drifts affects all of them alike. A system that is not installed,
fails or times out gets one line saying so, and the others are still reported.

The table gives steps/s (the K tool steps of every run, counted from each
system's own records after the runs) as the median over the repetitions with
min-max, the durable rows each system wrote per second, and the ratios
leaseward/DBOS and leaseward/LangGraph. Results go to
``bench/results/peers-<timestamp>.json`` (and a copy, ``peers-latest.json``),
the plot to ``bench/results/peers.png`` (drawn by ``plot.py`` with the peers'
venv, which has matplotlib).

This file uses only the standard library, so any Python 3.11 can run it:

    .venv/bin/python bench/peers/compare.py                 # N=100, 3 repetitions
    .venv/bin/python bench/peers/compare.py --sweep         # N = 1, 10, 100, 1000
    .venv/bin/python bench/peers/compare.py --quick         # N=10, once: a smoke test
    .venv/bin/python bench/peers/compare.py --concurrency 1,50 --systems leaseward,dbos
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
RESULTS = REPO / "bench" / "results"
LEASEWARD_PYTHON = REPO / ".venv" / "bin" / "python"
PEERS_PYTHON = REPO / "bench" / ".venv-peers" / "bin" / "python"
SWEEP = [1, 10, 100, 1000]
PEER_PACKAGES = ("dbos", "langgraph", "langgraph-checkpoint-sqlite", "langchain-core", "matplotlib")


@dataclass(frozen=True)
class System:
    name: str
    label: str
    script: str
    peers: bool  # run with the peers' venv, else leaseward's
    module: str  # what must import for the system to run at all
    flags: tuple[str, ...] = ()


SYSTEMS = (
    System("leaseward", "leaseward", "leaseward_workload.py", False, "leaseward"),
    System("dbos", "DBOS", "dbos_workload.py", True, "dbos"),
    System("langgraph", "LangGraph", "langgraph_workload.py", True, "langgraph.checkpoint.sqlite"),
    System(
        "leaseward-no-group-commit",
        "leaseward, no group commit",
        "leaseward_workload.py",
        False,
        "leaseward",
        ("--no-group-commit",),
    ),
)
BY_NAME = {system.name: system for system in SYSTEMS}


@dataclass
class Outcome:
    """One measurement: the workload's JSON line, or why there is none."""

    system: str
    concurrency: int
    repetition: int
    wall_seconds: float
    result: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class Interpreter:
    path: Path
    python: str | None = None
    sqlite: str | None = None
    packages: dict[str, str | None] = field(default_factory=dict)
    modules: dict[str, str | None] = field(default_factory=dict)  # module: import error or None
    error: str | None = None


PROBE = """
import importlib, importlib.metadata, json, platform, sqlite3, sys
packages = {}
for name in sys.argv[1].split(","):
    try:
        packages[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        packages[name] = None
modules = {}
for name in sys.argv[2].split(","):
    try:
        importlib.import_module(name)
        modules[name] = None
    except Exception as exc:
        modules[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
                  "packages": packages, "modules": modules}))
"""


def probe(path: Path, packages: Sequence[str], modules: Sequence[str]) -> Interpreter:
    """What an interpreter has: its Python and SQLite versions, packages, importable modules."""
    found = Interpreter(path)
    if not path.exists():
        found.error = f"{path} does not exist"
        return found
    try:
        completed = subprocess.run(
            [str(path), "-c", PROBE, ",".join(packages), ",".join(modules)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        found.error = f"{path}: {exc}"
        return found
    if completed.returncode != 0:
        found.error = f"{path} exited {completed.returncode}: {last_line(completed.stderr)}"
        return found
    data = json.loads(completed.stdout)
    found.python = data["python"]
    found.sqlite = data["sqlite"]
    found.packages = data["packages"]
    found.modules = data["modules"]
    return found


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def git_revision() -> str:
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{rev}{' (modified)' if dirty else ''}"


def measure(
    system: System,
    interpreter: Interpreter,
    *,
    concurrency: int,
    steps: int,
    repetition: int,
    work_dir: Path,
    timeout: float,
) -> Outcome:
    """One workload in its own process, on a fresh file in a fresh directory."""
    directory = Path(tempfile.mkdtemp(prefix=f"{system.name}-c{concurrency}-", dir=work_dir))
    command = [
        str(interpreter.path),
        str(HERE / system.script),
        "--concurrency",
        str(concurrency),
        "--steps",
        str(steps),
        "--db",
        str(directory / "bench.db"),
        *system.flags,
    ]
    outcome = Outcome(system.name, concurrency, repetition, 0.0)
    started = time.perf_counter()
    # Its own session, so a timeout ends the workload and anything it started.
    process = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        outcome.wall_seconds = time.perf_counter() - started
        outcome.error = f"timed out after {timeout:g} s"
        return outcome
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    outcome.wall_seconds = time.perf_counter() - started
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        outcome.error = f"exit {process.returncode}: {last_line(stderr)}"
        return outcome
    outcome.result = json.loads(lines[-1])
    if outcome.result["completed"] != concurrency:
        outcome.error = f"only {outcome.result['completed']} of {concurrency} runs completed"
    return outcome


def median_range(values: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def summarize(
    outcomes: Sequence[Outcome], systems: Sequence[System], levels: Sequence[int]
) -> list[dict[str, Any]]:
    """Per system and concurrency: the medians and ranges over the good repetitions."""
    summary: list[dict[str, Any]] = []
    for system in systems:
        for level in levels:
            good = [
                o.result
                for o in outcomes
                if o.system == system.name
                and o.concurrency == level
                and o.result is not None
                and o.error is None
            ]
            failed = sum(
                1
                for o in outcomes
                if o.system == system.name and o.concurrency == level and o.error is not None
            )
            if not good:
                summary.append(
                    {"system": system.name, "concurrency": level, "samples": 0, "failed": failed}
                )
                continue
            steps = median_range([r["steps_per_second"] for r in good])
            rows = median_range([r["rows_per_second"] for r in good])
            seconds = median_range([r["seconds"] for r in good])
            summary.append(
                {
                    "system": system.name,
                    "concurrency": level,
                    "samples": len(good),
                    "failed": failed,
                    "steps_per_second": {"median": steps[0], "min": steps[1], "max": steps[2]},
                    "rows_per_second": {"median": rows[0], "min": rows[1], "max": rows[2]},
                    "seconds": {"median": seconds[0], "min": seconds[1], "max": seconds[2]},
                    "rows_per_run": statistics.median(r["rows_per_run"] for r in good),
                    "steps_per_run": good[0]["steps_per_run"],
                }
            )
    return summary


def cell(entry: dict[str, Any] | None, key: str) -> str:
    if entry is None or not entry.get("samples"):
        failed = entry.get("failed", 0) if entry else 0
        return "failed" if failed else "-"
    figure = entry[key]
    return f"{figure['median']:.0f} ({figure['min']:.0f}-{figure['max']:.0f})"


def print_tables(
    summary: Sequence[dict[str, Any]], systems: Sequence[System], levels: Sequence[int]
) -> None:
    by_key = {(e["system"], e["concurrency"]): e for e in summary}
    width = max(len(s.label) for s in systems)
    header = (
        f"{'system':<{width}} {'N':>5} {'steps/s median (min-max)':>25} "
        f"{'rows/s median (min-max)':>25} {'rows/run':>8} {'s median':>8} {'ok':>4}"
    )
    print(header)
    print("-" * len(header))
    for level in levels:
        for system in systems:
            entry = by_key.get((system.name, level))
            samples = entry.get("samples", 0) if entry else 0
            rows_per_run = f"{entry['rows_per_run']:.0f}" if samples and entry else "-"
            seconds = f"{entry['seconds']['median']:.2f}" if samples and entry else "-"
            total = samples + (entry.get("failed", 0) if entry else 0)
            print(
                f"{system.label:<{width}} {level:>5} {cell(entry, 'steps_per_second'):>25} "
                f"{cell(entry, 'rows_per_second'):>25} {rows_per_run:>8} {seconds:>8} "
                f"{samples:>2}/{total}"
            )
    print()

    def median(name: str, level: int) -> float | None:
        entry = by_key.get((name, level))
        if not entry or not entry.get("samples"):
            return None
        value: float = entry["steps_per_second"]["median"]
        return value

    def ratio(top: float | None, bottom: float | None) -> str:
        return f"{top / bottom:.2f}x" if top and bottom else "-"

    names = {s.name for s in systems}
    columns = [
        (peer, label)
        for peer, label in (("dbos", "leaseward/DBOS"), ("langgraph", "leaseward/LangGraph"))
        if peer in names
    ]
    if "leaseward-no-group-commit" in names:
        columns.append(("leaseward-no-group-commit", "group/no group commit"))
    if "leaseward" not in names or not columns:
        return
    header = f"{'N':>5} " + " ".join(f"{label:>22}" for _, label in columns)
    print("ratios of median steps/s")
    print(header)
    print("-" * len(header))
    for level in levels:
        ours = median("leaseward", level)
        print(
            f"{level:>5} "
            + " ".join(f"{ratio(ours, median(peer, level)):>22}" for peer, _ in columns)
        )
    print()


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not levels or any(level < 1 for level in levels):
        raise argparse.ArgumentTypeError("concurrency levels must be positive integers")
    return levels


def parse_systems(text: str) -> list[System]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in BY_NAME]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"systems are a comma-separated subset of {', '.join(BY_NAME)}"
        )
    return [BY_NAME[name] for name in names]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="leaseward vs DBOS Transact vs LangGraph: N concurrent runs of K durable "
        "steps on SQLite (WAL, synchronous=FULL), interleaved, each measurement a fresh "
        "process and file.",
        epilog="Run `make bench-peers` once first: it creates bench/.venv-peers with the peers.",
    )
    parser.add_argument(
        "--concurrency",
        type=parse_levels,
        default=[100],
        metavar="N,N,...",
        help="concurrent runs per measurement, one or more levels (default: 100)",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help=f"shorthand for --concurrency {','.join(map(str, SWEEP))}",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="repetitions; each runs every level on every system (default: %(default)s)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test: one repetition at N=10 (overrides --repeat, --concurrency, --sweep)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=10,
        metavar="K",
        help="durable tool steps per run (default: %(default)s)",
    )
    parser.add_argument(
        "--systems",
        type=parse_systems,
        default=list(SYSTEMS),
        metavar="NAME,...",
        help=f"which systems, in this order within a repetition (default: {','.join(BY_NAME)})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds one measurement (one subprocess) may take (default: %(default)s)",
    )
    parser.add_argument(
        "--leaseward-python",
        type=Path,
        default=LEASEWARD_PYTHON,
        help="leaseward's interpreter (default: .venv/bin/python)",
    )
    parser.add_argument(
        "--peers-python",
        type=Path,
        default=PEERS_PYTHON,
        help="the peers' interpreter, with dbos, langgraph and matplotlib "
        "(default: bench/.venv-peers/bin/python)",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS,
        help="where the JSON and the plot go (default: bench/results)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the SQLite files are made (each removed after its measurement); "
        "default: a temporary directory",
    )
    parser.add_argument("--no-plot", action="store_true", help="write no PNG")
    return parser


def print_header(
    args: argparse.Namespace,
    leaseward: Interpreter,
    peers: Interpreter,
    revision: str,
) -> None:
    print(
        f"leaseward vs DBOS Transact vs LangGraph: {args.steps} durable tool steps per run, "
        "SQLite WAL synchronous=FULL, a fresh file per measurement"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.machine()}, "
        f"{platform.system()} {platform.release()}"
    )
    if leaseward.error:
        print(f"leaseward interpreter: UNAVAILABLE: {leaseward.error}")
    else:
        print(
            f"leaseward: {leaseward.packages.get('leaseward')} (commit {revision}), "
            f"Python {leaseward.python}, SQLite {leaseward.sqlite} ({leaseward.path})"
        )
    if peers.error:
        print(f"peers interpreter: UNAVAILABLE: {peers.error}")
    else:
        versions = ", ".join(
            f"{name} {peers.packages.get(name) or 'missing'}" for name in PEER_PACKAGES
        )
        print(f"peers: {versions}; Python {peers.python}, SQLite {peers.sqlite} ({peers.path})")
    print(
        f"levels N={','.join(map(str, args.concurrency))}, {args.repeat} repetition(s), "
        f"systems interleaved: {', '.join(s.name for s in args.systems)}"
    )
    print()


def availability(system: System, leaseward: Interpreter, peers: Interpreter) -> str | None:
    """Why a system cannot run at all, or None."""
    interpreter = peers if system.peers else leaseward
    if interpreter.error:
        return interpreter.error
    problem = interpreter.modules.get(system.module)
    if problem:
        return f"cannot import {system.module} with {interpreter.path}: {problem}"
    return None


def configurations(outcomes: Sequence[Outcome]) -> dict[str, dict[str, Any]]:
    """Each system's configuration as its workload reported it (the first good one)."""
    found: dict[str, dict[str, Any]] = {}
    for outcome in outcomes:
        if outcome.result is not None and outcome.system not in found:
            found[outcome.system] = outcome.result.get("config", {})
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.sweep:
        args.concurrency = list(SWEEP)
    if args.quick:
        args.repeat, args.concurrency = 1, [10]
    if args.repeat < 1 or args.steps < 1 or args.timeout <= 0:
        raise SystemExit("--repeat and --steps must be >= 1, --timeout > 0")
    systems: list[System] = args.systems

    leaseward = probe(args.leaseward_python, ["leaseward"], ["leaseward"])
    peers = probe(
        args.peers_python, PEER_PACKAGES, ["dbos", "langgraph.checkpoint.sqlite", "matplotlib"]
    )
    revision = git_revision()
    print_header(args, leaseward, peers, revision)

    unavailable = {s.name: why for s in systems if (why := availability(s, leaseward, peers))}
    for name, why in unavailable.items():
        print(f"{name}: NOT RUN: {why}")
    if unavailable:
        print()
    runnable = [s for s in systems if s.name not in unavailable]

    outcomes: list[Outcome] = []
    total = args.repeat * len(args.concurrency) * len(runnable)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="leaseward-peers-", dir=args.work_dir) as tmp:
        count = 0
        for repetition in range(1, args.repeat + 1):
            for level in args.concurrency:
                for system in runnable:
                    count += 1
                    outcome = measure(
                        system,
                        peers if system.peers else leaseward,
                        concurrency=level,
                        steps=args.steps,
                        repetition=repetition,
                        work_dir=Path(tmp),
                        timeout=args.timeout,
                    )
                    outcomes.append(outcome)
                    where = f"[{count}/{total}] rep {repetition} N={level} {system.name}"
                    if outcome.error is None and outcome.result is not None:
                        r = outcome.result
                        print(
                            f"{where}: {r['steps_per_second']:.0f} steps/s, "
                            f"{r['rows_per_second']:.0f} rows/s, {r['seconds']:.2f} s timed "
                            f"({outcome.wall_seconds:.1f} s in all)",
                            file=sys.stderr,
                            flush=True,
                        )
                    else:
                        print(f"{where}: FAILED: {outcome.error}", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - started

    failures = [o for o in outcomes if o.error is not None]
    for o in failures:
        print(f"FAILED: {o.system} N={o.concurrency} rep {o.repetition}: {o.error}")
    if failures:
        print()

    summary = summarize(outcomes, systems, args.concurrency)
    print_tables(summary, systems, args.concurrency)
    configs = configurations(outcomes)
    for system in systems:
        config = configs.get(system.name)
        if config:
            described = "; ".join(f"{key}={value}" for key, value in config.items())
            print(f"{system.name}: {described}")
    print(
        "\nsteps = tool steps made durable (K per run), counted from each system's records; "
        "rows = every durable row the runs wrote\n(leaseward: journal rows, provider and tool "
        "steps; DBOS: operation_outputs, workflow_status, workflow_input, workflow_output;\n"
        "LangGraph: checkpoints and writes). Timed: from before the first submit/start until "
        "every run has finished;\nopening the store (schema, actors, DBOS.launch, saver.setup) "
        f"is not. {len(outcomes)} measurements in {elapsed:.0f} s."
    )

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    payload = {
        "created": stamp,
        "arguments": {
            "concurrency": args.concurrency,
            "repeat": args.repeat,
            "steps_per_run": args.steps,
            "systems": [s.name for s in systems],
            "timeout": args.timeout,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "arch": platform.machine(),
            "os": f"{platform.system()} {platform.release()}",
        },
        "leaseward": {
            "commit": revision,
            "version": leaseward.packages.get("leaseward"),
            "python": leaseward.python,
            "sqlite": leaseward.sqlite,
        },
        "peers": {"packages": peers.packages, "python": peers.python, "sqlite": peers.sqlite},
        "not_run": unavailable,
        "configurations": configs,
        "summary": summary,
        "measurements": [o.__dict__ for o in outcomes],
        "seconds": elapsed,
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"peers-{stamp}.json"
    path.write_text(json.dumps(payload, indent=1) + "\n")
    shutil.copyfile(path, args.results_dir / "peers-latest.json")
    print(f"results: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")

    if not args.no_plot:
        plot(args, peers, path)
    return 1 if failures or unavailable else 0


def plot(args: argparse.Namespace, peers: Interpreter, results: Path) -> None:
    png = args.results_dir / "peers.png"
    if peers.error or peers.modules.get("matplotlib"):
        why = peers.error or peers.modules.get("matplotlib")
        print(f"plot: NOT DRAWN: matplotlib is not available in the peers' venv ({why})")
        return
    completed = subprocess.run(
        [str(peers.path), str(HERE / "plot.py"), str(results), str(png)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if completed.returncode != 0:
        print(f"plot: FAILED: {last_line(completed.stderr)}")
        return
    print(f"plot: {png.relative_to(REPO) if png.is_relative_to(REPO) else png}")


if __name__ == "__main__":
    sys.exit(main())
