"""Typed mailboxes and one-shot reply channels.

Both sit on every journal step's path (a request to the Persister and its
answer), so they are a deque and a single event rather than memory streams.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

import anyio

__all__ = ["Mailbox", "Reply"]

T = TypeVar("T")


class Mailbox(Generic[T]):
    """An actor's inbox, unbounded. It outlives the actor's task, so a restarted actor
    finds its mail. One task receives; any number send."""

    def __init__(self) -> None:
        self._messages: deque[T] = deque()
        self._arrived = anyio.Event()

    async def send(self, message: T) -> None:
        self.send_nowait(message)

    def send_nowait(self, message: T) -> None:
        self._messages.append(message)
        self._arrived.set()

    async def receive(self) -> T:
        while not self._messages:
            # A fresh event per wait: a set one would stay set after the mail is taken.
            self._arrived = anyio.Event()
            await self._arrived.wait()
        return self._messages.popleft()

    def receive_nowait(self) -> T | None:
        return self._messages.popleft() if self._messages else None


class Reply(Generic[T]):
    """A one-shot channel for the answer to a request: the first answer is kept."""

    __slots__ = ("_answered", "_value")
    _value: T

    def __init__(self) -> None:
        self._answered = anyio.Event()

    def answer(self, value: T) -> None:
        # An asker that is gone (cancelled) simply never reads it.
        if not self._answered.is_set():
            self._value = value
            self._answered.set()

    async def wait(self) -> T:
        await self._answered.wait()
        return self._value
