"""Bounds on many short shielded waits, kept by one timer on the event loop for them all.

A scope given a deadline of its own (``CancelScope(deadline=...)``) puts a timer on
the event loop as it is entered and takes it off as it is left. Every write's
intent is committed in a shielded scope bounded so that a store that hangs cannot
hold a stop forever; the bound is almost never reached, yet its timer took a scope
from 4.5 µs to 7 or 8. Here each bounded scope is noted in a table, and a single
timer, set for the earliest deadline, cancels the scopes whose deadline has passed.
A scope is cancelled no later than ``slack_seconds`` after its deadline, and the
timer fires at most once every ``slack_seconds``, however many scopes come and go.
"""

from __future__ import annotations

import asyncio

import anyio

__all__ = ["SLACK_SECONDS", "SharedBounds"]

SLACK_SECONDS = 0.5


class SharedBounds:
    """Cancels each scope it is given once its deadline (on the event loop's clock) has
    passed, unless the scope is released first. For one event loop."""

    __slots__ = ("_deadlines", "_slack", "_timer")

    def __init__(self, slack_seconds: float = SLACK_SECONDS) -> None:
        self._slack = slack_seconds
        self._deadlines: dict[anyio.CancelScope, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._deadlines)

    def bound(self, scope: anyio.CancelScope, deadline: float) -> None:
        """Cancel ``scope`` at ``deadline`` unless it is released before."""
        self._deadlines[scope] = deadline
        timer = self._timer
        fire_at = deadline + self._slack
        if timer is None or fire_at < timer.when():
            if timer is not None:
                timer.cancel()
            self._timer = asyncio.get_running_loop().call_at(fire_at, self._expire)

    def release(self, scope: anyio.CancelScope) -> None:
        """``scope`` is left: its deadline no longer matters. The timer stays set until it
        fires, when it finds nothing to cancel: taking it off would cost what it spares."""
        self._deadlines.pop(scope, None)

    def _expire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        later: float | None = None
        for scope, deadline in list(self._deadlines.items()):
            if deadline <= now:
                # Taken out of the table: its owner releases it as it leaves the scope.
                del self._deadlines[scope]
                scope.cancel()
            elif later is None or deadline < later:
                later = deadline
        if later is not None:
            self._timer = loop.call_at(later + self._slack, self._expire)
