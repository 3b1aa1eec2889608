"""The app the acceptance tests serve with ``leaseward daemon --app demo_app:app``.

The daemon imports this module from its working directory (tests/acceptance), so
everything it needs to know comes from environment variables of that daemon process:

* ``DEMO_CALLS_FILE``: every tool execution appends one JSON line here (run_id,
  epoch, call_id, tool, pid, ...), flushed and fsynced before the tool goes on, so
  a test can count what ran in which process even when that process is SIGKILLed.
* ``DEMO_PROVIDER_FILE``: every provider turn asked appends one JSON line here.
* ``DEMO_TOOL_SLEEP``: seconds ``charge`` sleeps after writing its line (default 0),
  so that a test can kill or signal a daemon in the middle of the call.
* ``DEMO_TOOL_TIMEOUT``: ``charge``'s timeout (default 2 s). The runtime extends the
  lease to cover timeout + twice its deadline margin (5 s) before the call, so this
  bounds how long a SIGKILLed daemon's lease outlives it.
* ``DEMO_NAP_SECONDS`` / ``DEMO_NAP_TIMEOUT``: how long each step of ``slow`` sleeps
  (default 0.3 s) and the timeout of that tool (default 2 s).

Agents:

* ``payer``: one NON_IDEMPOTENT_WRITE call of ``charge``, then the answer ``done``.
* ``slow``: ``SLOW_STEPS`` READ_ONLY ``nap`` calls, one per provider turn, then
  ``rested``. Each step ends at a step boundary, where a drain stops the run.
* ``greeter``: answers at once, no tools.
* ``approver``: one call of ``transfer``, a NON_IDEMPOTENT_WRITE that requires
  approval, then answers with what the call returned (or the rejection).
* ``late_approver``: as ``approver``, but an undecided request expires after
  ``APPROVAL_TIMEOUT_SECONDS``.
* ``asker``: asks a person ``Which colour?`` (``ask_human``), then answers with the reply.
* ``confused``: asks for ``delete_everything``, a tool it does not have, with long
  arguments, then answers ``nothing was done``.
* ``echoer``: calls ``echo`` with the run's input as its text, then answers with what
  ``echo`` returned: whatever the input holds reaches the arguments, the tool's result
  and the run's result (the console's tests put markup and script there).
"""

from __future__ import annotations

import json
import os
from typing import Any

import anyio

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    ask_human,
    tool,
)

SLOW_STEPS = 5
CHARGE_CALL_ID = "charge-1"
CONFUSED_ARGUMENTS = {"path": "/", "why": "tidy " * 60}
PROVIDER_TIMEOUT_SECONDS = 2.0
TOOL_TIMEOUT_SECONDS = float(os.environ.get("DEMO_TOOL_TIMEOUT", "2"))
NAP_TIMEOUT_SECONDS = float(os.environ.get("DEMO_NAP_TIMEOUT", "2"))
APPROVAL_TIMEOUT_SECONDS = 1.0

# A module attribute that is not an App, for the `--app demo_app:NOT_AN_APP` test.
NOT_AN_APP = "just a string"
NOT_AN_APP_EITHER = 42


async def build_app_later() -> App:
    """An async builder, which ``--app`` cannot await: for ``--app demo_app:build_app_later``."""
    return build_app()


def _append(variable: str, record: dict[str, Any]) -> None:
    """One JSON line, durable before this returns: the process may be killed right after."""
    path = os.environ.get(variable)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({**record, "pid": os.getpid()}) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _turn(request: ProviderRequest) -> int:
    return sum(1 for message in request.messages if message.role is Role.ASSISTANT)


class LoggingProvider(ScriptedProvider):
    """A scripted provider that logs every turn it is asked for."""

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        _append(
            "DEMO_PROVIDER_FILE",
            {"run_id": request.run_id, "agent": request.agent, "turn": _turn(request)},
        )
        return await super().complete(request)


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=TOOL_TIMEOUT_SECONDS)
async def charge(ctx: ToolContext, amount_cents: int) -> dict[str, Any]:
    """Charge a card: must run at most once per call, whatever crashes."""
    _append(
        "DEMO_CALLS_FILE",
        {
            "tool": "charge",
            "run_id": ctx.run_id,
            "epoch": ctx.epoch,
            "call_id": ctx.call_id,
            "idempotency_key": ctx.idempotency_key,
            "amount_cents": amount_cents,
        },
    )
    await anyio.sleep(float(os.environ.get("DEMO_TOOL_SLEEP", "0")))
    return {"charged_cents": amount_cents}


