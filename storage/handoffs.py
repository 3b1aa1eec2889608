"""The interpreter's lock handed to a database thread within a fraction of a millisecond.

A connection's thread (aiosqlite's) runs SQLite without the interpreter's lock, and
needs it back between statements and to hand its answer to the event loop. While the
loop runs Python, CPython makes the thread wait for it up to the switch interval, 5 ms
by default. A batch of 50 journal items committed while the runs of the other 50 took
their steps took 9-10 ms so, at the median, and 6-8 ms with quick handoffs (100 runs of
10 write steps, as ``bench/step_cost.py`` runs them). ``quick_handoffs()`` shortens the
interval while such a transaction is on the thread, and gives the process its own back
once no transaction of any connection is.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["HANDOFF_SECONDS", "quick_handoffs"]

HANDOFF_SECONDS = 0.0001
_HALF_MICROSECOND = 0.5e-6


class _Holders:
    """How many blocks want quick handoffs now, and the interval from before the first."""

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.count = 0
        self.restore: float | None = None
        """The interval to give back, when a shorter one was set."""


_HOLDERS = _Holders()


@contextmanager
def quick_handoffs() -> Iterator[None]:
    """For as long as the block runs, a thread waits at most HANDOFF_SECONDS for the
    interpreter's lock (never longer than the process's own interval)."""
    holders = _HOLDERS
    with holders.guard:
        if not holders.count:
            own = sys.getswitchinterval()
            if own > HANDOFF_SECONDS:
                holders.restore = own
                sys.setswitchinterval(HANDOFF_SECONDS)
        holders.count += 1
    try:
        yield
    finally:
        with holders.guard:
            holders.count -= 1
            if not holders.count and holders.restore is not None:
                # CPython keeps whole microseconds and truncates what it is given: the
                # value read back, given again, can lose one, commit after commit.
                sys.setswitchinterval(holders.restore + _HALF_MICROSECOND)
                holders.restore = None
