"""The guard a run's calls are bounded in: one scope for the calls of an attempt,
given each call's deadline from its first suspension, and a new one after a call
it stopped. A call that enters scopes of its own before it suspends stays
bounded; a call that swallowed its guard's cancel leaves the next one bounded too;
a stopped call's span says what stopped it."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    RunState,
    Runtime,
    ScriptedProvider,
    StepKind,
    StepStatus,
    ToolCall,
    ToolContext,
    tool,
)
from leaseward.runtime.lifecycle import RecoveryPolicy
from tests.integration.tracing_support import in_memory_spans

pytestmark = pytest.mark.anyio

TIMEOUT_SECONDS = 0.2
SLOW_SECONDS = 30.0
WITHIN_SECONDS = 10.0


def calls_in_turn(*names: str) -> ScriptedProvider:
    return ScriptedProvider(script(names))


def script(names: tuple[str, ...]) -> Callable[[ProviderRequest], ProviderReply]:
    def reply(request: ProviderRequest) -> ProviderReply:
        turn = sum(1 for message in request.messages if message.role is Role.TOOL)
        if turn < len(names):
            return ProviderReply(tool_calls=(ToolCall(names[turn], {}, f"call-{turn}"),))
        return ProviderReply(text="done")

    return reply


async def run_to_its_end(db_url: str, agent: Agent) -> tuple[RunState, list[tuple[str, str]]]:
    async with Runtime.open(
        db_url, App([agent]), recovery=RecoveryPolicy(max_requeues=0), poll_interval_seconds=0.02
    ) as rt:
        run_id = await rt.submit(agent.name, None)
        info = await rt.wait(run_id, timeout=WITHIN_SECONDS)
        steps = await rt.steps(run_id)
    return info.state, [
        (step.tool or "", step.status.value) for step in steps if step.kind is StepKind.TOOL
    ]


async def test_a_call_inside_scopes_of_its_own_from_its_first_step_is_timed_out(
    db_url: str,
) -> None:
    @tool(timeout_seconds=TIMEOUT_SECONDS)
    async def nested(ctx: ToolContext) -> str:
        # Entered before the call first suspends, so before its bound is set.
        async with anyio.create_task_group():
            with anyio.fail_after(SLOW_SECONDS):
                await anyio.sleep(SLOW_SECONDS)
        return "never"

    started = time.monotonic()
    state, steps = await run_to_its_end(db_url, Agent("nester", calls_in_turn("nested"), [nested]))
    assert time.monotonic() - started < WITHIN_SECONDS
    assert state is RunState.DEAD_LETTERED
    assert steps == [("nested", StepStatus.FAILED.value)]


async def test_a_call_after_one_that_swallowed_its_stop_is_bounded_as_well(
    db_url: str,
) -> None:
    @tool(timeout_seconds=TIMEOUT_SECONDS)
    async def stubborn(ctx: ToolContext) -> str:
        try:
            await anyio.sleep(SLOW_SECONDS)
        except anyio.get_cancelled_exc_class():
            return "swallowed"
        return "never"

    @tool
    async def quick(ctx: ToolContext) -> str:
        return "quick"

    @tool(timeout_seconds=TIMEOUT_SECONDS)
    async def slow(ctx: ToolContext) -> str:
        await anyio.sleep(SLOW_SECONDS)
        return "never"

    agent = Agent("stubborn", calls_in_turn("stubborn", "quick", "slow"), [stubborn, quick, slow])
    started = time.monotonic()
    state, steps = await run_to_its_end(db_url, agent)
    assert time.monotonic() - started < WITHIN_SECONDS
    assert state is RunState.DEAD_LETTERED
    assert steps == [
        ("stubborn", StepStatus.SUCCEEDED.value),
        ("quick", StepStatus.SUCCEEDED.value),
        ("slow", StepStatus.FAILED.value),
    ]


class SlowProvider(ScriptedProvider):
    """Asks for one call, then takes longer than its timeout to answer again."""

    def __init__(self, tool_name: str) -> None:
        super().__init__(script((tool_name,)), timeout_seconds=TIMEOUT_SECONDS)

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        if self.calls:
            await anyio.sleep(SLOW_SECONDS)
        return await super().complete(request)


async def test_a_stopped_call_ends_its_span_with_what_stopped_it(db_url: str) -> None:
    @tool(timeout_seconds=TIMEOUT_SECONDS)
    async def slow(ctx: ToolContext) -> str:
        await anyio.sleep(SLOW_SECONDS)
        return "never"

    exporter = in_memory_spans()
    state, _ = await run_to_its_end(db_url, Agent("slow-tool", calls_in_turn("slow"), [slow]))
    assert state is RunState.DEAD_LETTERED
    (call,) = [span for span in exporter.get_finished_spans() if span.name == "execute_tool slow"]
    assert (call.attributes or {})["error.type"] == "timeout"

    @tool
    async def quick(ctx: ToolContext) -> str:
        return "quick"

    exporter.clear()
    state, steps = await run_to_its_end(db_url, Agent("slow-model", SlowProvider("quick"), [quick]))
    assert state is RunState.DEAD_LETTERED
    assert steps == [("quick", StepStatus.SUCCEEDED.value)]
    chats = [span for span in exporter.get_finished_spans() if span.name.startswith("chat")]
    assert [(span.attributes or {}).get("error.type") for span in chats] == [None, "timeout"]
