"""Wakes the tasks waiting for a run as soon as it settles in this process."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

__all__ = ["SettleWakeups"]


class SettleWakeups:
    """Per run waited for: the event its settlement in this process sets, and how many
    wait on it. A run settled in another process is seen by polling instead."""

    def __init__(self) -> None:
        self._events: dict[str, anyio.Event] = {}
        self._waiters: Counter[str] = Counter()

    def settled(self, run_id: str) -> None:
        """The run reached a terminal state in this process: its waiters look now."""
        event = self._events.pop(run_id, None)
        if event is not None:
            event.set()

    def next_settlement(self, run_id: str) -> anyio.Event:
        """The event the run's next settlement here sets. Taken before reading the run,
        a settlement landing between the two still wakes the waiter."""
        return self._events.setdefault(run_id, anyio.Event())

    @contextmanager
    def waiting(self, run_id: str) -> Iterator[None]:
        """Counts a waiter; the last one to leave drops the run's event, so that runs
        nobody waits for any more hold nothing."""
        self._waiters[run_id] += 1
        try:
            yield
        finally:
            self._waiters[run_id] -= 1
            if not self._waiters[run_id]:
                del self._waiters[run_id]
                self._events.pop(run_id, None)
