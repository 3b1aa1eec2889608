"""Quick start: a few agent runs on the embedded SQLite store, one of them charging a card
and one refunding an order, which waits for a person's approval first.

``make run`` serves these agents from the daemon (approve the refund with
``leaseward approve RUN_ID``); ``make embedded`` runs this file, which approves it
itself. Each run's outcome and journal are printed at the end; run it twice and
the journal of the earlier runs is still in ./leaseward.db.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    RunState,
    Runtime,
    ScriptedProvider,
    StepInfo,
    ToolCall,
    ToolContext,
    ToolEffect,
    ToolError,
    tool,
)

STORE_URL = "sqlite:///leaseward.db"


@tool
async def lookup_order(ctx: ToolContext, order_id: str) -> dict[str, Any]:
    """Read an order from the shop's database."""
    return {"order_id": order_id, "total_cents": 4200, "status": "unpaid"}


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=10.0)
async def charge_card(ctx: ToolContext, order_id: str, amount_cents: int) -> dict[str, Any]:
    """Charge the customer's card. Runs at most once per call, whatever crashes."""
    if amount_cents <= 0:
        raise ToolError("the amount must be positive")
    # A real payment API would be given ctx.idempotency_key as its idempotency key.
    ctx.log.info("card.charged", order_id=order_id, amount_cents=amount_cents)
    return {"charge_id": f"ch_{ctx.idempotency_key[:12]}", "amount_cents": amount_cents}


@tool(effect=ToolEffect.IDEMPOTENT_WRITE)
async def mark_paid(ctx: ToolContext, order_id: str) -> str:
    """Set the order's status to paid (setting it twice changes nothing)."""
    return f"{order_id} is paid"


@tool(
    effect=ToolEffect.NON_IDEMPOTENT_WRITE,
    # A policy in code: refunds over 10.00 wait for a person; smaller ones just run.
    requires_approval=lambda arguments: arguments["amount_cents"] > 1000,
    approval_timeout_seconds=24 * 3600.0,
)
async def refund_order(ctx: ToolContext, order_id: str, amount_cents: int) -> dict[str, Any]:
    """Refund the customer. Runs once, and only after a person approved it."""
    ctx.log.info("order.refunded", order_id=order_id, amount_cents=amount_cents)
    return {"refund_id": f"re_{ctx.idempotency_key[:12]}", "amount_cents": amount_cents}


def refunder_turn(request: ProviderRequest) -> ProviderReply:
    """A stand-in for a model: refund the order, then say what came of it."""
    turn = sum(1 for m in request.messages if m.role is Role.ASSISTANT)
    order_id = next(str(m.content) for m in request.messages if m.role is Role.USER)
    if turn == 0:
        return ProviderReply(
            tool_calls=[ToolCall("refund_order", {"order_id": order_id, "amount_cents": 4200})]
        )
    outcome = next(m.content for m in reversed(request.messages) if m.role is Role.TOOL)
    return ProviderReply(text=f"Refund of order {order_id}: {outcome}")


def cashier_turn(request: ProviderRequest) -> ProviderReply:
    """A stand-in for a model: look the order up, charge it, mark it paid, answer."""
    turn = sum(1 for m in request.messages if m.role is Role.ASSISTANT)
    order_id = next(str(m.content) for m in request.messages if m.role is Role.USER)
    plan = [
        ProviderReply(tool_calls=[ToolCall("lookup_order", {"order_id": order_id})]),
        ProviderReply(
            tool_calls=[
                ToolCall("charge_card", {"order_id": order_id, "amount_cents": 4200}),
                ToolCall("mark_paid", {"order_id": order_id}),
            ]
        ),
        ProviderReply(text=f"Order {order_id} is charged and marked paid."),
    ]
    return plan[turn]


def build_app() -> App:
    cashier = Agent(
        "cashier",
        ScriptedProvider(cashier_turn),
        tools=[lookup_order, charge_card, mark_paid],
        instructions="Collect payment for the order you are given.",
    )
    greeter = Agent(
        "greeter",
        ScriptedProvider([ProviderReply(text="Hello! How can I help?")]),
    )
    confused = Agent(
        "confused",
        ScriptedProvider(
            [
                ProviderReply(tool_calls=[ToolCall("delete_everything", {})]),
                ProviderReply(text="That tool does not exist, so nothing was done."),
            ]
        ),
        tools=[lookup_order],
    )
    refunder = Agent(
        "refunder",
        ScriptedProvider(refunder_turn),
        tools=[refund_order],
        instructions="Refund the order you are given.",
    )
    return App([cashier, greeter, confused, refunder])


def show(steps: list[StepInfo]) -> None:
    for step in steps:
        what = step.tool if step.kind.value == "tool" else "provider"
        effect = step.effect.value if step.effect else "-"
        print(f"    #{step.seq} epoch {step.epoch} {what:<18} {effect:<21} {step.status.value}")


async def main() -> None:
    async with Runtime.open(STORE_URL, build_app(), concurrency=4) as rt:
        run_ids = [
            await rt.submit("cashier", "A-1"),
            await rt.submit("greeter", "hi"),
            await rt.submit("confused", "clean up"),
        ]
        interactive = await rt.run("cashier", "B-7")
        # The refund parks its run until someone decides: no worker is held meanwhile.
        refund = await rt.run("refunder", "C-3")
        print(f"run {refund.id} agent=refunder state={refund.state.value}")
        if refund.state is RunState.WAITING_FOR_APPROVAL:
            for request in await rt.requests(refund.id):
                print(f"    waits for approval: {request.tool} {request.arguments}")
            await rt.approve(refund.id, operator="quickstart", note="customer returned it")
        for run_id in [*run_ids, interactive.id, refund.id]:
            run = await rt.wait(run_id, timeout=30)
            print(f"run {run.id} agent={run.agent} mode={run.mode.value} state={run.state.value}")
            print(f"    result: {run.result!r}")
            show(await rt.steps(run.id))


if __name__ == "__main__":
    # leaseward logs nothing below WARNING unless asked: here its INFO events (claims,
    # steps, outcomes) go to stderr, beside the journals printed on stdout.
    logging.basicConfig(format="%(name)s %(message)s")
    logging.getLogger("leaseward").setLevel(logging.INFO)
    anyio.run(main)
