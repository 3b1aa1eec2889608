"""A tool's result reaches the journal and the model as pydantic encodes it, and a write that
ran is never reported to the model as failed, whatever it returned (G13)."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import uuid
from typing import Any

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

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
    ToolError,
    tool,
)
from leaseward.runtime.encoding import MAX_RESULT_BYTES, dump_json
from leaseward.runtime.machine import MAX_ERROR_CHARS
from leaseward.runtime.results import MAX_SUMMARY_REPR_CHARS
from tests.integration.support import Calls

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.05}
WHEN = datetime.datetime(2026, 12, 4, 10, 30, 15, tzinfo=datetime.UTC)


class Status(enum.Enum):
    SETTLED = "settled"


class Receipt(BaseModel):
    id: uuid.UUID
    amount: decimal.Decimal
    at: datetime.datetime


@dataclasses.dataclass
class Line:
    sku: str
    on: datetime.date


class Totals(TypedDict):
    total: decimal.Decimal
    tags: set[str]


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque charge ch_1>"


class Recorder:
    """Replies with one call of ``name`` on the first turn, then "done"; keeps the requests."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests: list[ProviderRequest] = []

    def __call__(self, request: ProviderRequest) -> ProviderReply:
        self.requests.append(request)
        if len(self.requests) == 1:
            return ProviderReply(tool_calls=[ToolCall(self.name, {}, "c1")])
        return ProviderReply(text="done")

    def answer(self) -> tuple[str, bool]:
        """What the model was told about the call, and whether as an error."""
        assert len(self.requests) == 2, self.requests
        last = self.requests[1].messages[-1]
        assert last.role is Role.TOOL and last.content is not None
        return last.content, last.is_error


async def run_one(store_url: str, charge: Any, recorder: Recorder) -> tuple[Any, Any]:
    app = App([Agent("payer", ScriptedProvider(recorder), tools=[charge])])
    async with Runtime.open(store_url, app, **FAST) as rt:
        run = await rt.wait(await rt.submit("payer", None), timeout=10)
        journal = await rt.steps(run.id)
    (row,) = [s for s in journal if s.kind is StepKind.TOOL]
    return run, row


async def test_a_write_returning_a_datetime_is_recorded_and_answered_as_json(
    store_url: str,
) -> None:
    calls = Calls()

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(ctx: ToolContext) -> dict[str, Any]:
        calls.record(ctx)
        return {"when": WHEN, "amount": decimal.Decimal("12.50"), "tags": {"card"}}

    recorder = Recorder("charge")
    run, row = await run_one(store_url, charge, recorder)

    assert len(calls) == 1
    expected = {"when": "2026-12-04T10:30:15Z", "amount": "12.50", "tags": ["card"]}
    assert (row.status, row.output, row.error) == (StepStatus.SUCCEEDED, expected, None)
    content, is_error = recorder.answer()
    assert (json.loads(content), is_error) == (expected, False)
    assert (run.state, run.result) == (RunState.COMPLETED, "done")


async def test_a_result_is_encoded_through_the_return_annotation(store_url: str) -> None:
    receipt_id = uuid.UUID("12345678-1234-5678-1234-567812345678")

    @tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    async def settle(ctx: ToolContext) -> tuple[Receipt, Line, Totals, Status]:
        return (
            Receipt(id=receipt_id, amount=decimal.Decimal("3.10"), at=WHEN),
            Line("A-1", datetime.date(2026, 12, 4)),
            Totals(total=decimal.Decimal("3.10"), tags={"x"}),
            Status.SETTLED,
        )

    recorder = Recorder("settle")
    _, row = await run_one(store_url, settle, recorder)

    expected = [
        {"id": str(receipt_id), "amount": "3.10", "at": "2026-12-04T10:30:15Z"},
        {"sku": "A-1", "on": "2026-12-04"},
        {"total": "3.10", "tags": ["x"]},
        "settled",
    ]
    assert (row.status, row.output) == (StepStatus.SUCCEEDED, expected)
    assert json.loads(recorder.answer()[0]) == expected


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        pytest.param(Opaque(), "is not a JSON value", id="object"),
        pytest.param({"score": float("nan")}, "is not a JSON value", id="nan"),
        pytest.param(
            "r" * (MAX_RESULT_BYTES + 1), f"over the {MAX_RESULT_BYTES}-byte limit", id="big"
        ),
    ],
)
async def test_a_write_whose_result_cannot_be_recorded_is_journaled_applied_and_told_success(
    store_url: str, result: Any, problem: str
) -> None:
    calls = Calls()

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(ctx: ToolContext) -> Any:
        calls.record(ctx)
        return result

    recorder = Recorder("charge")
    run, row = await run_one(store_url, charge, recorder)

    assert len(calls) == 1
    assert (row.status, row.error) == (StepStatus.SUCCEEDED, None)
    summary = row.output
    assert summary["status"] == "succeeded"
    assert problem in summary["note"]
    assert summary["result_type"] == f"{type(result).__module__}.{type(result).__qualname__}"
    assert len(summary["result_repr"]) <= MAX_SUMMARY_REPR_CHARS
    if isinstance(result, Opaque):
        assert summary["result_repr"] == "<Opaque charge ch_1>"
    content, is_error = recorder.answer()
    assert (json.loads(content), is_error) == (summary, False)
    assert "error" not in json.loads(content)
    assert (run.state, run.result) == (RunState.COMPLETED, "done")


@pytest.mark.parametrize("effect", [ToolEffect.READ_ONLY, ToolEffect.NON_IDEMPOTENT_WRITE])
async def test_a_tool_error_longer_than_a_result_is_told_as_far_as_a_result_holds(
    store_url: str, effect: ToolEffect
) -> None:
    # Two bytes of JSON a character: a cut by characters alone would not fit.
    message = "no such order: " + "é" * MAX_RESULT_BYTES

    @tool(effect=effect)
    async def refund(ctx: ToolContext) -> str:
        raise ToolError(message)

    recorder = Recorder("refund")
    run, row = await run_one(store_url, refund, recorder)

    assert (run.state, run.result) == (RunState.COMPLETED, "done")
    assert row.status is StepStatus.FAILED
    # The row keeps the start of the tool's words, as for any error, not a note on its size.
    assert row.error == message[: MAX_ERROR_CHARS - 3] + "..."
    content, is_error = recorder.answer()
    told = json.loads(content)["error"]
    assert is_error
    assert row.output == {"error": told}
    assert told.endswith("...") and message.startswith(told.removesuffix("..."))
    assert len(dump_json(row.output).encode()) <= MAX_RESULT_BYTES
    assert len(told) > MAX_RESULT_BYTES // 2 - 100
