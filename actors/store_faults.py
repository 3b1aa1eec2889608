"""Store failures in a worker's log: each kind told once, its repeats summed up.

During an outage every helper of a worker fails on each of its turns: the Persister on
every batch, the keeper on every renewal, the claim loop on every poll, the reaper on
every pass. Logged one line each, four runs made about ten warnings a second, in which
the outage's start and end were hard to find. Here the first failure of each kind (its
event name) is logged as before, at WARNING with its error; its repeats are counted and
logged as one line of the same event every ``REPEATS_LOGGED_EVERY_SECONDS``, with how
many there were and the last error; and the first answer to a kind that failed is one
``store.answering`` line, at INFO, that says how long the store failed and how often.
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

    A kind is the event its failures are logged as (``persister.batch_failed``, ...),
    unless the caller names a finer one: a batch whose outcome is unknown is not
    summed up with batches the store refused. The outage ends when a kind that failed
    is answered: ``store.answering`` says so once, and a kind that fails after it is
    told again from its first line. A kind that fails while the others are answered
    keeps to its own lines; theirs do not end its outage.
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
        # When the first kind failing now began to fail; read only while one is.
        self._down_since = 0.0

    def failed(
        self,
        logger: LeasewardLogger,
        event: str,
        error: str | None,
        *,
        kind: str | None = None,
        **fields: Any,
    ) -> None:
        """Log ``event`` with ``error`` and ``fields`` on ``logger``, unless it is a repeat
        of a kind (``event`` unless given) logged less than the interval ago: that is only
        counted."""
        now = self._clock.monotonic()
        key = event if kind is None else kind
        failing = self._failing.get(key)
        if failing is None:
            if not self._failing:
                self._down_since = now
            self._failing[key] = _Kind(logged_at=now)
            logger.warning(event, error=error, **fields)
            return
        failing.failures += 1
        failing.repeats += 1
        if now - failing.logged_at < self._every:
            return
        logger.warning(
            event,
            error=error,
            repeated=failing.repeats,
            over_seconds=round(now - failing.logged_at, 1),
            **fields,
        )
        failing.logged_at = now
        failing.repeats = 0

    def answered(self, *kinds: str) -> None:
        """The store answered a request of ``kinds``: if one of them was failing, the
        outage is over, told once with how long it lasted and what failed in it."""
        if not self._failing or not any(kind in self._failing for kind in kinds):
            return
        failures = {name: each.failures for name, each in self._failing.items()}
        self._failing.clear()
        log.info(
            "store.answering",
            after_seconds=round(self._clock.monotonic() - self._down_since, 1),
            failures=failures,
        )
