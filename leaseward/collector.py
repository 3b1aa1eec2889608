"""CPython's garbage collector while a Runtime hosts runs in this process.

Every run in flight holds a hundred or so objects the collector tracks (its
conversation, its actor's task and cancel scopes), and they live as long as the
run. With CPython 3.11's first threshold (700 objects allocated and not yet
freed), the collector runs every few steps and promotes those objects early, so
that its full collections come often and walk every run in flight while the event
loop waits: at 1,000 runs of one worker that took 15-20% of its time, a full
collection tens of milliseconds. A first threshold of 10,000 makes the young
collections rarer and each a few milliseconds, and the full ones rare; nothing a
run leaves behind needs the collector (its objects are freed by their reference
counts when it ends), so memory does not grow with it.

Rare is not short: a full collection walks every object that has lived through a
middle one, and with thousands of runs parked in long calls that is most of a second
or more (10,000 runs: 0.45 s on a quiet machine, 1.06 s with its cores busy) in which
no lease is renewed, against a renewal's slack of two thirds of a lease. It comes when
those objects have grown by a quarter since the last one, so a burst of runs meets
it at once. So once the oldest generation holds FREEZE_AT_OBJECTS objects, what
survives each middle collection is frozen (``gc.freeze()``): no collection walks it
again, and the reference counts still free it when its run ends. Of 5,000 parked
runs frozen and then finished, 40 objects were left for the collector in all. The
frozen objects are given back to it when the last Runtime closes, unless the process
had frozen objects of its own when the first one opened.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["FREEZE_AT_OBJECTS", "RUNTIME_FIRST_THRESHOLD", "collector_tuned"]

RUNTIME_FIRST_THRESHOLD = 10_000

FREEZE_AT_OBJECTS = 100_000
"""Objects in the oldest generation, while a Runtime is open, from which on what
survives a middle collection is frozen: a full collection walks them at about 0.3 µs
each on a quiet machine, so this many hold the event loop for about 30 ms, and twice
that with the cores busy. A worker of its own holds some 46,000 before its first run,
and stays below it with a few hundred runs in flight."""

_OLDEST = 2
_MIDDLE = 1


class _Tuning:
    """The threshold raised, and the long-lived objects frozen once they are many, for as
    long as any holder is inside, process-wide."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        # The first threshold before the first holder raised it, and what it was raised to.
        self._restore: tuple[int, int] | None = None
        self._freezing = False
        # Whether the permanent generation was empty when the first holder entered: only
        # then is all of it ours to give back.
        self._frozen_ours = False

    def enter(self) -> None:
        with self._lock:
            self._holders += 1
            if self._holders > 1:
                return
            self._frozen_ours = gc.get_freeze_count() == 0
            gc.callbacks.append(self._collected)
            first, *rest = gc.get_threshold()
            if first >= RUNTIME_FIRST_THRESHOLD:
                return
            gc.set_threshold(RUNTIME_FIRST_THRESHOLD, *rest)
            self._restore = (first, RUNTIME_FIRST_THRESHOLD)

    def leave(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders:
                return
            gc.callbacks.remove(self._collected)
            if self._freezing and self._frozen_ours:
                gc.unfreeze()
            self._freezing = False
            if self._restore is None:
                return
            before, raised = self._restore
            self._restore = None
            first, *rest = gc.get_threshold()
            if first == raised:
                gc.set_threshold(before, *rest)

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        # Called by the collector in whichever thread allocated, possibly inside enter()
        # or leave(): it takes no lock.
        if phase != "stop" or info["generation"] < _MIDDLE:
            return
        if not self._freezing:
            # Counted at each middle collection until it turns on: a walk of a list of at
            # most FREEZE_AT_OBJECTS, but for the collection that turns it on.
            self._freezing = len(gc.get_objects(_OLDEST)) >= FREEZE_AT_OBJECTS
        if self._freezing:
            # Right after a middle or full collection the younger generations are empty:
            # only objects that lived through it are frozen, none too young to judge.
            gc.freeze()


_TUNING = _Tuning()


@contextmanager
def collector_tuned() -> Iterator[None]:
    """The collector tuned for many runs in flight while any holder is inside: its first
    threshold at least RUNTIME_FIRST_THRESHOLD, and, once the oldest generation holds
    FREEZE_AT_OBJECTS, what survives each middle collection frozen; both undone once
    the last one leaves.

    A threshold the process set higher is left as it is, and so is one the process
    changed while a holder was inside: the last holder restores only what it set.
    Objects the process froze itself stay frozen.
    """
    _TUNING.enter()
    try:
        yield
    finally:
        _TUNING.leave()
