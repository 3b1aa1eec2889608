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
    draining: bool = False
    """Whether it has begun to drain: it claims no more runs, and lets those it has reach
    a boundary before it stops."""


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
    draining_since: float | None = None
    """When it began to drain, on the store's clock; None while it serves."""

    @property
    def live(self) -> bool:
        return self.heartbeat_age_seconds <= self.stale_after_seconds

    @property
    def serving(self) -> bool:
        """Live and not draining: it claims the queued runs of its agents."""
        return self.live and self.draining_since is None

    @property
    def status(self) -> str:
        """``live``, ``draining`` (live, claiming no more runs) or ``gone``."""
        if not self.live:
            return "gone"
        return "live" if self.draining_since is None else "draining"
