"""How long CPython's cyclic garbage collector held the process while a benchmark watched.

Each collection holds the event loop, and with it every run's step and every lease
renewal: at a thousand runs in flight the objects they hold make collections long,
and with a hundred thousand parked a full one walks every object they hold.
"""

from __future__ import annotations

import gc
import time

__all__ = ["CollectorPauses"]


class CollectorPauses:
    """The collections made while inside: all of them, and the full ones apart."""

    def __init__(self) -> None:
        self._began = 0.0
        self.collections = 0
        self.seconds = 0.0
        self.full_collections = 0
        self.full_seconds = 0.0
        self.longest_seconds = 0.0

    def __enter__(self) -> CollectorPauses:
        gc.callbacks.append(self._observe)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        pause = time.perf_counter() - self._began
        self.collections += 1
        self.seconds += pause
        self.longest_seconds = max(self.longest_seconds, pause)
        if info["generation"] == 2:
            self.full_collections += 1
            self.full_seconds += pause

    def figures(self) -> dict[str, float]:
        return {
            "full_collections": self.full_collections,
            "full_seconds": round(self.full_seconds, 3),
            "longest_seconds": round(self.longest_seconds, 3),
        }
