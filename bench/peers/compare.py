"""leaseward side by side with DBOS Transact, LangGraph, procrastinate and raw SQLite.

One command (``make bench-peers``) that measures, in one invocation:

1. The matrix on SQLite (a fresh file per measurement, WAL, ``synchronous=FULL``)
   at N = 1, 10, 100, 1000 concurrent runs of K durable tool steps each:
   ``leaseward-read`` (a read-only tool), ``leaseward-write`` (a
   NON_IDEMPOTENT_WRITE tool: intent committed before each call, outcome after),
   DBOS, LangGraph, and ``leaseward-no-group-commit`` (read, one commit per row).
2. The raw SQLite limits (``raw_sqlite.py``): rows/s with one commit per row and
   with 100 rows per commit, journal-shaped rows, and a run row committed alone
   into leaseward's own schema, once per repetition.
3. The ratios per N, with their targets marked: leaseward read and write over
   each peer (steps/s), and leaseward's journal rows/s over raw SQLite.
4. The wait for one durable write, p50 and p99, per system and N.
5. A submit loop (``submit_loop.py``) beside 100 write runs, and with nothing else
   running, beside the raw one-commit-per-row rate and the run-row rate; the first
   marked against its target (at least the raw one-commit-per-row rate).
6. PostgreSQL at N=100: leaseward read and write (one worker process), DBOS, and
   procrastinate (N jobs, one worker), each in a fresh database; leaseward's
   PG/SQLite ratios marked against their target (at least 1).
7. ``bench/claims.py --workers 1,2,4 --repeat 3`` and ``bench/memory.py --quick``, run
   as they are; whether claims grow from each worker count to the next (the medians
   of three rounds) is marked.
8. How fast the machine ran plain Python meanwhile (``python_speed.py``, with
   leaseward's interpreter, before each repetition and after the last): leaseward's
   figures move with it and the raw limits do not, so it is what tells two runs of
   this command apart.

Every measurement is a subprocess of its own (``systems.py``) under a timeout.
Within a repetition, the raw limits come first, then every N on every matrix
system, then the submit loops and the PostgreSQL systems; then the next
repetition, so a machine that drifts affects all alike. A system that is not
installed, fails or times out gets one line saying so; the rest is reported.
Results go to ``bench/results/peers-<timestamp>.json`` (and ``peers-latest.json``),
the plot to ``bench/results/peers.png`` (``plot.py``, with the peers' venv); a
``--quick`` run's to ``peers-<timestamp>.json`` and ``.png`` only.

Standard library only, so any Python 3.11 runs it:

    .venv/bin/python bench/peers/compare.py                  # everything, about 9 min on 2 cores
    .venv/bin/python bench/peers/compare.py --quick          # N=10 once, SQLite only
    .venv/bin/python bench/peers/compare.py --levels 100 --no-pg --no-scaling
    .venv/bin/python bench/peers/compare.py --systems leaseward-read,dbos,raw
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import scaling
import tables
from systems import (
    BY_NAME,
    HERE,
    LOOP,
    MATRIX,
    PG,
    RAW,
    REPO,
    SYSTEMS,
    Interpreter,
    Outcome,
    System,
    last_line,
    measure,
    pg_unreachable,
    probe,
)

RESULTS = REPO / "bench" / "results"
LEASEWARD_PYTHON = REPO / ".venv" / "bin" / "python"
PEERS_PYTHON = REPO / "bench" / ".venv-peers" / "bin" / "python"
LEVELS = [1, 10, 100, 1000]
PG_URL = os.environ.get("LEASEWARD_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
PEER_PACKAGES = (
    "dbos",
    "langgraph",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
    "procrastinate",
    "psycopg",
    "matplotlib",
)
PEER_MODULES = ("dbos", "langgraph.checkpoint.sqlite", "procrastinate", "matplotlib")


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
        description="leaseward vs DBOS Transact, LangGraph, procrastinate and raw SQLite: "
        "throughput, ratios with targets, durable-write latency, a submit loop, PostgreSQL, "
        "scaling; each measurement a fresh process and file or database, interleaved.",
        epilog="Run `make bench-peers` once first: it creates bench/.venv-peers with the peers.",
    )
    parser.add_argument(
        "--levels",
        "--concurrency",
        dest="levels",
        type=parse_levels,
        default=None,
        metavar="N,N,...",
        help="concurrent runs per matrix measurement "
        f"(default: {','.join(map(str, LEVELS))}; 10 with --quick)",
    )
    parser.add_argument(
        "--repeat", type=int, default=None, help="repetitions (default: 3; 1 with --quick)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test: N=10, one repetition, no PostgreSQL and no scaling unless "
        "--levels, --repeat, --pg or --scaling say otherwise; its results go to "
        "peers-<timestamp>.json and .png only, leaving peers-latest.json and peers.png "
        "to the last full run",
    )
    parser.add_argument(
        "--steps", type=int, default=10, metavar="K", help="tool steps per run (default: 10)"
    )
    parser.add_argument(
        "--systems",
        type=parse_systems,
        default=list(SYSTEMS),
        metavar="NAME,...",
        help=f"which systems (default: all: {','.join(BY_NAME)})",
    )
    parser.add_argument(
        "--pg",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the PostgreSQL systems (default: on, off with --quick)",
    )
    parser.add_argument(
        "--scaling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bench/claims.py and bench/memory.py (default: on, off with --quick)",
    )
    parser.add_argument(
        "--pg-url",
        default=PG_URL,
        metavar="postgresql://...",
        help="server and maintenance database to create fresh databases from "
        "(default: $LEASEWARD_TEST_PG_URL or %(default)s)",
    )
    parser.add_argument(
        "--pg-level", type=int, default=100, help="N on PostgreSQL (default: %(default)s)"
    )
    parser.add_argument(
        "--window",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="the window of each raw SQLite mode and each submit loop (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds one measurement (one subprocess) may take (default: %(default)s)",
    )
    parser.add_argument("--leaseward-python", type=Path, default=LEASEWARD_PYTHON)
    parser.add_argument(
        "--peers-python",
        type=Path,
        default=PEERS_PYTHON,
        help="the peers' interpreter (default: bench/.venv-peers/bin/python)",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the SQLite files are made (each removed after its measurement)",
    )
    parser.add_argument("--no-plot", action="store_true", help="write no PNG")
    return parser


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


def availability(
    system: System, leaseward: Interpreter, peers: Interpreter, pg_problem: str | None
) -> str | None:
    """Why a system cannot run at all, or None."""
    if system.kind == PG and pg_problem:
        return pg_problem
    interpreter = peers if system.peers else leaseward
    if interpreter.error:
        return interpreter.error
    problem = interpreter.modules.get(system.module)
    if problem:
        return f"cannot import {system.module} with {interpreter.path}: {problem}"
    return None


def print_not_run(unavailable: dict[str, str], said: Sequence[str | None]) -> None:
    """One line for the systems that share a reason, the reason given once: a missing
    venv or server would otherwise repeat its sentence for every system it stops."""
    by_reason: dict[str, list[str]] = {}
    for name, why in unavailable.items():
        by_reason.setdefault(why, []).append(name)
    for why, names in by_reason.items():
        shown = "see above" if why in said else why
        print(f"{', '.join(names)}: NOT RUN: {shown}")


def print_header(args: argparse.Namespace, leaseward: Interpreter, peers: Interpreter) -> None:
    print(
        f"leaseward vs DBOS Transact vs LangGraph vs procrastinate: {args.steps} durable tool "
        "steps per run; SQLite WAL synchronous=FULL, a fresh file per measurement"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.machine()}, "
        f"{platform.system()} {platform.release()}"
    )
    if leaseward.error:
        print(f"leaseward interpreter: UNAVAILABLE: {leaseward.error}")
    else:
        print(
            f"leaseward: {leaseward.packages.get('leaseward')} (commit {args.revision}), "
            f"Python {leaseward.python}, SQLite {leaseward.sqlite} ({leaseward.path})"
        )
    if peers.error:
        print(f"peers interpreter: UNAVAILABLE: {peers.error}")
    else:
        versions = ", ".join(
            f"{name} {peers.packages.get(name) or 'missing'}" for name in PEER_PACKAGES
        )
        print(f"peers: {versions}; Python {peers.python}, SQLite {peers.sqlite}")
    print(
        f"N={','.join(map(str, args.levels))} (PostgreSQL N={args.pg_level}), "
        f"{args.repeat} repetition(s), interleaved: {', '.join(s.name for s in args.systems)}"
    )
    print()


def schedule(
    systems: Sequence[System], levels: Sequence[int], pg_level: int
) -> list[tuple[System, int]]:
    """One repetition's measurements in order: raw, the matrix by N, the loops, PostgreSQL."""
    order: list[tuple[System, int]] = [(s, 0) for s in systems if s.kind == RAW]
    order += [(s, level) for level in levels for s in systems if s.kind == MATRIX]
    order += [(s, 0) for s in systems if s.kind == LOOP]
    order += [(s, pg_level) for s in systems if s.kind == PG]
    return order


