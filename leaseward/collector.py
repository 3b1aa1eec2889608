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
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["RUNTIME_FIRST_THRESHOLD", "collector_tuned"]

RUNTIME_FIRST_THRESHOLD = 10_000


class _Tuning:
    """The threshold raised for as long as any holder is inside, process-wide."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        # The first threshold before the first holder raised it, and what it was raised to.
        self._restore: tuple[int, int] | None = None

    def enter(self) -> None:
        with self._lock:
            self._holders += 1
            if self._holders > 1:
                return
            first, *rest = gc.get_threshold()
            if first >= RUNTIME_FIRST_THRESHOLD:
                return
            gc.set_threshold(RUNTIME_FIRST_THRESHOLD, *rest)
            self._restore = (first, RUNTIME_FIRST_THRESHOLD)

    def leave(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders or self._restore is None:
                return
            before, raised = self._restore
            self._restore = None
            first, *rest = gc.get_threshold()
            if first == raised:
                gc.set_threshold(before, *rest)


_TUNING = _Tuning()


@contextmanager
def collector_tuned() -> Iterator[None]:
    """The collector's first threshold at least RUNTIME_FIRST_THRESHOLD while any holder
    is inside, and as it was once the last one leaves.

    A threshold the process set higher is left as it is, and so is one the process
    changed while a holder was inside: the last holder restores only what it set.
    """
    _TUNING.enter()
    try:
        yield
    finally:
        _TUNING.leave()
