"""Store failures in a worker's log: each kind told once, its repeats summed up.

During an outage every helper of a worker fails on each of its turns: the Persister on
every batch, the keeper on every renewal, the claim loop on every poll, the reaper on
every pass. Logged one line each, four runs made about ten warnings a second, in which
the outage's start and end were hard to find. Here the first failure of each kind (its
event name) is logged as before, at WARNING with its error; its repeats are counted and
logged as one line of the same event every ``REPEATS_LOGGED_EVERY_SECONDS``, with how
many there were and the last error; and the first answer after failures is one
``store.answering`` line that says how long the store failed and how often.
"""

from __future__ import annotations

from typing import Any

import attrs

from leaseward.runtime.clock import Clock, SystemClock
from leaseward.runtime.logs import LeasewardLogger, get_logger

__all__ = ["REPEATS_LOGGED_EVERY_SECONDS", "StoreFaults"]

REPEATS_LOGGED_EVERY_SECONDS = 10.0
"""How often, at most, a kind of store failure that keeps happening is logged again."""

log = get_logger("leaseward.store")


@attrs.define
class _Kind:
    logged_at: float
    """When its last line was logged, on the monotonic clock."""
    repeats: int = 0
    """Failures since its last line."""
    failures: int = 1
    """Failures since it began to fail."""


class StoreFaults:
    """The store failures of one worker, by kind, between two answers of the store.

    A kind is the event its failures are logged as (``persister.batch_failed``, ...). A
    kind that fails while another is answered stays failing until it is answered itself:
    a store that refuses one kind of write alone is told once, not at every turn of the
    others.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        repeats_every_seconds: float = REPEATS_LOGGED_EVERY_SECONDS,
    ) -> None:
        self._clock = clock or SystemClock()
        self._every = repeats_every_seconds
        self._failing: dict[str, _Kind] = {}
        # When the store began to fail, if it has failed since it last answered.
        self._down_since: float | None = None

    def failed(self, logger: LeasewardLogger, event: str, error: str | None, **fields: Any) -> None:
        """Log ``event`` with ``error`` and ``fields`` on ``logger``, unless it is a repeat
        of a kind logged less than the interval ago: that is only counted."""
        now = self._clock.monotonic()
        kind = self._failing.get(event)
        if kind is None:
            self._failing[event] = _Kind(logged_at=now)
            # Only a kind that begins to fail makes an outage: the repeats of one that
            # fails alone must not make every answer of the others a line of its own.
            if self._down_since is None:
                self._down_since = now
            logger.warning(event, error=error, **fields)
            return
        kind.failures += 1
        kind.repeats += 1
        if now - kind.logged_at < self._every:
            return
        logger.warning(
            event,
            error=error,
            repeated=kind.repeats,
            over_seconds=round(now - kind.logged_at, 1),
            **fields,
        )
        kind.logged_at = now
        kind.repeats = 0

    def answered(self, event: str) -> None:
        """The store answered a request of the kind ``event`` names: it fails no more, and
        the first answer after failures is logged once."""
        kind = self._failing.pop(event, None)
        down_since, self._down_since = self._down_since, None
        if down_since is None:
            # Nothing failed, or another kind already told of the store's answer.
            return
        failures = {name: each.failures for name, each in self._failing.items()}
        if kind is not None:
            failures[event] = kind.failures
        log.warning(
            "store.answering",
            after_seconds=round(self._clock.monotonic() - down_since, 1),
            failures=failures,
            still_failing=sorted(self._failing),
        )
