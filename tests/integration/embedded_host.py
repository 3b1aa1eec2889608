"""An application embedding leaseward, for the logging tests: it runs a few runs and
prints nothing of its own.

Usage: embedded_host.py STORE_URL SETUP
SETUP is what the application configures before it opens the Runtime:

* ``nothing``: neither ``logging`` nor structlog;
* ``basic``: ``logging.basicConfig(level=logging.DEBUG)`` on stderr, one record a line;
* ``leaseward-info``: a handler on the ``leaseward`` logger at INFO, nothing else.

Every run completes, one write tool call each, except that ``FAIL=1`` adds an
interactive run whose tool raises, so that leaseward has a WARNING to log.
"""

from __future__ import annotations

import logging
import os
import sys

import anyio
import structlog

from leaseward import (
    Agent,
    App,
    ProviderReply,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)

RUNS = 5
RECORD_FORMAT = "%(levelname)s %(name)s %(message)s"


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def charge(ctx: ToolContext, amount: int) -> int:
    ctx.log.info("card.charged", amount=amount)
    return amount


@tool
async def broken(ctx: ToolContext) -> None:
    raise RuntimeError("the tool is broken")


def build_app() -> App:
    def provider(name: str, arguments: dict[str, int]) -> ScriptedProvider:
        return ScriptedProvider(
            [
                ProviderReply(tool_calls=[ToolCall(name, arguments, "call-1")]),
                ProviderReply(text="done"),
            ]
        )

    return App(
        [
            Agent("payer", provider("charge", {"amount": 5}), tools=[charge]),
            Agent("breaker", provider("broken", {}), tools=[broken]),
        ]
    )


async def main(url: str) -> None:
    # The host's own context, bound before leaseward starts its tasks, joins its events.
    structlog.contextvars.bind_contextvars(host_request="req-7")
    async with Runtime.open(url, build_app(), poll_interval_seconds=0.02) as rt:
        ids = [await rt.submit("payer", i) for i in range(RUNS)]
        runs = [await rt.wait(run_id, timeout=30) for run_id in ids]
        if os.environ.get("FAIL") == "1":
            failed = await rt.run("breaker", None)
            if failed.state is not RunState.FAILED:
                raise SystemExit(f"the breaker run ended {failed.state.value}")
    if any(run.state is not RunState.COMPLETED for run in runs):
        raise SystemExit(f"not every run completed: {[run.state.value for run in runs]}")


if __name__ == "__main__":
    setup = sys.argv[2]
    if setup == "basic":
        logging.basicConfig(level=logging.DEBUG, format=RECORD_FORMAT)
    elif setup == "leaseward-info":
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(RECORD_FORMAT))
        logging.getLogger("leaseward").addHandler(handler)
        logging.getLogger("leaseward").setLevel(logging.INFO)
    elif setup != "nothing":
        raise SystemExit(f"unknown setup {setup!r}")
    anyio.run(main, sys.argv[1])
