"""A model that gets a tool's arguments wrong is told where, as the call's error result, and
tries again; the tool runs once, with the values its annotations ask for, and the journal
keeps the arguments as the model sent them."""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

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
    ToolEffect,
    tool,
)
from leaseward.runtime.encoding import MAX_ARGUMENTS_DEPTH, MAX_JSON_DEPTH

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.05}


class Currency(enum.Enum):
    EUR = "EUR"
    USD = "USD"


class Line(BaseModel):
    sku: str
    quantity: int = Field(default=1, ge=1)


@dataclasses.dataclass
class Card:
    token: str
    holder: str | None = None


BAD = {
    "lines": [{"sku": "A-1"}, {"sku": "B-2", "quantity": 0}, {"quantity": 2}],
    "card": {"token": 4242},
    "currency": "GBP",
}
GOOD = {
    "lines": [{"sku": "A-1"}, {"sku": "B-2", "quantity": 2}],
    "card": {"token": "tok_1", "holder": None},
    "currency": "EUR",
    # What a model in OpenAI strict mode sends for an argument it leaves out.
    "memo": None,
}


class Model:
    """Sends BAD, then GOOD once it has read the error, then finishes."""

    def __init__(self) -> None:
        self.answers: list[str] = []

    def __call__(self, request: ProviderRequest) -> ProviderReply:
        turn = sum(1 for m in request.messages if m.role is Role.ASSISTANT)
        if turn > 0:
            last = request.messages[-1]
            assert last.role is Role.TOOL and last.content is not None
            self.answers.append(last.content)
        if turn == 0:
            return ProviderReply(tool_calls=[ToolCall("charge", BAD, "c1")])
        if turn == 1:
            return ProviderReply(tool_calls=[ToolCall("charge", GOOD, "c2")])
        return ProviderReply(text="done")


async def test_bad_arguments_are_answered_with_their_paths_then_good_ones_run_once(
    db_url: str,
) -> None:
    received: list[dict[str, Any]] = []

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(
        ctx: ToolContext,
        lines: list[Line],
        card: Card,
        currency: Currency,
        memo: Annotated[str, Field(description="Shown on the statement")] = "order",
    ) -> dict[str, Any]:
        received.append({"lines": lines, "card": card, "currency": currency, "memo": memo})
        return {"charged": sum(line.quantity for line in lines), "currency": currency.value}

    model = Model()
    app = App([Agent("shop", ScriptedProvider(model), tools=[charge])])
    async with Runtime.open(db_url, app, **FAST) as rt:
        run = await rt.wait(await rt.submit("shop", None), timeout=10)
        journal = await rt.steps(run.id)

    assert (run.state, run.result) == (RunState.COMPLETED, "done")
    error, result = model.answers
    assert error == (
        '{"error": "invalid arguments for charge: '
        "lines[1].quantity: Input should be greater than or equal to 1; "
        "lines[2].sku: Field required; "
        'card.token: Input should be a valid string; and 1 more"}'
    )
    assert result == '{"charged": 3, "currency": "EUR"}'
    assert received == [
        {
            "lines": [Line(sku="A-1"), Line(sku="B-2", quantity=2)],
            "card": Card(token="tok_1"),
            "currency": Currency.EUR,
            "memo": "order",
        }
    ]
    calls = [s for s in journal if s.kind is StepKind.TOOL]
    assert [(s.call_id, s.status) for s in calls] == [
        ("c1", StepStatus.FAILED),
        ("c2", StepStatus.SUCCEEDED),
    ]
    # The journal holds what the model sent, not what the tool was given.
    assert [s.arguments for s in calls] == [BAD, GOOD]
    assert calls[0].error is not None and "lines[2].sku: Field required" in calls[0].error


class Search:
    """A class-based tool with an explicit Draft 2020-12 schema."""

    name = "search"
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "range": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}]},
            "limit": {"type": "integer"},
        },
        "required": ["query"],
    }

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any:
        self.received.append(arguments)
        return ["hit"]


async def test_an_explicit_schema_is_applied_and_its_errors_name_the_path(db_url: str) -> None:
    search = Search()
    provider = ScriptedProvider(
        [
            ProviderReply(tool_calls=[ToolCall("search", {"query": "", "range": [1, "9"]}, "c1")]),
            ProviderReply(
                tool_calls=[
                    ToolCall("search", {"query": "q", "range": [1, 9], "limit": None}, "c2")
                ]
            ),
            ProviderReply(text="done"),
        ]
    )
    app = App([Agent("finder", provider, tools=[search])])
    async with Runtime.open(db_url, app, **FAST) as rt:
        run = await rt.wait(await rt.submit("finder", None), timeout=10)
        journal = await rt.steps(run.id)

    assert run.state is RunState.COMPLETED
    first, second = [s for s in journal if s.kind is StepKind.TOOL]
    assert first.status is StepStatus.FAILED
    assert first.error == (
        "invalid arguments for search: query: '' should be non-empty; "
        "range[1]: '9' is not of type 'integer'"
    )
    assert second.status is StepStatus.SUCCEEDED
    assert search.received == [{"query": "q", "range": [1, 9]}]


def nested_arguments(depth: int) -> dict[str, Any]:
    """A call's arguments ``depth`` levels deep: the object, then lists inside it."""
    value: Any = "leaf"
    for _ in range(depth - 1):
        value = [value]
    return {"x": value}


@pytest.mark.parametrize("depth", [MAX_ARGUMENTS_DEPTH + 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1])
async def test_arguments_nested_too_deep_are_answered_to_the_model_not_the_runs_end(
    db_url: str, depth: int
) -> None:
    # Deeper than the journal can hold inside the reply that asked for them: the call is
    # refused as one whose arguments could not be read, whatever the provider built.
    executed: list[Any] = []

    @tool
    async def echo(ctx: ToolContext, x: Any) -> str:
        executed.append(x)
        return "echoed"

    model = ScriptedProvider(
        [
            ProviderReply(tool_calls=[ToolCall("echo", nested_arguments(depth), "c1")]),
            ProviderReply(text="done"),
        ]
    )
    app = App([Agent("deep", model, tools=[echo])])
    async with Runtime.open(db_url, app, **FAST) as rt:
        run = await rt.wait(await rt.submit("deep", None), timeout=10)
        journal = await rt.steps(run.id)

    assert (run.state, run.result) == (RunState.COMPLETED, "done"), run.error
    assert executed == []
    [call] = [s for s in journal if s.kind is StepKind.TOOL]
    assert call.status is StepStatus.FAILED
    assert call.error == (
        f"the arguments of echo could not be read: "
        f"they are nested more than {MAX_ARGUMENTS_DEPTH} levels deep"
    )


async def test_arguments_as_deep_as_the_journal_holds_are_given_to_the_tool(db_url: str) -> None:
    executed: list[Any] = []

    @tool
    async def echo(ctx: ToolContext, x: Any) -> str:
        executed.append(x)
        return "echoed"

    arguments = nested_arguments(MAX_ARGUMENTS_DEPTH)
    model = ScriptedProvider(
        [ProviderReply(tool_calls=[ToolCall("echo", arguments, "c1")]), ProviderReply(text="done")]
    )
    app = App([Agent("deep", model, tools=[echo])])
    async with Runtime.open(db_url, app, **FAST) as rt:
        run = await rt.wait(await rt.submit("deep", None), timeout=10)

    assert (run.state, run.result) == (RunState.COMPLETED, "done"), run.error
    assert executed == [arguments["x"]]
