"""A tool that raises something other than ToolError, or does not return in time: the
call is journaled with its arguments and what happened, the traceback is logged, and
a write that may have applied is never retried (G2)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from leaseward import (
    Agent,
    App,
    FailureClass,
    ProviderReply,
    Reason,
    RecoveryPolicy,
    RunInfo,
    RunState,
    Runtime,
    ScriptedProvider,
    StepInfo,
    StepStatus,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.storage import open_store
from tests.integration.support import Calls, until

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {
    "poll_interval_seconds": 0.02,
    "reap_interval_seconds": 0.05,
    "lease_seconds": 2.0,
    # Long enough that a requeued run is still queued when the test looks at it.
    "recovery": RecoveryPolicy(backoff_base_seconds=60.0),
}
ARGUMENTS = {"numerator": 1, "denominator": 0}
TIMEOUT_SECONDS = 0.3
WAIT_SECONDS = 20.0


def agent_calling(tool_: Any, arguments: dict[str, Any]) -> App:
    provider = ScriptedProvider(
        [
            ProviderReply(tool_calls=[ToolCall(tool_.name, arguments, "call-1")]),
            ProviderReply(text="done"),
        ]
    )
    return App([Agent("worker", provider, tools=[tool_])])


async def run_once(store_url: str, app: App) -> tuple[RunInfo, list[StepInfo]]:
    async with Runtime.open(store_url, app, **FAST) as rt:
        run_id = await rt.submit("worker", "go")

        async def ended() -> bool:
            run = await rt.get(run_id)
            return run.state.terminal or run.requeues > 0

        await until(ended, WAIT_SECONDS)
        return await rt.get(run_id), await rt.steps(run_id)


def the_call(journal: list[StepInfo]) -> StepInfo:
    [row] = [step for step in journal if step.call_id == "call-1"]
    return row


def divide_tool(effect: ToolEffect, calls: Calls) -> Any:
    @tool(effect=effect)
    async def divide(ctx: ToolContext, numerator: int, denominator: int) -> float:
        calls.record(ctx, numerator=numerator, denominator=denominator)
        return numerator / denominator

    return divide


async def test_a_read_that_raises_is_journaled_failed_and_its_traceback_logged(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 18, item 8: before, the run was dead-lettered and neither the journal nor
    any log line at any level said which call failed, with what, or where."""
    calls = Calls()
    caplog.set_level(logging.ERROR, logger="leaseward.run")
    run, journal = await run_once(
        store_url, agent_calling(divide_tool(ToolEffect.READ_ONLY, calls), ARGUMENTS)
    )

    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.NOT_RETRYABLE)
    assert run.failure_class is FailureClass.UNKNOWN
    assert run.error == "ZeroDivisionError: division by zero"
    row = the_call(journal)
    assert (row.tool, row.status, row.effect) == ("divide", StepStatus.FAILED, ToolEffect.READ_ONLY)
    assert row.error == "ZeroDivisionError: division by zero"
    assert row.arguments == ARGUMENTS
    assert row.output == {"error": "ZeroDivisionError: division by zero"}
    assert len(calls) == 1

    # The record's message is the event dict or its rendering, depending on whether an
    # earlier test configured leaseward's log output: the text holds the fields either way.
    [record] = [r for r in caplog.records if "tool.raised" in r.getMessage()]
    assert (record.name, record.levelno) == ("leaseward.run", logging.ERROR)
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError
    assert all(value in record.getMessage() for value in (run.id, "call-1", "divide"))


@pytest.mark.parametrize(
    ("effect", "reason"),
    [
        (ToolEffect.NON_IDEMPOTENT_WRITE, Reason.INTERRUPTED_WRITE),
        (ToolEffect.IDEMPOTENT_WRITE, Reason.NOT_RETRYABLE),
    ],
)
async def test_a_write_that_raises_keeps_its_intent_open_with_what_it_raised(
    store_url: str, effect: ToolEffect, reason: Reason
) -> None:
    """A write that raised may have applied before it did: its intent stays open, with the
    exception beside it, and the run waits for an operator. A non-idempotent one must
    be resolved: nobody but the outside system knows whether it applied."""
    calls = Calls()
    run, journal = await run_once(store_url, agent_calling(divide_tool(effect, calls), ARGUMENTS))

    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, reason)
    assert run.failure_class is FailureClass.UNKNOWN
    row = the_call(journal)
    assert (row.status, row.effect) == (StepStatus.STARTED, effect)
    assert row.error == "ZeroDivisionError: division by zero"
    assert row.arguments == ARGUMENTS
    assert len(calls) == 1
    if effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        store = await open_store(store_url)
        try:
            resolved = await store.resolve(run.id, applied=False, operator="ops")
        finally:
            await store.aclose()
        assert resolved.state is RunState.QUEUED


def slow_tool(effect: ToolEffect, calls: Calls) -> Any:
    @tool(name="charge", effect=effect, timeout_seconds=TIMEOUT_SECONDS)
    async def charge(ctx: ToolContext, amount: int) -> int:
        calls.record(ctx, amount=amount)
        await anyio.sleep(WAIT_SECONDS)
        return amount

    return charge


