"""Spans of a run, on both stores: one trace from the caller of submit through every
attempt, GenAI names and attributes, leaseward's audit attributes, and no secrets."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from leaseward import (
    Agent,
    App,
    CallNotStarted,
    ProviderReply,
    ProviderRequest,
    RunState,
    Runtime,
    ScriptedProvider,
    StepKind,
    ToolCall,
    ToolContext,
    ToolEffect,
    ToolError,
    tool,
)
from leaseward.actors.metrics import Metrics
from leaseward.runtime.messages import Usage
from tests.integration.support import until
from tests.integration.tracing_support import every_text, in_memory_spans

pytestmark = pytest.mark.anyio

AGENT = "traced"
API_KEY = "sk-test-0123456789abcdef"


class KeyedProvider(ScriptedProvider):
    """A scripted provider that holds an API key, as a real one does."""

    provider_name = "scripted"
    model = "m-1"

    def __init__(self, replies: list[ProviderReply]) -> None:
        super().__init__(replies)
        self.api_key = API_KEY

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        return await super().complete(request)


def traced_agent() -> Agent:
    @tool(effect=ToolEffect.READ_ONLY)
    async def lookup(ctx: ToolContext, order: int) -> str:
        return "x" * 5000

    @tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    async def save(ctx: ToolContext, order: int) -> dict[str, int]:
        return {"saved": order}

    @tool(effect=ToolEffect.READ_ONLY)
    async def broken(ctx: ToolContext) -> None:
        raise ToolError("the lookup service is down")

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    async def charge(ctx: ToolContext, cents: int) -> dict[str, int]:
        return {"charged": cents}

    provider = KeyedProvider(
        [
            ProviderReply(
                tool_calls=[
                    ToolCall("lookup", {"order": 7}, "call-lookup"),
                    ToolCall("save", {"order": 7}, "call-save"),
                    ToolCall("broken", {}, "call-broken"),
                ],
                usage=Usage(10, 4),
                model="m-1-2026",
                stop_reason="tool_use",
            ),
            ProviderReply(
                tool_calls=[ToolCall("charge", {"cents": 500}, "call-charge")],
                usage=Usage(20, 6),
                model="m-1-2026",
                stop_reason="tool_use",
            ),
            ProviderReply(text="done", usage=Usage(30, 2), model="m-1-2026", stop_reason="end"),
        ]
    )
    return Agent(AGENT, provider, tools=[lookup, save, broken, charge])


def named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_parked_and_resumed_run_is_one_trace_of_two_attempts(store_url: str) -> None:
    exporter = in_memory_spans()
    metrics = Metrics()
    caller = trace.get_tracer("tests")
    async with Runtime.open(
        store_url, App([traced_agent()]), metrics=metrics, trace_content=True
    ) as rt:
        with caller.start_as_current_span("submit order 7") as submitting:
            run_id = await rt.submit(AGENT, {"order": 7})
        parked = submitting.get_span_context()

        async def waiting() -> bool:
            return (await rt.get(run_id)).state is RunState.WAITING_FOR_APPROVAL

        await until(waiting, timeout=20)
        journaled = len(await rt.steps(run_id))
        await rt.approve(run_id, "call-charge", operator="alice")
        done = await rt.wait(run_id, timeout=20)
        assert done.state is RunState.COMPLETED
        steps = await rt.steps(run_id)
        assert await rt.usage(run_id) == Usage(60, 12)

    spans = [span for span in exporter.get_finished_spans() if span.name != "submit order 7"]
    assert {span.context.trace_id for span in spans} == {parked.trace_id}

    first, second = sorted(
        named(spans, "invoke_agent"), key=lambda s: attributes(s)["leaseward.run.epoch"]
    )
    assert first.name == f"invoke_agent {AGENT}"
    assert first.parent is not None and first.parent.span_id == parked.span_id
    assert second.parent is not None and second.parent.span_id == parked.span_id
    assert attributes(first) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": AGENT,
        "leaseward.run.id": run_id,
        "leaseward.run.epoch": 1,
        "leaseward.run.mode": "queued",
        "leaseward.run.requeues": 0,
        "leaseward.worker.id": attributes(first)["leaseward.worker.id"],
        "leaseward.run.resumed": False,
        "leaseward.run.journaled_steps": 0,
        "leaseward.run.settled": True,
        "leaseward.run.state": "waiting_for_approval",
    }
    assert [event.name for event in first.events] == ["leaseward.run_parked"]
    assert attributes(second)["leaseward.run.resumed"] is True
    assert attributes(second)["leaseward.run.journaled_steps"] == journaled
    assert attributes(second)["leaseward.run.state"] == "completed"
    assert attributes(second)["leaseward.run.reason"] == "completed"

    chats = named(spans, "chat")
    assert [span.name for span in chats] == ["chat m-1"] * 3
    assert [chat.parent.span_id for chat in chats if chat.parent] == [
        first.context.span_id,
        first.context.span_id,
        second.context.span_id,
    ]
    assert len([s for s in steps if s.kind is StepKind.PROVIDER]) == len(chats)
    assert attributes(chats[0]) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "m-1",
        "gen_ai.response.model": "m-1-2026",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 4,
        "gen_ai.response.finish_reasons": ("tool_use",),
    }

    tools = {attributes(span)["gen_ai.tool.call.id"]: span for span in named(spans, "execute_tool")}
    assert len(tools) == len(named(spans, "execute_tool")) == 4
    by_seq = {step.call_id: step.seq for step in steps if step.kind is StepKind.TOOL}
    for call_id, span in tools.items():
        attrs = attributes(span)
        assert span.name == f"execute_tool {attrs['gen_ai.tool.name']}"
        assert attrs["gen_ai.operation.name"] == "execute_tool"
        assert attrs["leaseward.step.seq"] == by_seq[call_id]
        assert attrs["leaseward.outcome.recorded"] is True
        parent = second if call_id == "call-charge" else first
        assert span.parent is not None and span.parent.span_id == parent.context.span_id
    assert {
        call_id: attributes(span)["leaseward.tool.effect"] for call_id, span in tools.items()
    } == {
        "call-lookup": "read_only",
        "call-save": "idempotent_write",
        "call-broken": "read_only",
        "call-charge": "non_idempotent_write",
    }
    assert {c for c, s in tools.items() if attributes(s)["leaseward.intent.recorded"]} == {
        "call-save",
        "call-charge",
    }
    assert attributes(tools["call-charge"])["leaseward.approval.decided_by"] == "alice"
    assert "leaseward.approval.decided_by" not in attributes(tools["call-save"])
    assert attributes(tools["call-broken"])["error.type"] == "ToolError"
    assert "error.type" not in attributes(tools["call-save"])
    # Content was asked for, and is bounded.
    assert attributes(tools["call-save"])["gen_ai.tool.call.arguments"] == '{"order": 7}'
    result = attributes(tools["call-lookup"])["gen_ai.tool.call.result"]
    assert result.startswith('"xxx') and len(result) <= 2001

    keys = {step.idempotency_key for step in steps if step.idempotency_key}
    assert keys
    for span in spans:
        for text in every_text(span):
            assert API_KEY not in text
            assert not any(key in text for key in keys)

    tokens = metrics.registry.get_sample_value
    labels = {"agent": AGENT, "model": "m-1-2026"}
    assert tokens("leaseward_tokens_total", {**labels, "kind": "input"}) == 60
    assert tokens("leaseward_tokens_total", {**labels, "kind": "output"}) == 12


async def test_without_content_opted_in_spans_hold_no_arguments_or_results(
    store_url: str,
) -> None:
    exporter = in_memory_spans()
    async with Runtime.open(store_url, App([traced_agent()])) as rt:
        run_id = await rt.submit(AGENT, {"order": 7})

        async def waiting() -> bool:
            return (await rt.get(run_id)).state is RunState.WAITING_FOR_APPROVAL

        await until(waiting, timeout=20)
    spans = named(list(exporter.get_finished_spans()), "execute_tool")
    assert len(spans) == 3
    for span in spans:
        assert "gen_ai.tool.call.arguments" not in attributes(span)
        assert "gen_ai.tool.call.result" not in attributes(span)


async def test_a_result_json_cannot_hold_as_it_is_is_traced_and_the_run_goes_on(
    store_url: str,
) -> None:
    """A tool may return what json.dumps refuses (keys that are not text): the journal
    encodes it its own way, and the span's copy of it must not stop the run."""

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def tally(ctx: ToolContext) -> dict[Any, str]:
        return {(1, 2): "pair"}

    provider = ScriptedProvider(
        [ProviderReply(tool_calls=[ToolCall("tally", {}, "call-tally")]), ProviderReply(text="ok")]
    )
    exporter = in_memory_spans()
    agent = Agent(AGENT, provider, tools=[tally])
    async with Runtime.open(store_url, App([agent]), trace_content=True) as rt:
        run = await rt.run(AGENT, "count")
    assert (run.state, run.result) == (RunState.COMPLETED, "ok")
    [span] = named(list(exporter.get_finished_spans()), "execute_tool")
    assert "pair" in attributes(span)["gen_ai.tool.call.result"]
    assert attributes(span)["leaseward.outcome.recorded"] is True


