"""Runs of an agent on OpenAIChat and AnthropicMessages, end to end: a Runtime, a real
store, and the loopback model server. The provider step is journaled with its model,
tokens and latency, a journaled turn is never asked again, the adapter's failure
classes drive the runtime's recovery (a rate limit waits as long as Retry-After says),
and a Claude model's signed thinking goes back to it with its turn, from the journal too."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from leaseward import (
    Agent,
    App,
    FailureClass,
    ModelSettings,
    Reason,
    RecoveryPolicy,
    RunInfo,
    RunState,
    Runtime,
    StepKind,
    StepStatus,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.providers import AnthropicMessages, OpenAIChat
from leaseward.storage import open_store
from tests.integration.support import capture_logs
from tests.model_server import (
    Reply,
    Request,
    Script,
    anthropic_error,
    anthropic_message,
    model_server,
    openai_completion,
    openai_error,
)

pytestmark = pytest.mark.anyio

KEY = "sk-e2e-5b8c0d2f7a91"
FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.05}

# Effects the tools had, for the test to compare with the journal.
DONE: list[tuple[str, dict[str, Any]]] = []


@tool
async def stock(ctx: ToolContext, sku: str) -> dict[str, Any]:
    """How many of an item are in stock."""
    DONE.append(("stock", {"sku": sku}))
    return {"sku": sku, "count": 3}


@tool
async def price(ctx: ToolContext, sku: str, currency: str = "EUR") -> str:
    """The price of an item."""
    DONE.append(("price", {"sku": sku, "currency": currency}))
    return f"12.50 {currency}"


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def order(ctx: ToolContext, sku: str, count: int) -> str:
    """Order more of an item."""
    DONE.append(("order", {"sku": sku, "count": count}))
    return f"ordered {count} of {sku}"


def app_on(base_url: str, timeout_seconds: float = 5.0, **settings: Any) -> App:
    provider = OpenAIChat(
        "gpt-loopback", base_url=f"{base_url}/v1", api_key=KEY, timeout_seconds=timeout_seconds
    )
    agent = Agent(
        "buyer",
        provider,
        tools=[stock, order, price],
        instructions="Keep the shelves full.",
        model_settings=ModelSettings(**settings),
    )
    return App([agent])


async def until(
    rt: Runtime, run_id: str, predicate: Callable[[RunInfo], bool], timeout: float = 10.0
) -> RunInfo:
    with anyio.fail_after(timeout):
        while True:
            info = await rt.get(run_id)
            if predicate(info):
                return info
            await anyio.sleep(0.01)


@pytest.fixture(autouse=True)
def forget_effects() -> None:
    DONE.clear()


async def test_a_run_on_openai_chat_journals_model_tokens_and_latency(store_url: str) -> None:
    async with model_server() as server:
        server.script(
            Reply(body=openai_completion(None, [("c1", "stock", {"sku": "A-1"})], usage=(80, 9))),
            Reply(
                body=openai_completion(
                    None, [("c2", "order", {"sku": "A-1", "count": 5})], usage=(120, 11)
                )
            ),
            Reply(body=openai_completion("Ordered 5 of A-1.", usage=(150, 6))),
        )
        app = app_on(server.base_url, temperature=0.0, max_tokens=256)
        async with Runtime.open(store_url, app, **FAST) as rt:
            run = await rt.wait(await rt.submit("buyer", "Check A-1"), timeout=20)
            steps = await rt.steps(run.id)

    assert (run.state, run.result) == (RunState.COMPLETED, "Ordered 5 of A-1.")
    assert DONE == [("stock", {"sku": "A-1"}), ("order", {"sku": "A-1", "count": 5})]
    turns = [step for step in steps if step.kind is StepKind.PROVIDER]
    assert [turn.output["usage"] for turn in turns] == [
        {"input_tokens": 80, "output_tokens": 9},
        {"input_tokens": 120, "output_tokens": 11},
        {"input_tokens": 150, "output_tokens": 6},
    ]
    assert {turn.output["model"] for turn in turns} == {"loopback-model-0613"}
    assert [turn.output["stop_reason"] for turn in turns] == ["tool_calls", "tool_calls", "stop"]
    assert all(turn.output["latency_ms"] >= 0 for turn in turns)
    # The agent's settings went out with every request; the tool results came back in.
    sent = [request.json for request in server.requests]
    assert all((body["temperature"], body["max_tokens"]) == (0.0, 256) for body in sent)
    assert sent[0]["messages"][0] == {"role": "system", "content": "Keep the shelves full."}
    assert sent[2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c2",
        "content": "ordered 5 of A-1",
    }
    assert [tool["function"]["name"] for tool in sent[0]["tools"]] == ["stock", "order", "price"]


async def test_strict_mode_nulls_reach_the_tool_as_left_out(db_url: str) -> None:
    async with model_server() as server:
        server.script(
            Reply(
                body=openai_completion(None, [("c1", "price", {"sku": "J-1", "currency": None})])
            ),
            Reply(body=openai_completion("12.50 EUR.")),
        )
        async with Runtime.open(db_url, app_on(server.base_url), **FAST) as rt:
            run = await rt.wait(await rt.submit("buyer", "Price of J-1?"), timeout=20)

    assert run.state is RunState.COMPLETED
    assert DONE == [("price", {"sku": "J-1", "currency": "EUR"})]
    (sent,) = [
        t["function"] for t in server.requests[0].json["tools"] if t["function"]["name"] == "price"
    ]
    assert sent["strict"] is True
    assert sent["parameters"]["required"] == ["sku", "currency"]


async def test_a_journaled_turn_is_not_asked_again_after_a_server_error(db_url: str) -> None:
    async with model_server() as server:
        server.script(
            Reply(body=openai_completion(None, [("c1", "stock", {"sku": "B-2"})])),
            # Retry-After 0: the requeue needs no wait, and the next attempt resumes.
            Reply(503, openai_error("Unavailable", "server_error"), headers={"retry-after": "0"}),
            Reply(body=openai_completion("B-2 has 3.")),
        )
        async with Runtime.open(db_url, app_on(server.base_url), **FAST) as rt:
            run = await rt.wait(await rt.submit("buyer", "Check B-2"), timeout=20)
            steps = await rt.steps(run.id)

    assert (run.state, run.requeues, run.epoch) == (RunState.COMPLETED, 1, 2)
    assert DONE == [("stock", {"sku": "B-2"})]
    assert len(server.requests) == 3
    # The attempt after the requeue asked for turn two only, from the journal.
    resumed = server.requests[2].json["messages"]
    assert [m["role"] for m in resumed] == ["system", "user", "assistant", "tool"]
    assert resumed[2]["tool_calls"][0]["id"] == "c1"
    assert [s.kind for s in steps] == [StepKind.PROVIDER, StepKind.TOOL, StepKind.PROVIDER]


async def test_a_rate_limit_requeues_after_its_retry_after(db_url: str) -> None:
    async with model_server() as server:
        server.script(
            Reply(429, openai_error("Slow down", "requests"), headers={"retry-after": "7"})
        )
        policy = RecoveryPolicy(backoff_base_seconds=30)
        async with Runtime.open(db_url, app_on(server.base_url), recovery=policy, **FAST) as rt:
            run_id = await rt.submit("buyer", "Check C-3")
            run = await until(rt, run_id, lambda r: r.requeues >= 1)
        store = await open_store(db_url)
        try:
            record = await store.get_run(run_id)
        finally:
            await store.aclose()

    assert (run.state, run.failure_class) == (RunState.QUEUED, FailureClass.RATE_LIMIT)
    assert record is not None
    assert record.available_at - record.updated_at == pytest.approx(7.0)
    assert "asked for a retry after 7 s" in (run.error or "")
    assert len(server.requests) == 1


async def test_a_model_slower_than_its_timeout_requeues_the_run(db_url: str) -> None:
    async with model_server() as server:
        server.script(Reply(body=openai_completion("late"), delay_seconds=30))
        app = app_on(server.base_url, timeout_seconds=0.5)
        async with Runtime.open(db_url, app, **FAST) as rt:
            run_id = await rt.submit("buyer", "Check H-8")
            run = await until(rt, run_id, lambda r: r.requeues >= 1)

    assert (run.state, run.failure_class) == (RunState.QUEUED, FailureClass.CONNECTION)
    assert "0.5 s" in (run.error or ""), run.error


async def test_a_rejected_key_dead_letters_the_run(db_url: str) -> None:
    async with model_server() as server:
        server.script(Reply(401, openai_error("Incorrect API key", "invalid_request_error")))
        async with Runtime.open(db_url, app_on(server.base_url), **FAST) as rt:
            run = await rt.wait(await rt.submit("buyer", "Check D-4"), timeout=20)

    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.NOT_RETRYABLE)
    assert run.failure_class is FailureClass.AUTH
    assert run.requeues == 0
    assert "HTTP 401" in (run.error or "")
    assert len(server.requests) == 1


async def test_arguments_that_are_not_json_get_an_error_result_not_a_crash(db_url: str) -> None:
    async with model_server() as server:
        server.script(
            Reply(body=openai_completion(None, [("c1", "order", '{"sku": "E-5", "count": 5')])),
            Reply(body=openai_completion("Sorry, I could not order.")),
        )
        async with Runtime.open(db_url, app_on(server.base_url), **FAST) as rt:
            run = await rt.wait(await rt.submit("buyer", "Order E-5"), timeout=20)
            steps = await rt.steps(run.id)

    assert (run.state, run.result) == (RunState.COMPLETED, "Sorry, I could not order.")
    assert DONE == []
    refused = steps[1]
    assert (refused.tool, refused.status) == ("order", StepStatus.FAILED)
    assert refused.arguments == '{"sku": "E-5", "count": 5'
    assert refused.error is not None and "could not be read" in refused.error
    told = server.requests[1].json["messages"]
    assert told[-2]["tool_calls"][0]["function"]["arguments"] == '{"sku": "E-5", "count": 5'
    assert told[-1]["role"] == "tool" and "could not be read" in told[-1]["content"]


def nested(depth: int) -> str:
    """Argument text whose object holds lists ``depth`` levels deep in all."""
    return '{"sku": "E-5", "count": ' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"


@pytest.mark.parametrize(
    ("text", "told"),
    [
        ('{"sku": "E-5", "count": NaN}', "NaN is not a number JSON has"),
        ('{"sku": "E-5", "count": -Infinity}', "-Infinity is not a number JSON has"),
        ('{"sku": "E-5", "count": 1e999}', "1e999 is not a number JSON has"),
        (nested(198), "nested more than 197 levels deep"),
        # As deep as the reply that carries them can be journaled: refused by the schema.
        (nested(197), "invalid arguments for order"),
    ],
)
async def test_arguments_the_journal_cannot_hold_get_an_error_result(
    db_url: str, text: str, told: str
) -> None:
    """Python's JSON reader takes NaN and Infinity, 1e999 for an infinite float, and
    nesting as deep as its stack allows: taken for the call's arguments, they could not
    be journaled with the reply that asked for them, and the run was dead-lettered over
    what a model wrote."""
    async with model_server() as server:
        server.script(
            Reply(body=openai_completion(None, [("c1", "order", text)])),
            Reply(body=openai_completion("Sorry, I could not order.")),
        )
        async with Runtime.open(db_url, app_on(server.base_url), **FAST) as rt:
            run = await rt.wait(await rt.submit("buyer", "Order E-5"), timeout=20)
            steps = await rt.steps(run.id)

    assert (run.state, run.result) == (RunState.COMPLETED, "Sorry, I could not order."), run.error
    assert DONE == []
    refused = steps[1]
    assert (refused.tool, refused.status) == ("order", StepStatus.FAILED)
    assert told in (refused.error or "")
    sent = server.requests[1].json["messages"]
    assert sent[-1]["role"] == "tool" and told in sent[-1]["content"]


async def test_arguments_a_claude_answer_holds_as_nan_get_an_error_result(db_url: str) -> None:
    """The answer's own JSON is read leniently: a tool_use input holding NaN (which a
    server that writes JSON with Python's defaults sends) is held to what argument text
    is held to, not taken to the journal, where it ended the run."""
    async with model_server() as server:
        server.script(
            Reply(body=anthropic_message(None, [("toolu_1", "order", {"count": math.nan})])),
            Reply(body=anthropic_message("Sorry, I could not order.")),
        )
        provider = AnthropicMessages(
            "claude-loopback", base_url=server.base_url, api_key=KEY, max_tokens=256
        )
        app = App([Agent("buyer", provider, tools=[order])])
        async with Runtime.open(db_url, app, **FAST) as rt:
            run = await rt.wait(await rt.submit("buyer", "Order E-5"), timeout=20)
            steps = await rt.steps(run.id)

    assert (run.state, run.result) == (RunState.COMPLETED, "Sorry, I could not order."), run.error
    assert DONE == []
    assert "NaN is not a number JSON has" in (steps[1].error or "")


async def test_the_key_is_nowhere_in_logs_journal_errors_or_the_store(db_url: str) -> None:
    echo = f"Incorrect API key provided: {KEY}"
    async with model_server() as server:
        server.script(
            Reply(body=openai_completion(None, [("c1", "stock", {"sku": "F-6"})])),
            Reply(body=openai_completion("F-6 has 3.")),
            Reply(hang_up=True),
            Reply(401, openai_error(echo, "invalid_request_error", "invalid_api_key")),
        )
        app = app_on(server.base_url)
        with capture_logs() as logs:
            async with Runtime.open(db_url, app, **FAST) as rt:
                good = await rt.wait(await rt.submit("buyer", "Check F-6"), timeout=20)
                bad = await rt.wait(await rt.submit("buyer", "Check G-7"), timeout=20)
                journal = [*(await rt.steps(good.id)), *(await rt.steps(bad.id))]

    assert good.state is RunState.COMPLETED
    assert bad.failure_class is FailureClass.AUTH
    assert "***" in (bad.error or "")
    assert logs
    shown = [repr(logs), repr(journal), repr(good), repr(bad), repr(app.agent("buyer"))]
    shown.append(repr(app.agent("buyer").provider))
    assert all(KEY not in text for text in shown)
    database = Path(db_url.removeprefix("sqlite:///"))
    for path in database.parent.glob(f"{database.name}*"):
        assert KEY.encode() not in path.read_bytes(), path


THINKING = {"type": "thinking", "thinking": "Stock first, then decide.", "signature": "c2lnLTE="}
REDACTED = {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}
# What Anthropic's API answers when extended thinking is on and a conversation's last
# turn with tool calls does not begin with the thinking that led to them.
THINKING_MISSING = (
    "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks)."
)


def checks_thinking(answer: Reply) -> Script:
    """Answers as Anthropic's API does with thinking on: ``answer`` only when every
    assistant turn that called tools begins with the thinking it was given."""

    def check(request: Request) -> Reply:
        for message in request.json["messages"]:
            content = message["content"]
            calls = message["role"] == "assistant" and any(
                block["type"] == "tool_use" for block in content
            )
            if calls and content[:2] != [THINKING, REDACTED]:
                return Reply(400, anthropic_error("invalid_request_error", THINKING_MISSING))
        return answer

    return check


async def test_a_claude_run_with_extended_thinking_sends_its_thinking_back(db_url: str) -> None:
    first = anthropic_message(None, [("toolu_1", "stock", {"sku": "D-4"})])
    first["content"] = [THINKING, REDACTED, *first["content"]]
    async with model_server() as server:
        server.script(
            Reply(body=first),
            # After the tool's result: refused unless the turn went back whole. Then a
            # server error requeues the run, whose next attempt rebuilds the turn from
            # the journal and must send the same signed blocks.
            checks_thinking(Reply(529, anthropic_error("overloaded_error", "Overloaded"))),
            checks_thinking(Reply(body=anthropic_message("D-4 has 3."))),
        )
        provider = AnthropicMessages(
            "claude-loopback",
            base_url=server.base_url,
            api_key=KEY,
            max_tokens=2048,
            extra_body={"thinking": {"type": "enabled", "budget_tokens": 1024}},
        )
        app = App([Agent("buyer", provider, tools=[stock])])
        policy = RecoveryPolicy(backoff_base_seconds=0)
        async with Runtime.open(db_url, app, recovery=policy, **FAST) as rt:
            run = await rt.wait(await rt.submit("buyer", "Check D-4"), timeout=20)
            steps = await rt.steps(run.id)

    assert (run.state, run.result, run.requeues) == (RunState.COMPLETED, "D-4 has 3.", 1)
    assert DONE == [("stock", {"sku": "D-4"})]
    assert [request.json["messages"][1]["content"][:2] for request in server.requests[1:]] == [
        [THINKING, REDACTED]
    ] * 2
    assert steps[0].output["reasoning"] == [THINKING, REDACTED]
