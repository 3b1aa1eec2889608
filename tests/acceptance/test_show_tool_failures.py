"""`leaseward show` of a run whose tool raised or timed out: the call's row says what
happened, with the arguments it was given, and an open write says how to resolve it."""

from __future__ import annotations

import shlex
from typing import Any

import anyio

from leaseward import (
    Agent,
    App,
    ProviderReply,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from tests.acceptance.acceptance_support import leaseward, ok, show

WAIT_SECONDS = 20.0


@tool(effect=ToolEffect.READ_ONLY)
async def divide(ctx: ToolContext, numerator: int, denominator: int) -> float:
    return numerator / denominator


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=0.2)
async def charge(ctx: ToolContext, amount: int) -> int:
    await anyio.sleep(WAIT_SECONDS)
    return amount


async def _run(url: str, tool_: Any, arguments: dict[str, Any]) -> str:
    provider = ScriptedProvider(
        [ProviderReply(tool_calls=[ToolCall(tool_.name, arguments, "call-1")])]
    )
    app = App([Agent("worker", provider, tools=[tool_])])
    async with Runtime.open(url, app, poll_interval_seconds=0.02) as rt:
        run = await rt.wait(await rt.submit("worker", "go"), timeout=WAIT_SECONDS)
    return run.id


def test_show_prints_what_a_read_raised_and_its_arguments(url: str) -> None:
    run_id = anyio.run(_run, url, divide, {"numerator": 1, "denominator": 0})

    text = ok("show", run_id, "--store", url).stdout
    assert 'arguments: {"numerator": 1, "denominator": 0}' in text
    assert "error: ZeroDivisionError: division by zero" in text
    assert show(url, run_id)["error"] == "ZeroDivisionError: division by zero"


def test_show_prints_the_redrive_of_a_run_dead_lettered_not_retryable_and_it_works(
    url: str,
) -> None:
    run_id = anyio.run(_run, url, divide, {"numerator": 1, "denominator": 0})
    assert (show(url, run_id)["state"], show(url, run_id)["reason"]) == (
        "dead_lettered",
        "not_retryable",
    )

    text = ok("show", run_id, "--store", url).stdout
    printed = [line.strip() for line in text.splitlines() if "leaseward redrive" in line]
    assert printed == [f"leaseward redrive {run_id} --store {url}"]
    redriven = leaseward(*shlex.split(printed[0])[1:])
    assert redriven.returncode == 0, redriven.stderr
    assert show(url, run_id)["state"] == "queued"


def test_show_prints_a_timed_out_write_as_open_with_its_timeout(url: str) -> None:
    run_id = anyio.run(_run, url, charge, {"amount": 5})

    shown = show(url, run_id)
    words = "charge did not return within 0.2 s; it may have applied"
    assert (shown["reason"], shown["failure_class"], shown["error"]) == (
        "interrupted_write",
        "timeout",
        words,
    )
    text = ok("show", run_id, "--store", url).stdout
    assert f"error: {words}" in text
    assert "call call-1 of charge (step 1) was interrupted: nobody knows" in text
    assert f"leaseward resolve {run_id} --applied --step 1 --store {url}" in text
