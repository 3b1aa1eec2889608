"""The model checker at its deep bound: ``make check-model``.

Prints the bound, the time the search took, and last, exactly:
``model check: N states, M transitions, V violations`` (exits 1 on a violation,
after printing its shortest trace).
"""

from __future__ import annotations

import argparse
import sys

import attrs

from tests.proof.model.bounds import DEEP, DEEP_DEPTH
from tests.proof.model.explorer import explore


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--depth", type=int, default=DEEP_DEPTH)
    parser.add_argument("--workers", type=int, default=DEEP.workers)
    arguments = parser.parse_args()
    scenario = attrs.evolve(DEEP, workers=arguments.workers)
    calls = ", ".join(
        f"{call.name} ({call.effect.value}{', approval' if call.needs_approval else ''})"
        for call in scenario.calls
    )
    print(f"bound: {scenario.workers} workers, depth {arguments.depth}; one run: a provider turn")
    print(f"  asking for {calls}, then a final reply")
    print(f"  faults and actions per path: {scenario.budget.describe()}")
    sys.stdout.flush()
    report = explore(
        scenario,
        depth=arguments.depth,
        progress=lambda done: print(
            f"  depth {done.depth}: {done.states} states, {done.transitions} transitions, "
            f"{done.seconds:.1f} s",
            flush=True,
        ),
    )
    print(f"searched to depth {report.depth} in {report.seconds:.1f} s")
    if report.violation is not None:
        print(report.describe())
    found = 0 if report.violation is None else 1
    print(
        f"model check: {report.states} states, {report.transitions} transitions, {found} violations"
    )
    return found


if __name__ == "__main__":
    sys.exit(main())
