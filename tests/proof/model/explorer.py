"""Breadth-first search over a world's transitions, merging equal states by their hash.

The first violation found is on a shortest path from the start (breadth first), and
its trace is printed by replaying that path: the search keeps, for each state, only
its parent's hash and the number of the transition that led to it.
"""

from __future__ import annotations

import hashlib
import pickle
import time

import attrs

from .invariants import violation
from .world import Scenario, World

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


def _hash(blob: bytes) -> bytes:
    return hashlib.blake2b(blob, digest_size=16).digest()


def explore(scenario: Scenario, *, depth: int) -> Report:
    """Every state within ``depth`` transitions of the start, or up to the first violation."""
    started = time.monotonic()
    root = pickle.dumps(World.start(scenario), protocol=5)
    root_key = _hash(root)
    parents: dict[bytes, tuple[bytes, int] | None] = {root_key: None}
    frontier = [(root_key, root)]
    transitions = 0
    for level in range(depth):
        following: list[tuple[bytes, bytes]] = []
        for key, blob in frontier:
            moves = list(pickle.loads(blob).transitions())
            for index, move in enumerate(moves):
                child: World = pickle.loads(blob)
                child.apply(move)
                transitions += 1
                child_blob = pickle.dumps(child, protocol=5)
                child_key = _hash(child_blob)
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
                following.append((child_key, child_blob))
        frontier = following
        if not frontier:
            return Report(len(parents), transitions, level + 1, time.monotonic() - started)
    return Report(len(parents), transitions, depth, time.monotonic() - started)


def _trace(
    scenario: Scenario, parents: dict[bytes, tuple[bytes, int] | None], end: bytes
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
