"""A worker process for the crash tests: it embeds the runtime and is SIGKILLed mid-step.

Run as ``python crash_worker.py <db_url> <scenario> <marker_dir> [run_id]``. It opens
a Runtime on the SQLite file, submits one run of the scenario's agent (or, given a
run id, lets its supervisor pick that run up), prints ``run_id=<id>`` on stdout and
waits. Every tool execution appends a JSON line to ``<marker_dir>/calls.jsonl`` and
every provider turn asked to ``<marker_dir>/provider.jsonl``, each flushed and
fsynced, so the parent can count what ran in which process. Then the worker hangs
where the scenario says, for the parent to kill it:

* ``non_idempotent``, ``idempotent``, ``read_only``: inside the tool call, whose
  effect is ``NON_IDEMPOTENT_WRITE``, ``IDEMPOTENT_WRITE`` or ``READ_ONLY``;
* ``after_tool``, ``after_read``: the non-idempotent (or read-only) tool completes,
  and the worker hangs inside the second provider turn.

The test process builds the same agents with :func:`build_app` and ``crash=False``:
the same names, effects and timeouts, but nothing hangs.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)

AGENT = "crasher"
CALL_ID = "call-1"
CALLS_FILE = "calls.jsonl"
PROVIDER_FILE = "provider.jsonl"
LOG_FILE = "worker.log"
# Far longer than the lease, and than the tests wait for recovery: a killed worker's
# lease, renewed in the background while a call runs, expires a lease after the
# kill, never a call's timeout after it.
TOOL_TIMEOUT_SECONDS = 60.0
PROVIDER_TIMEOUT_SECONDS = 60.0
LEASE_SECONDS = 1.0
DEADLINE_MARGIN_SECONDS = 0.2

SCENARIOS: dict[str, tuple[str, ToolEffect]] = {
    "non_idempotent": ("charge", ToolEffect.NON_IDEMPOTENT_WRITE),
    "idempotent": ("charge", ToolEffect.IDEMPOTENT_WRITE),
    "read_only": ("lookup", ToolEffect.READ_ONLY),
    "after_tool": ("charge", ToolEffect.NON_IDEMPOTENT_WRITE),
    "after_read": ("lookup", ToolEffect.READ_ONLY),
}
AFTER_TOOL = ("after_tool", "after_read")


def append_line(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, durable before this returns: the writer may be killed right after."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The complete lines written so far (a line being written is not yet one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


class LoggingProvider:
    """Logs each turn it is asked for, then answers it from the script, or hangs."""

    def __init__(self, inner: ScriptedProvider, log_path: Path, hang_on_turn: int | None) -> None:
        self._inner = inner
        self._log_path = log_path
        self._hang_on_turn = hang_on_turn
        self.timeout_seconds = PROVIDER_TIMEOUT_SECONDS

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        turn = sum(1 for message in request.messages if message.role is Role.ASSISTANT)
        append_line(self._log_path, {"run_id": request.run_id, "turn": turn, "pid": os.getpid()})
        if turn == self._hang_on_turn:
            await anyio.sleep_forever()
        return await self._inner.complete(request)


def first_reply(scenario: str) -> ProviderReply:
    """The scenario's first provider turn: one call of its tool."""
    return ProviderReply(tool_calls=[ToolCall(SCENARIOS[scenario][0], {"amount": 5}, CALL_ID)])


def build_app(scenario: str, marker_dir: Path, *, crash: bool, tool_seconds: float = 0.0) -> App:
    """The scenario's agent; with ``crash`` it hangs where the scenario kills the worker.

    Without ``crash`` its tool takes ``tool_seconds`` and returns.
    """
    tool_name, effect = SCENARIOS[scenario]
    calls_path = marker_dir / CALLS_FILE
    hang_in_tool = crash and scenario not in AFTER_TOOL

    @tool(name=tool_name, effect=effect, timeout_seconds=TOOL_TIMEOUT_SECONDS)
    async def act(ctx: ToolContext, amount: int) -> dict[str, int]:
        append_line(
            calls_path,
            {
                "run_id": ctx.run_id,
                "epoch": ctx.epoch,
                "call_id": ctx.call_id,
                "idempotency_key": ctx.idempotency_key,
                "pid": os.getpid(),
                "amount": amount,
            },
        )
        if hang_in_tool:
            await anyio.sleep_forever()
        await anyio.sleep(tool_seconds)
        return {"applied": amount}

    script = ScriptedProvider([first_reply(scenario), ProviderReply(text="done")])
    hang_on_turn = 1 if crash and scenario in AFTER_TOOL else None
    provider = LoggingProvider(script, marker_dir / PROVIDER_FILE, hang_on_turn)
    return App([Agent(AGENT, provider, tools=[act])])


async def main(db_url: str, scenario: str, marker_dir: Path, run_id: str | None) -> None:
    app = build_app(scenario, marker_dir, crash=True)
    async with Runtime.open(
        db_url,
        app,
        lease_seconds=LEASE_SECONDS,
        reap_interval_seconds=0.05,
        poll_interval_seconds=0.02,
        deadline_margin_seconds=DEADLINE_MARGIN_SECONDS,
        worker_id=f"crash-worker:{os.getpid()}",
    ) as rt:
        if run_id is None:
            run_id = await rt.submit(AGENT, {"order": 1})
        print(f"run_id={run_id}", flush=True)
        # The parent kills this process; the run never finishes here.
        await rt.wait(run_id, timeout=60)


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit("usage: crash_worker.py <db_url> <scenario> <marker_dir> [run_id]")
    directory = Path(sys.argv[3])
    # Logs go to a file, never to the stdout pipe the parent reads the run id from.
    log_file = (directory / LOG_FILE).open("a", encoding="utf-8")
    logging.basicConfig(stream=log_file, format="%(levelname)s %(name)s %(message)s")
    logging.getLogger("leaseward").setLevel(logging.DEBUG)
    anyio.run(
        main, sys.argv[1], sys.argv[2], directory, sys.argv[4] if len(sys.argv) == 5 else None
    )
