"""Typed mailboxes and one-shot reply channels over anyio memory object streams."""

from __future__ import annotations

import math
from typing import Generic, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["Mailbox", "Reply"]

T = TypeVar("T")


class Mailbox(Generic[T]):
    """An actor's inbox. It outlives the actor's task, so a restarted actor finds its mail."""

    def __init__(self, capacity: float = math.inf) -> None:
        self._send: MemoryObjectSendStream[T]
        self._receive: MemoryObjectReceiveStream[T]
        self._send, self._receive = anyio.create_memory_object_stream[T](capacity)

    async def send(self, message: T) -> None:
        await self._send.send(message)

    def send_nowait(self, message: T) -> None:
        self._send.send_nowait(message)

    async def receive(self) -> T:
        return await self._receive.receive()

    def receive_nowait(self) -> T | None:
        try:
            return self._receive.receive_nowait()
        except anyio.WouldBlock:
            return None

    def close(self) -> None:
        self._send.close()
        self._receive.close()


class Reply(Generic[T]):
    """A one-shot channel for the answer to a request."""

    def __init__(self) -> None:
        self._send: MemoryObjectSendStream[T]
        self._receive: MemoryObjectReceiveStream[T]
        self._send, self._receive = anyio.create_memory_object_stream[T](1)

    def answer(self, value: T) -> None:
        try:
            self._send.send_nowait(value)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.WouldBlock):
            # The asker is gone (cancelled) or was already answered; nobody waits for this.
            pass
        finally:
            self._send.close()

    async def wait(self) -> T:
        try:
            return await self._receive.receive()
        finally:
            self._receive.close()