async def test_what_a_provider_says_of_its_model_and_stop_is_bounded_on_its_span(
    store_url: str,
) -> None:
    """The model's name and stop reason come from the provider's answer, whatever its size."""
    provider = ScriptedProvider(
        [ProviderReply(text="ok", model="m" * 100_000, stop_reason="s" * 100_000)]
    )
    exporter = in_memory_spans()
    async with Runtime.open(store_url, App([Agent(AGENT, provider)])) as rt:
        run = await rt.run(AGENT, "hi")
    assert run.state is RunState.COMPLETED
    [span] = [s for s in exporter.get_finished_spans() if "gen_ai.response.model" in attributes(s)]
    assert len(attributes(span)["gen_ai.response.model"]) <= 201
    [stop] = attributes(span)["gen_ai.response.finish_reasons"]
    assert len(stop) <= 201


async def test_spans_a_call_starts_itself_are_children_of_its_turn_or_tool_span(
    store_url: str,
) -> None:
    """An instrumented HTTP client in a provider, or the MCP SDK in a tool, starts spans
    of its own: they belong under the call's span, in the run's trace."""
    inner = trace.get_tracer("tests")

    class InstrumentedProvider(ScriptedProvider):
        async def complete(self, request: ProviderRequest) -> ProviderReply:
            with inner.start_as_current_span("POST /v1/chat"):
                return await super().complete(request)

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(ctx: ToolContext) -> str:
        with inner.start_as_current_span("POST /charges"):
            return "charged"

    provider = InstrumentedProvider(
        [ProviderReply(tool_calls=[ToolCall("charge", {}, "call-1")]), ProviderReply(text="ok")]
    )
    exporter = in_memory_spans()
    async with Runtime.open(store_url, App([Agent(AGENT, provider, tools=[charge])])) as rt:
        run = await rt.run(AGENT, "charge them")
    assert run.state is RunState.COMPLETED
    spans = list(exporter.get_finished_spans())
    [attempt] = named(spans, "invoke_agent")
    assert {span.context.trace_id for span in spans} == {attempt.context.trace_id}
    [called] = named(spans, "execute_tool charge")
    [charging] = named(spans, "POST /charges")
    assert charging.parent is not None and charging.parent.span_id == called.context.span_id
    turns = {span.context.span_id for span in named(spans, "chat")}
    posts = named(spans, "POST /v1/chat")
    assert len(posts) == len(turns) == 2
    assert {post.parent.span_id for post in posts if post.parent is not None} == turns


async def test_a_call_that_did_not_start_says_so_on_its_span(store_url: str) -> None:
    """Its span names the exception and its words, as for any tool that raised."""

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(ctx: ToolContext) -> str:
        raise CallNotStarted("the payment API refused the connection")

    provider = ScriptedProvider(
        [ProviderReply(tool_calls=[ToolCall("charge", {}, "call-1")]), ProviderReply(text="ok")]
    )
    exporter = in_memory_spans()
    async with Runtime.open(store_url, App([Agent(AGENT, provider, tools=[charge])])) as rt:
        run_id = await rt.submit(AGENT, "charge them")

        async def requeued() -> bool:
            return (await rt.get(run_id)).requeues > 0

        await until(requeued, timeout=20)
    [called, *_] = named(list(exporter.get_finished_spans()), "execute_tool charge")
    assert attributes(called)["error.type"] == "CallNotStarted"
    assert called.status.description == "the payment API refused the connection"
