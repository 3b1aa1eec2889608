"""Worker processes as the store registers them."""

from __future__ import annotations

import attrs

__all__ = [
    "WorkerInfo",
    "WorkerRegistration",
]


@attrs.frozen
class WorkerRegistration:
    """What a worker process tells the store about itself when it starts and on every beat."""

    id: str
    host: str
    pid: int
    agents: tuple[str, ...]
    stale_after_seconds: float
    """How long after its last beat the worker counts as gone: its own promise, kept in
    its row, so that readers need not know its settings."""


@attrs.frozen
class WorkerInfo:
    """A registered worker, its last heartbeat's age measured on the store's clock."""

    id: str
    host: str
    pid: int
    agents: tuple[str, ...]
    started_at: float
    heartbeat_at: float
    heartbeat_age_seconds: float
    stale_after_seconds: float

    @property
    def live(self) -> bool:
        return self.heartbeat_age_seconds <= self.stale_after_seconds
