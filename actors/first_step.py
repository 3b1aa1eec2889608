"""A call's first step, taken before its bound is set: a call that never suspends needs none.

A timeout or a cut-off can only act where a call suspends. A tool or provider
that answers at once (a lookup in memory, a scripted reply) can be neither timed
out nor cut off, yet setting its deadline (a timer on the event loop) and handing
its lease to the keeper cost about a twentieth of a step. So a call's coroutine
is stepped once first; only if it suspends is it bounded, and the rest of it
awaited from where it stopped.
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ["Finished", "Suspended", "first_step"]

T = TypeVar("T")


class Finished(Generic[T]):
    """The call answered without suspending."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


class Suspended(Generic[T]):
    """The call suspended; awaiting this goes on with it from there, as ``await`` would
    have (what it is sent or thrown reaches the call)."""

    __slots__ = ("_call", "_waiting_on")

    def __init__(self, call: Coroutine[Any, Any, T], waiting_on: Any) -> None:
        self._call = call
        self._waiting_on = waiting_on

    def __await__(self) -> Generator[Any, Any, T]:
        return _resume(self._call, self._waiting_on)


def first_step(call: Awaitable[T]) -> Finished[T] | Suspended[T]:
    """Run ``call`` up to its first suspension. What it raises before is raised here."""
    coroutine = call if isinstance(call, types.CoroutineType) else _awaiting(call)
    try:
        waiting_on = coroutine.send(None)
    except StopIteration as finished:
        return Finished(finished.value)
    return Suspended(coroutine, waiting_on)


def _resume(call: Coroutine[Any, Any, T], waiting_on: Any) -> Generator[Any, Any, T]:
    # What ``await call`` does past its first suspension (PEP 380's delegation). A plain
    # generator: ``__await__`` may not return one marked as a coroutine.
    while True:
        try:
            sent = yield waiting_on
        except GeneratorExit:
            call.close()
            raise
        except BaseException as exc:
            try:
                waiting_on = call.throw(exc)
            except StopIteration as finished:
                return finished.value  # type: ignore[no-any-return]
        else:
            try:
                waiting_on = call.send(sent)
            except StopIteration as finished:
                return finished.value  # type: ignore[no-any-return]


async def _awaiting(call: Awaitable[T]) -> T:
    return await call
