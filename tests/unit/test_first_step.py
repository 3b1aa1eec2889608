"""A call's first step, taken before its bound: what awaiting the rest must preserve."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from leaseward.actors.first_step import Finished, Suspended, first_step

pytestmark = pytest.mark.anyio


async def _answers_at_once() -> str:
    return "at once"


async def _suspends_then_answers(gate: asyncio.Future[str]) -> str:
    return "after " + await gate


async def test_a_call_that_never_suspends_is_finished_by_its_first_step() -> None:
    step = first_step(_answers_at_once())
    assert isinstance(step, Finished)
    assert step.value == "at once"


async def test_a_call_that_raises_before_suspending_raises_from_its_first_step() -> None:
    async def refuses() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        first_step(refuses())


async def test_awaiting_a_suspended_call_goes_on_from_where_it_stopped() -> None:
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    ran: list[str] = []

    async def records() -> str:
        ran.append("first")
        answer = await _suspends_then_answers(gate)
        ran.append("rest")
        return answer

    step = first_step(records())
    assert isinstance(step, Suspended)
    assert ran == ["first"]
    asyncio.get_running_loop().call_soon(gate.set_result, "the gate")
    assert await step == "after the gate"
    assert ran == ["first", "rest"]


async def cancelled_while_awaited(call: Coroutine[Any, Any, str]) -> asyncio.Task[str]:
    """A task awaiting ``call`` past its first step, cancelled once it waits there."""
    step = first_step(call)
    assert isinstance(step, Suspended)

    async def awaits() -> str:
        return await step

    task = asyncio.get_running_loop().create_task(awaits())
    await asyncio.sleep(0)
    task.cancel()
    return task


async def test_what_is_thrown_into_a_suspended_call_reaches_it() -> None:
    caught: list[BaseException] = []

    async def waits_forever() -> str:
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError as exc:
            caught.append(exc)
            raise
        return "never"

    task = await cancelled_while_awaited(waits_forever())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(caught) == 1


async def test_a_call_that_swallows_a_cancel_answers_with_what_it_returned() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            return "swallowed"
        return "never"

    task = await cancelled_while_awaited(stubborn())
    assert await task == "swallowed"


async def test_an_awaitable_that_is_not_a_coroutine_is_stepped_as_one() -> None:
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    done.set_result(7)
    step = first_step(done)
    assert isinstance(step, Finished)
    assert step.value == 7

    pending: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    suspended = first_step(pending)
    assert isinstance(suspended, Suspended)
    asyncio.get_running_loop().call_soon(pending.set_result, 8)
    assert await suspended == 8


async def test_closing_an_abandoned_call_closes_the_call_itself() -> None:
    closed: list[bool] = []

    async def holds() -> Any:
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            closed.append(True)

    step = first_step(holds())
    assert isinstance(step, Suspended)
    rest = step.__await__()
    next(rest)
    rest.close()
    assert closed == [True]