async def test_a_write_that_timed_out_says_so_and_is_never_retried(store_url: str) -> None:
    """Issue 18, item 9: before, error='TimeoutError' and failure_class='connection'."""
    calls = Calls()
    run, journal = await run_once(
        store_url, agent_calling(slow_tool(ToolEffect.NON_IDEMPOTENT_WRITE, calls), {"amount": 5})
    )

    words = "charge did not return within 0.3 s; it may have applied"
    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    assert (run.failure_class, run.error) == (FailureClass.TIMEOUT, words)
    row = the_call(journal)
    assert (row.status, row.error, row.arguments) == (StepStatus.STARTED, words, {"amount": 5})
    assert len(calls) == 1


@pytest.mark.parametrize("effect", [ToolEffect.READ_ONLY, ToolEffect.IDEMPOTENT_WRITE])
async def test_a_call_that_may_be_made_again_and_timed_out_is_retried(
    store_url: str, effect: ToolEffect
) -> None:
    calls = Calls()
    run, journal = await run_once(store_url, agent_calling(slow_tool(effect, calls), {"amount": 5}))

    words = "charge did not return within 0.3 s"
    if effect.is_write:
        words += "; it may have applied"
    assert (run.state, run.requeues) == (RunState.QUEUED, 1)
    assert (run.failure_class, run.error) == (FailureClass.TIMEOUT, words)
    row = the_call(journal)
    status = StepStatus.STARTED if effect.is_write else StepStatus.FAILED
    assert (row.status, row.error, row.arguments) == (status, words, {"amount": 5})
    assert len(calls) == 1


def cancelling_tool(effect: ToolEffect, calls: Calls) -> Any:
    @tool(name="fetch", effect=effect)
    async def fetch(ctx: ToolContext, amount: int) -> int:
        calls.record(ctx, amount=amount)
        # What awaiting a task or future that something else cancelled raises.
        await anyio.lowlevel.checkpoint()
        raise asyncio.CancelledError

    return fetch


@pytest.mark.parametrize(
    ("effect", "reason"),
    [
        (ToolEffect.READ_ONLY, Reason.NOT_RETRYABLE),
        (ToolEffect.IDEMPOTENT_WRITE, Reason.NOT_RETRYABLE),
        (ToolEffect.NON_IDEMPOTENT_WRITE, Reason.INTERRUPTED_WRITE),
    ],
)
async def test_a_call_that_raises_cancelled_error_itself_fails_its_run_not_the_runtime(
    store_url: str, effect: ToolEffect, reason: Reason
) -> None:
    """Before, the CancelledError went up through the Runtime's task group: the
    application's code inside `async with Runtime.open(...)` was cut off where it
    awaited, without an exception, and the run was left running until reaped."""
    calls = Calls()
    after_the_wait: list[RunInfo] = []
    async with Runtime.open(
        store_url, agent_calling(cancelling_tool(effect, calls), {"amount": 5}), **FAST
    ) as rt:
        run_id = await rt.submit("worker", "go")
        with anyio.fail_after(WAIT_SECONDS):
            after_the_wait.append(await rt.wait(run_id))
        journal = await rt.steps(run_id)
    [run] = after_the_wait
    words = "CallRaisedCancelled: the call raised CancelledError, though nothing cancelled it"
    assert (run.state, run.reason, run.failure_class) == (
        RunState.DEAD_LETTERED,
        reason,
        FailureClass.UNKNOWN,
    )
    assert run.error is not None and run.error.startswith(words)
    assert the_call(journal).error == run.error
    assert len(calls) == 1


async def test_a_provider_that_raises_cancelled_error_itself_fails_its_run_not_the_runtime(
    store_url: str,
) -> None:
    class Provider:
        async def complete(self, request: Any) -> ProviderReply:
            await anyio.lowlevel.checkpoint()
            raise asyncio.CancelledError

    app = App([Agent("worker", Provider())])
    async with Runtime.open(store_url, app, **FAST) as rt:
        with anyio.fail_after(WAIT_SECONDS):
            run = await rt.wait(await rt.submit("worker", "go"))
    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.NOT_RETRYABLE)
    assert run.error is not None and "CancelledError" in run.error


@pytest.mark.parametrize(
    ("effect", "reason", "status"),
    [
        (ToolEffect.READ_ONLY, Reason.NOT_RETRYABLE, StepStatus.FAILED),
        (ToolEffect.NON_IDEMPOTENT_WRITE, Reason.INTERRUPTED_WRITE, StepStatus.STARTED),
    ],
)
async def test_a_tool_that_returns_a_coroutine_it_forgot_to_await_fails_its_call(
    store_url: str, effect: ToolEffect, reason: Reason, status: StepStatus
) -> None:
    """Before, the coroutine was taken for a result that is not JSON: a write was journaled
    succeeded and the model told the charge went through, though it never ran."""
    charged: list[int] = []

    async def psp_charge(amount: int) -> dict[str, str]:
        charged.append(amount)
        return {"id": "ch_1"}

    @tool(name="charge", effect=effect)
    async def charge(ctx: ToolContext, amount: int) -> Any:
        return psp_charge(amount)

    run, journal = await run_once(store_url, agent_calling(charge, {"amount": 5}))
    words = "tool 'charge' returned a coroutine instead of its result: an await is missing in it"
    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, reason)
    assert run.error is not None and words in run.error
    assert the_call(journal).status is status
    assert charged == []
