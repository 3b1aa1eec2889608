"""Instructions a durable step costs, counted by valgrind: a figure other load cannot move.

``bench/step_layers.py`` times the event loop's CPU, which on these shared machines
moves by a third from one minute to the next, so a change that saves a few percent
of a step cannot be told from the noise. This counts the machine instructions
executed instead, with valgrind's cachegrind (no cache simulation): what else runs
does not change them, and the same code gives the same count to within a few parts
in a million.

Two of ``step_layers.py``'s layers, N runs (default 100) of K provider turns (default
10) that each ask for one call of a tool that does no work, read-only (``read``) or
NON_IDEMPOTENT_WRITE (``write``: an intent committed before the call, its outcome
after):

1. ``machine``: the runs' ``RunMachine``s alone, fed by hand what the actor would feed
   them;
2. ``actor``: one ``RunActor`` a run, all N in a task group, whose store answers every
   commit on the next turn of the event loop, as a Persister answers: the machine, the
   actor and the event loop's scheduling of every wait.

The runtime layer (the Persister and SQLite's thread) is left out: how its threads
interleave changes what it executes. Each layer and kind runs in a process of its own
under valgrind, once with one workload and once with 1 + R (``--repetitions``, default
2); the difference over R N K steps is a step's count, the interpreter's start, the
imports and the first workload (which warms every cache) cancelled out. Hash
randomization is off in both (PYTHONHASHSEED=0), so that sets and dicts are laid out
alike. Each process takes a minute or so: valgrind runs Python about fifty times
slower. This is a benchmark: it asserts nothing.

    .venv/bin/python bench/step_instructions.py
    .venv/bin/python bench/step_instructions.py --layers actor --kinds write
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
from step_cost import BY_NAME, make_app
from step_layers import KINDS, actors_alone, machines_alone

from leaseward.collector import collector_tuned

LAYERS = ("machine", "actor")
REPETITIONS = 2
TIMEOUT_SECONDS = 1800
_TOTAL = re.compile(r"I\s+refs:\s+([\d,]+)")


async def workloads(layer: str, kind: str, runs: int, turns: int, count: int) -> None:
    """``count`` workloads of ``layer``, with the collector as an open Runtime sets it."""
    app = make_app(BY_NAME[KINDS[kind]], turns)
    with collector_tuned():
        for _ in range(count):
            if layer == "machine":
                machines_alone(app, runs)
            else:
                await actors_alone(app, runs, answer_next_turn=True)


def child(layer: str, kind: str, runs: int, turns: int, count: int) -> list[str]:
    """The command of a process that runs ``count`` workloads of ``layer``."""
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(count),
        "--layers",
        layer,
        "--kinds",
        kind,
        "--runs",
        str(runs),
        "--turns",
        str(turns),
    ]


def compile_once(layer: str, kind: str) -> None:
    """One small run without valgrind, so that every module's bytecode is cached before
    the counted processes start (both layers import the same): a process that compiled
    what the other read from the cache would count the compiling as steps."""
    done = subprocess.run(
        child(layer, kind, 1, 1, 1), capture_output=True, text=True, timeout=TIMEOUT_SECONDS
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise SystemExit(
            f"{layer} {kind}: the run before counting exited {done.returncode}:\n{tail}"
        )


def instructions(valgrind: str, layer: str, kind: str, runs: int, turns: int, count: int) -> int:
    """The instructions of a process that runs ``count`` workloads, valgrind's count."""
    command = [
        valgrind,
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        *child(layer, kind, runs, turns, count),
    ]
    # Neither writes bytecode to the cache: where it could not be cached (a checkout
    # that cannot be written), both compile alike.
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=TIMEOUT_SECONDS)
    found = _TOTAL.search(done.stderr)
    if done.returncode != 0 or found is None:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"{layer} {kind}: valgrind exited {done.returncode}:\n{tail}")
    return int(found.group(1).replace(",", ""))


def choices(text: str, allowed: tuple[str, ...]) -> list[str]:
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in allowed]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"choose from {', '.join(allowed)} (comma-separated), not {text!r}"
        )
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="concurrent runs (default 100)")
    parser.add_argument("--turns", type=int, default=10, help="tool steps a run (default 10)")
    parser.add_argument(
        "--repetitions",
        type=int,
        default=REPETITIONS,
        help=f"workloads counted, beyond the first (default {REPETITIONS})",
    )
    parser.add_argument(
        "--layers",
        type=lambda text: choices(text, LAYERS),
        default=list(LAYERS),
        help="machine, actor or both (default)",
    )
    parser.add_argument(
        "--kinds",
        type=lambda text: choices(text, tuple(KINDS)),
        default=list(KINDS),
        help="read, write or both (default)",
    )
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.runs, args.turns, args.repetitions) < 1:
        parser.error("--runs, --turns and --repetitions must be at least 1")
    if args.child:
        anyio.run(workloads, args.layers[0], args.kinds[0], args.runs, args.turns, args.child)
        return
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        # One line, not argparse's usage: nothing is wrong with the command line.
        raise SystemExit(
            "step_instructions.py: valgrind is not installed (Debian: apt-get install valgrind)"
        )
    steps = args.repetitions * args.runs * args.turns
    print(
        f"instructions a durable step, counted by valgrind: N={args.runs} runs of "
        f"K={args.turns} steps, {args.repetitions} workload(s) counted, Python "
        f"{sys.version.split()[0]}",
        flush=True,
    )
    per_step: dict[tuple[str, str], int] = {}
    compile_once(args.layers[0], args.kinds[0])
    for layer in args.layers:
        for kind in args.kinds:
            once = instructions(valgrind, layer, kind, args.runs, args.turns, 1)
            more = instructions(valgrind, layer, kind, args.runs, args.turns, 1 + args.repetitions)
            per_step[(layer, kind)] = round((more - once) / steps)
            print(f"  {layer} {kind}: {per_step[(layer, kind)]:,}", flush=True)
    print()
    print(
        f"{'layer':10}" + "".join(f" {kind + ': a step':>16} {'added':>10}" for kind in args.kinds)
    )
    print("-" * (10 + 28 * len(args.kinds)))
    previous: dict[str, int] = {}
    for layer in args.layers:
        cells = ""
        for kind in args.kinds:
            figure = per_step[(layer, kind)]
            added = figure - previous.get(kind, 0)
            previous[kind] = figure
            cells += f" {figure:16,} {added:+10,}"
        print(f"{layer:10}{cells}")
    print(
        "\nInstructions a step, of every thread of the process (one runs here); 'added' is"
        "\na layer's count less the one above it."
    )


if __name__ == "__main__":
    main()
