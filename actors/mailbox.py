"""Typed mailboxes and one-shot reply channels.

Both sit on every journal step's path (a request to the Persister and its
answer), so they are a deque and a bare asyncio future rather than memory
streams or anyio events: the stores' drivers (aiosqlite, asyncpg) tie the
runtime to asyncio already, and an anyio event costs a backend lookup and two
objects per request. Awaiting a future is cancellable as any anyio checkpoint is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

__all__ = ["Mailbox", "Reply"]

T = TypeVar("T")


class Mailbox(Generic[T]):
    """An actor's inbox, unbounded. It outlives the actor's task, so a restarted actor
    finds its mail. One task receives; any number send."""

    def __init__(self) -> None:
        self._messages: deque[T] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        """How many messages wait."""
        return len(self._messages)

    async def send(self, message: T) -> None:
        self.send_nowait(message)

    def send_nowait(self, message: T) -> None:
        self._messages.append(message)
        self._wake()

    def send_first(self, message: T) -> None:
        """Put ``message`` ahead of every message waiting, for mail that must not queue."""
        self._messages.appendleft(message)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def receive(self) -> T:
        while not self._messages:
            # A fresh future per wait: a done one would stay done after the mail is taken.
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._messages.popleft()

    def receive_nowait(self) -> T | None:
        return self._messages.popleft() if self._messages else None


class Reply(asyncio.Future[T]):
    """A one-shot channel for the answer to a request: the first answer is kept.

    The future itself, awaited by the asker: no object or coroutine of its own on
    the step's path. An asker that is gone (cancelled, so this future is too) simply
    never reads the answer.
    """

    def answer(self, value: T) -> None:
        if not self.done():
            self.set_result(value)