def progress(where: str, outcome: Outcome) -> None:
    r = outcome.result
    if outcome.error is not None or r is None:
        line = f"FAILED: {outcome.error}"
    elif "steps_per_second" in r:
        line = (
            f"{r['steps_per_second']:.0f} steps/s, {r['rows_per_second']:.0f} rows/s, "
            f"wait p50 {r['wait']['p50_ms']:.1f} ms"
        )
    elif "submits_per_second" in r:
        line = f"{r['submits_per_second']:.0f} submits/s, p50 {r['wait']['p50_ms']:.1f} ms"
    else:
        line = (
            f"{r['single']['rows_per_second']:.0f} rows/s single, "
            f"{r['batched']['rows_per_second']:.0f} batched, "
            f"{r['run_row']['rows_per_second']:.0f} run rows"
        )
    print(f"{where}: {line} ({outcome.wall_seconds:.1f} s)", file=sys.stderr, flush=True)


def python_speed(interpreter: Interpreter, timeout: float) -> float | None:
    """ns an iteration of python_speed.py's loop with ``interpreter``, or None if it failed."""
    if interpreter.error:
        return None
    try:
        done = subprocess.run(
            [str(interpreter.path), str(HERE / "python_speed.py")],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return None
    return float(json.loads(lines[-1])["ns_per_iteration"])


def run_all(
    args: argparse.Namespace,
    runnable: Sequence[System],
    leaseward: Interpreter,
    peers: Interpreter,
    speeds: list[float | None],
) -> list[Outcome]:
    """Every measurement, in order; ``speeds`` gets the machine's Python speed before
    each repetition and after the last."""
    outcomes: list[Outcome] = []
    order = schedule(runnable, args.levels, args.pg_level)
    total = args.repeat * len(order)
    with tempfile.TemporaryDirectory(prefix="leaseward-peers-", dir=args.work_dir) as tmp:
        for repetition in range(1, args.repeat + 1):
            speeds.append(python_speed(leaseward, args.timeout))
            for index, (system, level) in enumerate(order, 1):
                outcome = measure(
                    system,
                    peers if system.peers else leaseward,
                    concurrency=level,
                    steps=args.steps,
                    repetition=repetition,
                    work_dir=Path(tmp),
                    timeout=args.timeout,
                    pg_url=args.pg_url,
                    window_seconds=args.window,
                )
                outcomes.append(outcome)
                count = (repetition - 1) * len(order) + index
                shown = f" N={level}" if level else ""
                progress(f"[{count}/{total}] rep {repetition}{shown} {system.name}", outcome)
    speeds.append(python_speed(leaseward, args.timeout))
    return outcomes


def configurations(outcomes: Sequence[Outcome]) -> dict[str, dict[str, Any]]:
    """Each system's configuration as its workload reported it (the first good one)."""
    found: dict[str, dict[str, Any]] = {}
    for outcome in outcomes:
        if outcome.result is not None and outcome.system not in found:
            found[outcome.system] = outcome.result.get("config", {})
    return found


def report(
    args: argparse.Namespace, outcomes: Sequence[Outcome], systems: Sequence[System]
) -> dict[str, Any]:
    """Print every table; return the figures for the JSON."""
    failures = [o for o in outcomes if o.error is not None]
    for o in failures:
        print(f"FAILED: {o.system} N={o.concurrency} rep {o.repetition}: {o.error}")
    if failures:
        print()
    matrix = tables.summarize(outcomes, [s for s in systems if s.kind == MATRIX], args.levels)
    raw = tables.summarize_raw(outcomes)
    ratios = tables.ratios(matrix, raw, args.levels)
    loops = tables.summarize_loops(outcomes, systems)
    pg_systems = [s for s in systems if s.kind == PG]
    pg = tables.summarize(outcomes, pg_systems, [args.pg_level])
    tables.print_matrix(
        "SQLite: durable tool steps/s and rows/s, median (min-max); higher is better", matrix
    )
    tables.print_ratios(ratios, raw)
    tables.print_latency(matrix + pg)
    tables.print_collector(matrix + pg)
    loop_targets = tables.print_loops(loops, raw)
    pg_ratios = tables.print_pg(pg, matrix, args.pg_level) if pg_systems else []
    configs = configurations(outcomes)
    for system in systems:
        config = configs.get(system.name)
        if config:
            print(f"{system.name}: {'; '.join(f'{k}={v}' for k, v in config.items())}")
    print(
        "\nsteps = tool steps made durable (K per run; a procrastinate job is one), counted from "
        "each system's records; rows = every durable row written\n(leaseward: journal rows; "
        "DBOS: operation_outputs, workflow_status, _input, _output; LangGraph: checkpoints and "
        "writes;\nprocrastinate: jobs and events). Timed: from before the first submit/start/"
        "defer until every run has finished; opening the store is not.\ngood = the "
        "repetitions measured of those run (the rest failed; a target is marked 'ok' or 'MISS' "
        "in the ratios, not here)."
    )
    return {
        "matrix": matrix,
        "raw": raw,
        "ratios": ratios,
        "targets": {
            "levels": list(tables.TARGET_LEVELS),
            "peer_ratio": tables.PEER_TARGET,
            "journal_over_raw_batched": tables.RAW_BATCHED_TARGET,
            "postgresql_over_sqlite": tables.PG_TARGET,
            "submit_loop_over_raw_single": tables.LOOP_TARGET,
        },
        "submit_loops": loops,
        "submit_loop_targets": loop_targets,
        "postgresql": {"level": args.pg_level, "summary": pg, "ratios": pg_ratios},
        "configurations": configs,
    }


def main(argv: Sequence[str] | None = None) -> int:
    started = time.perf_counter()
    args = build_parser().parse_args(argv)
    # --quick changes the defaults only: what is given beside it is measured as given.
    if args.levels is None:
        args.levels = [10] if args.quick else LEVELS
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    want_pg = args.pg if args.pg is not None else not args.quick
    want_scaling = args.scaling if args.scaling is not None else not args.quick
    if min(args.repeat, args.steps, args.pg_level) < 1 or args.timeout <= 0 or args.window <= 0:
        raise SystemExit(
            "--repeat, --steps and --pg-level must be >= 1, --timeout and --window > 0"
        )
    systems: list[System] = [s for s in args.systems if want_pg or s.kind != PG]
    args.systems = systems
    args.revision = git_revision()

    leaseward = probe(args.leaseward_python, ["leaseward"], ["leaseward", "sqlite3"])
    peers = probe(args.peers_python, PEER_PACKAGES, PEER_MODULES)
    if peers.error and not args.peers_python.exists():
        peers.error += " (make bench-peers creates bench/.venv-peers with the peers)"
    print_header(args, leaseward, peers)
    pg_problem = pg_unreachable(args.pg_url) if want_pg or want_scaling else None
    if pg_problem:
        print(f"{pg_problem}: the PostgreSQL systems and claims.py are not run\n")
    if not want_pg:
        print("PostgreSQL systems: skipped (--no-pg or --quick)")
    unavailable = {
        s.name: why for s in systems if (why := availability(s, leaseward, peers, pg_problem))
    }
    print_not_run(unavailable, [leaseward.error, peers.error, pg_problem])
    print()
    runnable = [s for s in systems if s.name not in unavailable]

    speeds: list[float | None] = []
    outcomes = run_all(args, runnable, leaseward, peers, speeds)
    figures = report(args, outcomes, systems)
    speed = tables.print_python_speed(speeds)

    found_scaling: dict[str, Any] = {}
    if want_scaling:
        if leaseward.error:
            found_scaling["claims_skipped"] = leaseward.error
        elif pg_problem:
            found_scaling["claims_skipped"] = pg_problem
        else:
            found_scaling["claims"] = scaling.claims(leaseward.path, args.pg_url, args.timeout)
        if not leaseward.error:
            found_scaling["memory"] = scaling.memory(leaseward.path, args.timeout)
        print()
        scaling.print_scaling(found_scaling)
    elapsed = time.perf_counter() - started
    print(f"{len(outcomes)} measurements; {elapsed:.0f} s in all")

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    payload = {
        "created": stamp,
        "command": [Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)],
        "arguments": {
            "levels": args.levels,
            "repeat": args.repeat,
            "steps_per_run": args.steps,
            "systems": [s.name for s in systems],
            "pg": want_pg,
            "scaling": want_scaling,
            "pg_level": args.pg_level,
            "window_seconds": args.window,
            "timeout": args.timeout,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "arch": platform.machine(),
            "os": f"{platform.system()} {platform.release()}",
            "python_speed": speed,
        },
        "leaseward": {
            "commit": args.revision,
            "version": leaseward.packages.get("leaseward"),
            "python": leaseward.python,
            "sqlite": leaseward.sqlite,
        },
        "peers": {"packages": peers.packages, "python": peers.python, "sqlite": peers.sqlite},
        "postgresql_unreachable": pg_problem,
        "not_run": unavailable,
        **figures,
        "scaling": found_scaling,
        "measurements": [o.__dict__ for o in outcomes],
        "seconds": elapsed,
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"peers-{stamp}.json"
    path.write_text(json.dumps(payload, indent=1) + "\n")
    # peers-latest.json and peers.png are the record of the last full run that the
    # documentation quotes; a smoke test must not put its figures in their place.
    png = args.results_dir / (f"peers-{stamp}.png" if args.quick else "peers.png")
    if not args.quick:
        shutil.copyfile(path, args.results_dir / "peers-latest.json")
    print(f"results: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    if args.quick:
        print(
            "a quick run: peers-latest.json and peers.png are left as the last full run made them"
        )
    if not args.no_plot:
        plot(peers, path, png)
    scaling_failed = any(
        found.get("error") for found in found_scaling.values() if isinstance(found, dict)
    )
    return 1 if any(o.error for o in outcomes) or unavailable or scaling_failed else 0


def plot(peers: Interpreter, results: Path, png: Path) -> None:
    if peers.error:
        print("plot: NOT DRAWN: it needs the peers' interpreter (see above)")
        return
    if peers.modules.get("matplotlib"):
        why = peers.modules.get("matplotlib")
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