@tool(timeout_seconds=NAP_TIMEOUT_SECONDS)
async def nap(ctx: ToolContext, step: int) -> str:
    """A read-only step that takes a while."""
    _append(
        "DEMO_CALLS_FILE",
        {"tool": "nap", "run_id": ctx.run_id, "epoch": ctx.epoch, "step": step},
    )
    await anyio.sleep(float(os.environ.get("DEMO_NAP_SECONDS", "0.3")))
    return f"rested {step}"


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
async def transfer(ctx: ToolContext, amount_cents: int, to: str) -> dict[str, Any]:
    """Send money: a person approves each call first."""
    _append(
        "DEMO_CALLS_FILE",
        {
            "tool": "transfer",
            "run_id": ctx.run_id,
            "epoch": ctx.epoch,
            "call_id": ctx.call_id,
            "amount_cents": amount_cents,
        },
    )
    return {"sent_cents": amount_cents, "to": to}


@tool
async def echo(ctx: ToolContext, text: str) -> dict[str, str]:
    """Return the text as given."""
    return {"echoed": text}


def _echo_input_turn(request: ProviderRequest) -> ProviderReply:
    if _turn(request) == 0:
        given = next(str(m.content) for m in request.messages if m.role is Role.USER)
        return ProviderReply(tool_calls=[ToolCall("echo", {"text": given}, "echo-1")])
    return _answer_with_tool_output(request)


def _answer_with_tool_output(request: ProviderRequest) -> ProviderReply:
    return ProviderReply(
        text=next(str(m.content) for m in reversed(request.messages) if m.role is Role.TOOL)
    )


def _payer_turn(request: ProviderRequest) -> ProviderReply:
    if _turn(request) == 0:
        return ProviderReply(tool_calls=[ToolCall("charge", {"amount_cents": 500}, CHARGE_CALL_ID)])
    return ProviderReply(text="done")


def _slow_turn(request: ProviderRequest) -> ProviderReply:
    turn = _turn(request)
    if turn < SLOW_STEPS:
        return ProviderReply(tool_calls=[ToolCall("nap", {"step": turn}, f"nap-{turn}")])
    return ProviderReply(text="rested")


def _confused_turn(request: ProviderRequest) -> ProviderReply:
    if _turn(request) == 0:
        return ProviderReply(tool_calls=[ToolCall("delete_everything", CONFUSED_ARGUMENTS, "rm-1")])
    return ProviderReply(text="nothing was done")


def build_app() -> App:
    return App(
        [
            Agent(
                "payer",
                LoggingProvider(_payer_turn, timeout_seconds=PROVIDER_TIMEOUT_SECONDS),
                tools=[charge],
            ),
            Agent(
                "slow",
                LoggingProvider(_slow_turn, timeout_seconds=PROVIDER_TIMEOUT_SECONDS),
                tools=[nap],
                max_steps=SLOW_STEPS + 1,
            ),
            Agent(
                "confused",
                LoggingProvider(_confused_turn, timeout_seconds=PROVIDER_TIMEOUT_SECONDS),
                tools=[nap],
            ),
            Agent(
                "approver",
                LoggingProvider(
                    [
                        ProviderReply(
                            tool_calls=[
                                ToolCall(
                                    "transfer", {"amount_cents": 900, "to": "ACME"}, "transfer-1"
                                )
                            ]
                        ),
                        _answer_with_tool_output,
                    ],
                    timeout_seconds=PROVIDER_TIMEOUT_SECONDS,
                ),
                tools=[transfer],
            ),
            Agent(
                "late_approver",
                LoggingProvider(
                    [
                        ProviderReply(
                            tool_calls=[
                                ToolCall("transfer", {"amount_cents": 70, "to": "ACME"}, "late-1")
                            ]
                        ),
                        _answer_with_tool_output,
                    ],
                    timeout_seconds=PROVIDER_TIMEOUT_SECONDS,
                ),
                tools=[transfer],
                approval_timeout_seconds=APPROVAL_TIMEOUT_SECONDS,
            ),
            Agent(
                "asker",
                LoggingProvider(
                    [
                        ProviderReply(
                            tool_calls=[ToolCall("ask_human", {"question": "Which colour?"}, "q-1")]
                        ),
                        _answer_with_tool_output,
                    ],
                    timeout_seconds=PROVIDER_TIMEOUT_SECONDS,
                ),
                tools=[ask_human],
            ),
            Agent(
                "echoer",
                LoggingProvider(_echo_input_turn, timeout_seconds=PROVIDER_TIMEOUT_SECONDS),
                tools=[echo],
            ),
            Agent(
                "greeter",
                LoggingProvider(
                    [ProviderReply(text="hello")], timeout_seconds=PROVIDER_TIMEOUT_SECONDS
                ),
            ),
        ]
    )


app = build_app()
