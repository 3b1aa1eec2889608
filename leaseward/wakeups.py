"""Wakes the tasks waiting for a run as soon as it settles in this process."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import anyio

__all__ = ["SettleWakeups", "SettledAmong"]


class SettledAmong:
    """Which runs of a set settled in this process since they were last taken."""

    def __init__(self) -> None:
        self._settled: set[str] = set()
        self._changed = anyio.Event()

    def saw(self, run_id: str) -> None:
        self._settled.add(run_id)
        self._changed.set()

    async def wait(self) -> None:
        """Until one of the runs has settled since the last ``take``."""
        await self._changed.wait()

    def take(self) -> set[str]:
        """The runs that settled since the last take; the next ``wait`` waits for more."""
        taken, self._settled = self._settled, set()
        self._changed = anyio.Event()
        return taken


class SettleWakeups:
    """Who waits for which runs, so that a settlement in this process wakes them at
    once. A run settled in another process is seen by polling instead."""

    def __init__(self) -> None:
        self._watchers: dict[str, list[SettledAmong]] = {}

    def settled(self, run_id: str) -> None:
        """The run reached a terminal state in this process: its waiters look now."""
        for watcher in self._watchers.get(run_id, ()):
            watcher.saw(run_id)

    @contextmanager
    def watching(self, run_ids: Iterable[str]) -> Iterator[SettledAmong]:
        """One record of settlements for the runs a waiter waits for: it learns which
        settled without an event or a read per run. Runs nobody waits for any more
        hold nothing."""
        watched = list(run_ids)
        watcher = SettledAmong()
        for run_id in watched:
            self._watchers.setdefault(run_id, []).append(watcher)
        try:
            yield watcher
        finally:
            for run_id in watched:
                watchers = self._watchers[run_id]
                watchers.remove(watcher)
                if not watchers:
                    del self._watchers[run_id]
