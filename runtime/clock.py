"""Where time comes from, so tests can move it instead of waiting for it."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["MAX_DURATION_SECONDS", "Clock", "ManualClock", "SystemClock"]

MAX_DURATION_SECONDS = 365 * 24 * 3600.0
"""The longest span a setting may give (a lease, an interval, a drain, a wait): past a
year it is a slip, and infinity overflows the first deadline computed from it."""


class Clock(Protocol):
    """Where a runtime reads the time: wall-clock seconds for records, and a monotonic
    clock for the deadlines of its leases."""

    def now(self) -> float:
        """Seconds since the epoch: what goes into records."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps: what lease deadlines are measured on.

        A worker's wall clock may be set back or run ahead of the database's; a
        deadline taken from the database and compared with it would be wrong by
        the skew, so a worker keeps its own lease deadlines on this clock.
        """
        ...


class SystemClock:
    """The system's clocks: ``time.time()`` and ``time.monotonic()``."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to; both readings move together."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds
