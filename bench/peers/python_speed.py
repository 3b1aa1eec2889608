"""How fast this machine runs plain Python: one fixed loop, timed, for reading runs side by side.

leaseward's figures are bound by the event loop's CPU, the raw SQLite limits by
SQLite's C code and the disk. Two runs of ``compare.py`` on machines (or at
moments) whose Python differs in speed move leaseward's figures and its ratios
to the raw limits while the disk's stay put. This loop is what tells such runs
apart: the same work in every run, of the kinds a durable step is made of (a
small object made and read, a dict built and looked up, a type checked, a
method called, a short text joined), timed with ``time.perf_counter`` in
batches of ``ITERATIONS``; the best of ``--repeat`` batches is printed, in ns
an iteration (lower is faster), since whatever else the machine runs only adds
to a batch.

The loop must never change: a figure is comparable only with figures of the
same loop. Standard library only, any Python; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

ITERATIONS = 50_000
REPEAT = 7


class _Step:
    __slots__ = ("run_id", "seq", "status")

    def __init__(self, run_id: str, seq: int, status: str) -> None:
        self.run_id = run_id
        self.seq = seq
        self.status = status

    def key(self) -> tuple[str, int]:
        return (self.run_id, self.seq)


def _loop(iterations: int) -> int:
    held: dict[tuple[str, int], _Step] = {}
    total = 0
    for index in range(iterations):
        step = _Step("run", index & 1023, "started" if index & 1 else "succeeded")
        fields = {"seq": step.seq, "status": step.status, "tool": None}
        if isinstance(step, _Step) and fields["status"] == "succeeded":
            held[step.key()] = step
        total += len(":".join((step.run_id, step.status))) + len(held)
    return total


def speed(iterations: int = ITERATIONS, repeat: int = REPEAT) -> float:
    """The best batch's ns an iteration."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        _loop(iterations)
        best = min(best, time.perf_counter() - started)
    return best / iterations * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=REPEAT, help="batches; the best counts")
    args = parser.parse_args()
    if args.repeat < 1:
        raise SystemExit("--repeat must be >= 1")
    result = {
        "python": sys.version.split()[0],
        "iterations": ITERATIONS,
        "repeat": args.repeat,
        "ns_per_iteration": speed(repeat=args.repeat),
    }
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
