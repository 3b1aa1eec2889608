"""Breadth-first search over a world's transitions, merging equal states by their hash.

The first violation found is on a shortest path from the start (breadth first), and
its trace is printed by replaying that path: the search keeps, for each state, only
its parent's key and the number of the transition that led to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from .invariants import violation
from .scenario import Scenario
from .world import World

__all__ = ["Report", "explore"]


@attrs.frozen
class Report:
    states: int
    transitions: int
    depth: int
    """The depth the search completed (every state that near the start was expanded)."""
    seconds: float
    violation: str | None = None
    trace: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.violation is None:
            return "no violation"
        lines = [f"violation: {self.violation}", "shortest trace:"]
        lines.extend(f"  {number:2d}. {line}" for number, line in enumerate(self.trace, 1))
        return "\n".join(lines)


def explore(
    scenario: Scenario, *, depth: int, progress: Callable[[Report], None] | None = None
) -> Report:
    """Every state within ``depth`` transitions of the start, or up to the first violation;
    ``progress`` hears of each depth completed.

    States are merged on the hash of their fingerprint (64 bits: a collision, which would
    merge two different states, is about as likely as 1 in 10^7 at a million states).
    """
    started = time.monotonic()
    root = World.start(scenario)
    root_key = hash(root.fingerprint())
    parents: dict[int, tuple[int, int] | None] = {root_key: None}
    frontier = [(root_key, root)]
    transitions = 0
    for level in range(depth):
        following: list[tuple[int, World]] = []
        for key, parent in frontier:
            moves = list(parent.transitions())
            for index, move in enumerate(moves):
                # The last move may change the parent itself: it is not needed after.
                child = parent if index == len(moves) - 1 else parent.copy()
                child.apply(move)
                transitions += 1
                child_key = hash(child.fingerprint())
                if child_key in parents:
                    continue
                parents[child_key] = (key, index)
                broken = violation(child)
                if broken is not None:
                    return Report(
                        states=len(parents),
                        transitions=transitions,
                        depth=level,
                        seconds=time.monotonic() - started,
                        violation=broken,
                        trace=_trace(scenario, parents, child_key),
                    )
                following.append((child_key, child))
        frontier = following
        if progress is not None:
            progress(Report(len(parents), transitions, level + 1, time.monotonic() - started))
        if not frontier:
            return Report(len(parents), transitions, level + 1, time.monotonic() - started)
    return Report(len(parents), transitions, depth, time.monotonic() - started)


def _trace(
    scenario: Scenario, parents: dict[int, tuple[int, int] | None], end: int
) -> tuple[str, ...]:
    path: list[int] = []
    key = end
    while (link := parents[key]) is not None:
        key, index = link
        path.append(index)
    world = World.start(scenario)
    lines = []
    for index in reversed(path):
        move = list(world.transitions())[index]
        at = world.store.now
        what = world.apply(move)
        lines.append(f"[t={at:g}] {move.actor} {move.action}: {what}")
    return tuple(lines)
