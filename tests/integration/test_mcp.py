"""Tools from real MCP servers (tests/integration/mcp_server.py, over stdio and over
Streamable HTTP): effects decided by the code, the decision journaled with each call
and trusted on resume over what the server says now, the idempotency key and the
fencing token in the request's ``_meta``, and each failure classified."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from leaseward import (
    Agent,
    App,
    ConfigurationError,
    ProviderReply,
    ProviderRequest,
    Reason,
    RecoveryPolicy,
    Role,
    RunState,
    Runtime,
    ScriptedProvider,
    StepInfo,
    StepStatus,
    ToolCall,
    ToolEffect,
    tool,
)
from leaseward.mcp import (
    DEFAULT_CONNECT_TIMEOUT_SECONDS,
    FENCING_TOKEN_META,
    IDEMPOTENCY_KEY_META,
    MCPServer,
)
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import StepKind
from leaseward.runtime.machine import MAX_ERROR_CHARS
from leaseward.runtime.tool_sources import DecidedBy
from leaseward.storage import open_store
from tests.integration.mcp_server import ledger_lines
from tests.integration.support import capture_logs, ghost_claims, provider_step, until
from tests.integration.tracing_support import in_memory_spans

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
FAST: dict[str, Any] = {
    "poll_interval_seconds": 0.02,
    "reap_interval_seconds": 0.05,
    "lease_seconds": 2.0,
    "recovery": RecoveryPolicy(backoff_base_seconds=0.05, backoff_cap_seconds=0.2),
}
# Generous: a loaded machine starts Python processes with the SDK slowly.
WAIT_SECONDS = 60.0
SERVER_ARGS = ["-m", "tests.integration.mcp_server"]

EACH_KIND = (
    ToolCall("lookup", {"city": "Oslo"}, "c-lookup"),
    ToolCall("set_flag", {"name": "paid", "value": True}, "c-flag"),
    ToolCall("delete_record", {"record_id": "r-9"}, "c-delete"),
    ToolCall("create_invoice", {"amount": 7}, "c-invoice"),
    ToolCall("refuse", {"reason": "closed"}, "c-refuse"),
)
INVOICE = ProviderReply(tool_calls=[ToolCall("create_invoice", {"amount": 5}, "call-1")])


def stdio_server(ledger: Path, env: dict[str, str] | None = None) -> MCPServer:
    """The test server over stdio, trusted, with ``env`` changing what it lists."""
    return MCPServer.stdio(
        "billing",
        sys.executable,
        [*SERVER_ARGS, "stdio"],
        cwd=str(ROOT),
        env={"LEDGER": str(ledger), **(env or {})},
        trusted=True,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def http_process(
    ledger: Path, port: int, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """The test server on 127.0.0.1:``port``, SIGKILLed when the block ends."""
    process = subprocess.Popen(
        [sys.executable, *SERVER_ARGS, "http", str(port)],
        cwd=ROOT,
        env={**os.environ, "LEDGER": str(ledger), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with anyio.from_thread.start_blocking_portal() as portal:
            portal.call(until, lambda: _accepts(port), WAIT_SECONDS)
        yield process
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def calling(*calls: ToolCall) -> ScriptedProvider:
    return ScriptedProvider(
        [*(ProviderReply(tool_calls=[call]) for call in calls), ProviderReply(text="done")]
    )


def tool_rows(journal: list[StepInfo]) -> dict[str, StepInfo]:
    return {step.tool: step for step in journal if step.kind is StepKind.TOOL and step.tool}


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
async def test_effects_come_from_the_code_then_only_a_trusted_servers_annotations(
    db_url: str, tmp_path: Path, trusted: bool
) -> None:
    server = MCPServer.stdio(
        "billing",
        sys.executable,
        [*SERVER_ARGS, "stdio"],
        cwd=str(ROOT),
        env={"LEDGER": str(tmp_path / "ledger")},
        trusted=trusted,
        effects={"create_invoice": ToolEffect.IDEMPOTENT_WRITE},
    )
    agent = Agent("clerk", calling(), tools=[server])
    async with Runtime.open(db_url, App([agent]), **FAST):
        listed = {
            bound.name: (bound.effect, json.loads(bound.source_json or "null"))
            for bound in agent.tools
        }
    by_annotations = {
        "lookup": ToolEffect.READ_ONLY,
        "set_flag": ToolEffect.IDEMPOTENT_WRITE,
        "delete_record": ToolEffect.NON_IDEMPOTENT_WRITE,
        "slow_write": ToolEffect.NON_IDEMPOTENT_WRITE,
        "refuse": ToolEffect.READ_ONLY,
    }
    for name, effect in by_annotations.items():
        decided, source = listed[name]
        assert source["source"] == "billing"
        if trusted:
            assert (decided, source["decided_by"]) == (effect, DecidedBy.ANNOTATIONS)
        else:
            assert (decided, source["decided_by"]) == (
                ToolEffect.NON_IDEMPOTENT_WRITE,
                DecidedBy.DEFAULT,
            )
    assert listed["lookup"][1]["annotations"] == {"readOnlyHint": True}
    assert listed["slow_write"][1]["annotations"] is None
    assert listed["create_invoice"][0] is ToolEffect.IDEMPOTENT_WRITE
    assert listed["create_invoice"][1]["decided_by"] == DecidedBy.CODE


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_run_calls_each_kind_and_the_server_gets_key_and_token(
    store_url: str, tmp_path: Path, transport: str
) -> None:
    ledger = tmp_path / "ledger"
    with contextlib_for(transport, ledger) as server:
        agent = Agent("clerk", calling(*EACH_KIND), tools=[server])
        async with Runtime.open(store_url, App([agent]), **FAST) as rt:
            run = await rt.run("clerk", "bill them")
            journal = await rt.steps(run.id)

    assert (run.state, run.result) == (RunState.COMPLETED, "done")
    rows = tool_rows(journal)
    assert {name: row.effect for name, row in rows.items()} == {
        "lookup": ToolEffect.READ_ONLY,
        "set_flag": ToolEffect.IDEMPOTENT_WRITE,
        "delete_record": ToolEffect.NON_IDEMPOTENT_WRITE,
        "create_invoice": ToolEffect.NON_IDEMPOTENT_WRITE,
        "refuse": ToolEffect.READ_ONLY,
    }
    assert rows["lookup"].output == {"result": "sunny in Oslo"}
    assert rows["delete_record"].status is StepStatus.SUCCEEDED
    # isError: the model is told, as for a ToolError, and the run goes on.
    assert rows["refuse"].status is StepStatus.FAILED
    assert "refused: closed" in (rows["refuse"].error or "")
    assert rows["set_flag"].source == {
        "source": "billing",
        "decided_by": "annotations",
        "annotations": {"idempotentHint": True, "destructiveHint": False},
    }
    calls = ledger_lines(str(ledger))
    assert [call["tool"] for call in calls] == [call.name for call in EACH_KIND]
    for call in calls:
        row = rows[call["tool"]]
        assert call["meta"][IDEMPOTENCY_KEY_META] == row.idempotency_key
        assert call["meta"][FENCING_TOKEN_META] == row.epoch == run.epoch


@contextmanager
def contextlib_for(transport: str, ledger: Path) -> Iterator[MCPServer]:
    if transport == "stdio":
        yield stdio_server(ledger)
        return
    port = free_port()
    with http_process(ledger, port):
        yield MCPServer.http("billing", f"http://127.0.0.1:{port}/mcp", trusted=True)


async def test_a_call_over_http_may_take_as_long_as_its_timeout_allows(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's HTTP client reads an answer for 300 s at most: a write allowed longer
    by its server's timeout_seconds was cut off by it, its answer lost, and its run
    dead-lettered though the write had completed. The SDK's bound is made a second
    here, the call takes three, and its own timeout is ten."""
    import mcp.shared._httpx_utils as sdk_http

    monkeypatch.setattr(sdk_http, "MCP_DEFAULT_SSE_READ_TIMEOUT", 1.0)
    ledger, release = tmp_path / "ledger", tmp_path / "release"
    port = free_port()
    call = ToolCall("hold_write", {"amount": 5}, "c-hold")
    with http_process(ledger, port, {"RELEASE": str(release)}):
        server = MCPServer.http(
            "billing", f"http://127.0.0.1:{port}/mcp", trusted=True, timeout_seconds=10.0
        )
        agent = Agent("clerk", calling(call), tools=[server])
        async with Runtime.open(store_url, App([agent]), **FAST) as rt:
            run_id = await rt.submit("clerk", "bill them")
            await until(lambda: len(ledger_lines(str(ledger))) == 1, WAIT_SECONDS)
            await anyio.sleep(3.0)
            release.touch()
            run = await rt.wait(run_id, timeout=WAIT_SECONDS)
            journal = await rt.steps(run_id)

    assert (run.state, run.result) == (RunState.COMPLETED, "done"), run.error
    assert tool_rows(journal)["hold_write"].output == {"result": "held 5"}
    assert [line["tool"] for line in ledger_lines(str(ledger))] == ["hold_write"]


async def test_a_server_killed_during_a_non_idempotent_call_dead_letters_the_run(
    store_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    agent = Agent(
        "clerk",
        calling(ToolCall("slow_write", {"amount": 5}, "call-1")),
        tools=[stdio_server(ledger)],
    )
    async with Runtime.open(store_url, App([agent]), **FAST) as rt:
        run_id = await rt.submit("clerk", "bill them")
        await until(lambda: len(ledger_lines(str(ledger))) == 1, WAIT_SECONDS)
        [call] = ledger_lines(str(ledger))
        os.kill(call["pid"], signal.SIGKILL)
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        journal = await rt.steps(run_id)

    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    assert tool_rows(journal)["slow_write"].status is StepStatus.STARTED
    assert [line["tool"] for line in ledger_lines(str(ledger))] == ["slow_write"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_error_answer_that_is_not_a_refusal_dead_letters_a_write(
    store_url: str, tmp_path: Path, transport: str
) -> None:
    """An internal error may come after the tool applied its effect: the write is
    interrupted, not told to the model as not applied, and never called again."""
    ledger = tmp_path / "ledger"
    with contextlib_for(transport, ledger) as server:
        agent = Agent(
            "clerk", calling(ToolCall("charge_then_fail", {"amount": 5}, "call-1")), tools=[server]
        )
        async with Runtime.open(store_url, App([agent]), **FAST) as rt:
            run_id = await rt.submit("clerk", "bill them")
            run = await rt.wait(run_id, timeout=WAIT_SECONDS)
            journal = await rt.steps(run_id)

    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    assert tool_rows(journal)["charge_then_fail"].status is StepStatus.STARTED
    assert [line["tool"] for line in ledger_lines(str(ledger))] == ["charge_then_fail"]


@pytest.mark.parametrize("errors_apply_nothing", [False, True])
async def test_an_error_result_of_a_write_is_an_interrupted_write_unless_the_server_says(
    store_url: str, tmp_path: Path, errors_apply_nothing: bool
) -> None:
    """A handler that raises after its charge is answered as a result marked isError.
    Told to the model as not applied, it would be asked for again under a new key: a
    second charge. Only a server declared to report errors for calls that changed
    nothing has its write's error told to the model."""
    ledger = tmp_path / "ledger"
    server = attrs.evolve(stdio_server(ledger), errors_apply_nothing=errors_apply_nothing)
    charge = ToolCall("charge_then_raise", {"amount": 5}, "call-1")
    again = ToolCall("charge_then_raise", {"amount": 5}, "call-2")
    agent = Agent("clerk", calling(charge, again), tools=[server])
    async with Runtime.open(store_url, App([agent]), **FAST) as rt:
        run_id = await rt.submit("clerk", "bill them")
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        journal = await rt.steps(run_id)

    tools = [step for step in journal if step.kind is StepKind.TOOL]
    charges = [line["tool"] for line in ledger_lines(str(ledger))]
    if errors_apply_nothing:
        assert (run.state, charges) == (RunState.COMPLETED, ["charge_then_raise"] * 2)
        assert [step.status for step in tools] == [StepStatus.FAILED] * 2
        return
    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    assert charges == ["charge_then_raise"]
    [interrupted] = tools
    assert interrupted.status is StepStatus.STARTED
    assert "may have applied" in (interrupted.error or "")


async def test_a_result_its_output_schema_does_not_allow_is_told_unless_a_write_ran(
    db_url: str, tmp_path: Path
) -> None:
    """The SDK refuses such a result once the call has run. A read's refusal is told to
    the model, and the run goes on; a non-idempotent write has applied: it is settled as
    interrupted, never told to the model as failed, nor made again."""
    ledger = tmp_path / "ledger"
    server = MCPServer.stdio(
        "odd",
        sys.executable,
        [*SERVER_ARGS, "odd-results"],
        cwd=str(ROOT),
        env={"LEDGER": str(ledger)},
        trusted=True,
    )
    calls = (
        ToolCall("count", {}, "c-count"),
        ToolCall("create_invoice", {}, "c-invoice"),
        ToolCall("create_invoice", {}, "c-again"),
    )
    agent = Agent("clerk", calling(*calls), tools=[server])
    async with Runtime.open(db_url, App([agent]), **FAST) as rt:
        run_id = await rt.submit("clerk", "count, then bill")
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        journal = await rt.steps(run_id)

    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    rows = tool_rows(journal)
    assert rows["count"].status is StepStatus.FAILED
    assert rows["count"].error == (
        "MCP server 'odd' answered the call of count, and the SDK refused its result: "
        "Invalid structured content returned by tool count: 'many' is not of type 'integer'"
    )
    assert rows["create_invoice"].status is StepStatus.STARTED
    assert "the SDK refused its result" in (rows["create_invoice"].error or "")
    assert [line["tool"] for line in ledger_lines(str(ledger))] == ["count", "create_invoice"]


async def test_a_session_given_up_by_one_call_keeps_serving_the_calls_already_on_it(
    store_url: str, tmp_path: Path
) -> None:
    """One run's call answered by an internal error makes the worker open a new session
    for the next call; another run's write, under way on the old session, still gets its
    answer: the session is closed once no call is on it, never under a call."""
    ledger, release = tmp_path / "ledger", tmp_path / "release"
    server = stdio_server(ledger, {"RELEASE": str(release)})
    held = ToolCall("hold_write", {"amount": 5}, "call-held")
    failing = ToolCall("charge_then_fail", {"amount": 7}, "call-failing")

    def reply(request: ProviderRequest) -> ProviderReply:
        if any(message.role is Role.TOOL for message in request.messages):
            return ProviderReply(text="done")
        [asked] = [message.content for message in request.messages if message.role is Role.USER]
        call = held if asked == "hold" else failing
        return ProviderReply(tool_calls=[call])

    agent = Agent("clerk", ScriptedProvider(reply), tools=[server])
    async with Runtime.open(store_url, App([agent]), **FAST) as rt:
        holding = await rt.submit("clerk", "hold")
        await until(lambda: len(ledger_lines(str(ledger))) == 1, WAIT_SECONDS)
        failed = await rt.wait(await rt.submit("clerk", "fail"), timeout=WAIT_SECONDS)
        release.touch()
        run = await rt.wait(holding, timeout=WAIT_SECONDS)
        journal = await rt.steps(holding)

    assert (failed.state, failed.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    assert (run.state, run.result) == (RunState.COMPLETED, "done"), run.error
    assert tool_rows(journal)["hold_write"].output == {"result": "held 5"}
    assert [line["tool"] for line in ledger_lines(str(ledger))] == [
        "hold_write",
        "charge_then_fail",
    ]


async def test_a_call_whose_server_is_gone_before_it_is_sent_is_withdrawn_and_retried(
    store_url: str, tmp_path: Path
) -> None:
    ledger, port = tmp_path / "ledger", free_port()
    server = MCPServer.http(
        "billing", f"http://127.0.0.1:{port}/mcp", trusted=True, connect_timeout_seconds=2.0
    )
    agent = Agent("clerk", calling(INVOICE.tool_calls[0]), tools=[server])
    # Retries spaced enough for the server to come back before they run out.
    patient = {**FAST, "recovery": RecoveryPolicy(backoff_base_seconds=1.0)}
    with http_process(ledger, port) as process:
        async with Runtime.open(store_url, App([agent]), **patient) as rt:
            # Listed while the server was up; it is gone when the call is made.
            process.send_signal(signal.SIGKILL)
            process.wait()
            run_id = await rt.submit("clerk", "bill them")

            async def retried() -> bool:
                return (await rt.get(run_id)).requeues > 0

            await until(retried, WAIT_SECONDS)
            # The intent of the call that never started was withdrawn.
            assert tool_rows(await rt.steps(run_id)) == {}
            with http_process(ledger, port):
                run = await rt.wait(run_id, timeout=WAIT_SECONDS)
    assert run.state is RunState.COMPLETED
    assert [line["tool"] for line in ledger_lines(str(ledger))] == ["create_invoice"]


@pytest.mark.parametrize("change", ["annotations", "removed"])
async def test_a_resume_decides_from_the_journal_not_from_what_the_server_says_now(
    store_url: str, tmp_path: Path, change: str
) -> None:
    ledger = tmp_path / "ledger"
    before = Agent("clerk", calling(), tools=[stdio_server(ledger)])
    async with Runtime.open(store_url, App([before]), **FAST):
        listed = before.tools.get("create_invoice")
    assert listed is not None and listed.effect is ToolEffect.NON_IDEMPOTENT_WRITE

    # A worker that journaled the intent of the call with what its listing decided, and died.
    store = await open_store(store_url)
    intent = StepWrite(
        seq=1,
        kind=StepKind.TOOL,
        status=StepStatus.STARTED,
        tool="create_invoice",
        call_id="call-1",
        effect=listed.effect,
        idempotency_key="k",
        arguments_json='{"amount":5}',
        source_json=listed.source_json,
    )
    run_id = await ghost_claims(store, "clerk", (provider_step(0, INVOICE), intent))

    now = {"ANNOTATIONS": "changed"} if change == "annotations" else {"DROP": "create_invoice"}
    after = Agent("clerk", calling(INVOICE.tool_calls[0]), tools=[stdio_server(ledger, now)])
    async with Runtime.open(store, App([after]), **FAST) as rt:
        offered = after.tools.get("create_invoice")
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        journal = await rt.steps(run_id)
    await store.aclose()

    if change == "annotations":
        # The server now claims the tool is an idempotent write, and the code trusts it.
        assert offered is not None and offered.effect is ToolEffect.IDEMPOTENT_WRITE
    else:
        assert offered is None
    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    assert tool_rows(journal)["create_invoice"].source == {
        "source": "billing",
        "decided_by": "annotations",
        "annotations": None,
    }
    assert ledger_lines(str(ledger)) == []


async def test_a_server_that_cannot_be_listed_stops_the_start(db_url: str) -> None:
    server = MCPServer.http(
        "billing", f"http://127.0.0.1:{free_port()}/mcp", connect_timeout_seconds=2.0
    )
    agent = Agent("clerk", calling(), tools=[server])
    with pytest.raises(ConfigurationError, match="billing"):
        async with Runtime.open(db_url, App([agent]), **FAST):
            pass


@pytest.mark.parametrize(
    ("cursors", "why"),
    [("same", "names a page it has already sent"), ("new", "did not list its tools within 10 s")],
)
async def test_a_server_whose_listing_never_ends_stops_the_start_in_its_timeout(
    db_url: str, cursors: str, why: str
) -> None:
    server = MCPServer.stdio(
        "billing",
        sys.executable,
        [*SERVER_ARGS, "endless-listing", cursors],
        cwd=str(ROOT),
        # The default: the bound covers the server's own start too, which on a loaded
        # machine (a Python process importing the MCP SDK) took more than 2 s.
        connect_timeout_seconds=DEFAULT_CONNECT_TIMEOUT_SECONDS,
    )
    agent = Agent("clerk", calling(), tools=[server])
    with anyio.fail_after(WAIT_SECONDS), pytest.raises(ConfigurationError) as refused:
        async with Runtime.open(db_url, App([agent]), **FAST):
            pass
    assert "'billing'" in refused.value.message
    assert why in refused.value.message


async def test_tools_an_agent_cannot_offer_stop_the_start_naming_server_and_tool(
    db_url: str, tmp_path: Path
) -> None:
    twice = Agent(
        "clerk",
        calling(),
        tools=[
            stdio_server(tmp_path / "ledger"),
            attrs.evolve(stdio_server(tmp_path / "l"), name="copy"),
        ],
    )
    with pytest.raises(ConfigurationError) as refused:
        async with Runtime.open(db_url, App([twice]), **FAST):
            pass
    assert "MCP server 'copy' lists the tool 'lookup'" in refused.value.message
    assert "MCP server 'billing' does too" in refused.value.message

    server = stdio_server(tmp_path / "ledger")
    for same in ([server, server], [server, attrs.evolve(server, trusted=False)]):
        with pytest.raises(ConfigurationError) as refused:
            async with Runtime.open(db_url, App([Agent("clerk", calling(), tools=same)]), **FAST):
                pass
        assert refused.value.message == (
            "agent 'clerk': MCP server 'billing' is given twice, or two servers have that name"
        )

    odd = MCPServer.stdio(
        "odd", sys.executable, [*SERVER_ARGS, "endless-listing", "bad-schema"], cwd=str(ROOT)
    )
    with pytest.raises(ConfigurationError) as refused:
        async with Runtime.open(db_url, App([Agent("clerk", calling(), tools=[odd])]), **FAST):
            pass
    assert "MCP server 'odd' lists the tool 'lookup'" in refused.value.message
    assert "invalid tool schema" in refused.value.message


async def test_a_tool_whose_output_schema_is_invalid_stops_the_start(db_url: str) -> None:
    """The SDK checks each result against the output schema once the call has run: with
    one it cannot read, every call would apply its effect and then fail."""
    odd = MCPServer.stdio(
        "odd", sys.executable, [*SERVER_ARGS, "endless-listing", "bad-output-schema"], cwd=str(ROOT)
    )
    with pytest.raises(ConfigurationError) as refused:
        async with Runtime.open(db_url, App([Agent("clerk", calling(), tools=[odd])]), **FAST):
            pass
    assert refused.value.message.startswith(
        "agent 'clerk': MCP server 'odd' lists the tool 'lookup', whose output schema is "
        "invalid, so every result of it would be refused: at #/properties/city/type: "
    )


@pytest.mark.parametrize(
    ("listing", "why"),
    [
        ("no-name", "MCP server 'odd' lists a tool with no name"),
        (
            "nul-name",
            "MCP server 'odd' lists the tool 'look\\x00up', whose name holds a NUL or a "
            "lone surrogate: no store can journal its calls",
        ),
        ("twice", "MCP server 'odd' lists the tool 'lookup' twice"),
    ],
)
async def test_a_tool_listed_unnamed_misnamed_or_twice_stops_the_start_naming_the_server(
    db_url: str, listing: str, why: str
) -> None:
    odd = MCPServer.stdio(
        "odd", sys.executable, [*SERVER_ARGS, "endless-listing", listing], cwd=str(ROOT)
    )
    with pytest.raises(ConfigurationError) as refused:
        async with Runtime.open(db_url, App([Agent("clerk", calling(), tools=[odd])]), **FAST):
            pass
    assert refused.value.message == f"agent 'clerk': {why}"


@tool
async def lookup() -> str:
    """A tool of the agent's own that an MCP server's tool would shadow."""
    return "local"


async def test_a_server_tool_named_like_one_of_the_agents_own_names_both(
    db_url: str, tmp_path: Path
) -> None:
    agent = Agent("clerk", calling(), tools=[lookup, stdio_server(tmp_path / "ledger")])
    for _ in range(2):  # a runtime opened again on the same app says the same
        with pytest.raises(ConfigurationError) as refused:
            async with Runtime.open(db_url, App([agent]), **FAST):
                pass
        assert refused.value.message == (
            "agent 'clerk': MCP server 'billing' lists the tool 'lookup', "
            "and the agent has a tool of its own named so"
        )


class _Mine(Exception):
    """An application's own error, raised in the runtime's block."""


async def test_an_error_raised_in_the_block_of_a_runtime_with_a_server_comes_out_as_it_is(
    db_url: str, tmp_path: Path
) -> None:
    """``except`` clauses around ``Runtime.open`` see the application's own exception,
    as they do for an app with no MCP server, not a group wrapping it."""
    agent = Agent("clerk", calling(), tools=[stdio_server(tmp_path / "ledger")])
    mine = _Mine("the application gave up")
    with pytest.raises(_Mine) as raised:
        async with Runtime.open(db_url, App([agent]), **FAST):
            raise mine
    assert raised.value is mine


async def test_a_calls_mcp_request_is_traced_under_its_tool_span_and_carries_the_runs_trace(
    db_url: str, tmp_path: Path
) -> None:
    """The SDK's own span of the request belongs under the call's, and the traceparent
    it sends the server in ``_meta`` is of the run's trace: the server's spans join it."""
    ledger = tmp_path / "ledger"
    agent = Agent("clerk", calling(EACH_KIND[0]), tools=[stdio_server(ledger)])
    exporter = in_memory_spans()
    async with Runtime.open(db_url, App([agent]), **FAST) as rt:
        run = await rt.run("clerk", "weather")
    assert run.state is RunState.COMPLETED
    spans = list(exporter.get_finished_spans())
    [called] = [span for span in spans if span.name == "execute_tool lookup"]
    [sent] = [span for span in spans if span.name == "MCP send tools/call lookup"]
    assert sent.parent is not None and sent.parent.span_id == called.context.span_id
    assert sent.context.trace_id == called.context.trace_id
    [line] = ledger_lines(str(ledger))
    assert line["meta"]["traceparent"].split("-")[1] == f"{called.context.trace_id:032x}"


async def test_a_servers_error_text_of_any_length_is_journaled_bounded_and_told_whole(
    db_url: str, tmp_path: Path
) -> None:
    """An error result's text is the server's to write: the model is told all of it, and
    the row's error, which show and the console print, keeps its first MAX_ERROR_CHARS."""
    reason = "closed " * 8_000
    agent = Agent(
        "clerk",
        calling(ToolCall("refuse", {"reason": reason}, "c-refuse")),
        tools=[stdio_server(tmp_path / "ledger")],
    )
    async with Runtime.open(db_url, App([agent]), **FAST) as rt:
        run = await rt.run("clerk", "try")
        refused = tool_rows(await rt.steps(run.id))["refuse"]
    assert run.state is RunState.COMPLETED
    assert refused.status is StepStatus.FAILED
    told = f"Error executing tool refuse: refused: {reason}"
    assert refused.output == {"error": told}
    assert refused.error == told[: MAX_ERROR_CHARS - 3] + "..."


async def test_an_effect_named_for_a_tool_the_server_does_not_list_is_warned_of_at_start(
    db_url: str, tmp_path: Path
) -> None:
    """A misspelt name in ``effects`` leaves the tool it meant to the annotations of a
    trusted server, which may call a non-idempotent write idempotent: the worker says so."""
    server = attrs.evolve(
        stdio_server(tmp_path / "ledger"),
        effects={"create_invoce": ToolEffect.NON_IDEMPOTENT_WRITE, "lookup": ToolEffect.READ_ONLY},
    )
    agent = Agent("clerk", calling(), tools=[server])
    with capture_logs() as logs:
        async with Runtime.open(db_url, App([agent]), **FAST):
            pass
    [warned] = [entry for entry in logs if entry["event"] == "mcp.effect_unlisted"]
    assert (warned["log_level"], warned["agent"], warned["server"], warned["tools"]) == (
        "warning",
        "clerk",
        "billing",
        ["create_invoce"],
    )


def slow_restart(tmp_path: Path, timeout_seconds: float) -> tuple[MCPServer, Path]:
    """A stdio server whose every start after the first takes a minute: longer than
    ``timeout_seconds``, the bound of its calls. Returned with its ledger."""
    ledger = tmp_path / "ledger"
    started = {"STARTED": str(tmp_path / "started"), "RESTART_DELAY": "60"}
    server = attrs.evolve(stdio_server(ledger, started), timeout_seconds=timeout_seconds)
    return server, ledger


async def test_a_call_stopped_while_its_server_restarts_leaves_nothing_to_hold_the_close(
    db_url: str, tmp_path: Path
) -> None:
    """A call whose server died is made on a new session; a call stopped while that
    session opens (by its timeout, or by the bound on getting a session) must not leave
    it open, unknown to the runtime, holding the runtime's close for ever."""
    server, ledger = slow_restart(tmp_path, timeout_seconds=2.0)
    agent = Agent("clerk", calling(EACH_KIND[0]), tools=[server])
    with anyio.fail_after(WAIT_SECONDS):
        async with Runtime.open(db_url, App([agent]), **FAST) as rt:
            await rt.run("clerk", "weather")
            [line] = ledger_lines(str(ledger))
            os.kill(line["pid"], signal.SIGKILL)
            run_id = await rt.submit("clerk", "weather again")

            async def retried() -> bool:
                return (await rt.get(run_id)).requeues > 0

            await until(retried, WAIT_SECONDS)
            closing = anyio.current_time()
    assert anyio.current_time() - closing < 10


async def test_a_write_whose_server_is_not_back_within_half_its_timeout_is_not_sent(
    db_url: str, tmp_path: Path
) -> None:
    """Its server died and a new one takes longer than the call's timeout to start: the
    request never left, so the write is withdrawn and retried, not left for an operator
    as a write that may have applied."""
    server, ledger = slow_restart(tmp_path, timeout_seconds=2.0)

    def first(request: ProviderRequest) -> ProviderReply:
        [asked] = [message for message in request.messages if message.role is Role.USER]
        call = INVOICE.tool_calls[0] if "bill" in str(asked.content) else EACH_KIND[0]
        return ProviderReply(tool_calls=[call])

    provider = ScriptedProvider([first, ProviderReply(text="done")])
    agent = Agent("clerk", provider, tools=[server])
    once = {**FAST, "recovery": RecoveryPolicy(max_requeues=1, backoff_base_seconds=0.05)}
    with anyio.fail_after(WAIT_SECONDS):
        async with Runtime.open(db_url, App([agent]), **once) as rt:
            await rt.run("clerk", "weather")
            [line] = ledger_lines(str(ledger))
            os.kill(line["pid"], signal.SIGKILL)
            run_id = await rt.submit("clerk", "bill them")
            run = await rt.wait(run_id, timeout=WAIT_SECONDS)
            journal = await rt.steps(run_id)
    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.RETRIES_EXHAUSTED)
    assert "not sent" in (run.error or "")
    assert tool_rows(journal) == {}
    assert [line["tool"] for line in ledger_lines(str(ledger))] == ["lookup"]


async def test_a_second_runtime_on_an_agent_another_one_serves_is_refused(
    db_url: str, tmp_path: Path
) -> None:
    """An agent's MCP tools are bound to the sessions of the runtime that listed them. A
    second runtime listed them again, and once it closed, the first one's calls found
    its sessions gone: a write never sent was dead-lettered as one that may have run."""
    ledger = tmp_path / "ledger"
    agent = Agent("clerk", calling(INVOICE.tool_calls[0]), tools=[stdio_server(ledger)])
    app = App([agent])
    async with Runtime.open(db_url, app, **FAST) as rt:
        with pytest.raises(ConfigurationError) as refused:
            async with Runtime.open(db_url, App([agent]), **FAST):
                pass
        assert refused.value.message == (
            "agent 'clerk' is served by another open Runtime of this process, whose "
            "sessions with its MCP servers carry its calls: give each Runtime its own Agent"
        )
        run = await rt.run("clerk", "bill them")
    assert run.state is RunState.COMPLETED
    assert [line["tool"] for line in ledger_lines(str(ledger))] == ["create_invoice"]
    async with Runtime.open(db_url, app, **FAST) as again:
        assert (await again.run("clerk", "bill them again")).state is RunState.COMPLETED


async def test_what_a_stdio_server_writes_to_stderr_is_logged_line_by_line_bounded(
    db_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A server's stderr is its own text: passed through, it drove the operator's terminal
    (escape sequences) and broke a stream of JSON log lines."""
    noise = "starting \x1b[31mred\x1b]0;title\x07\nsecond\n" + "y" * 5000 + "\n"
    server = stdio_server(tmp_path / "ledger", {"NOISE": noise})
    agent = Agent("clerk", calling(), tools=[server])
    with capture_logs() as logs:
        async with Runtime.open(db_url, App([agent]), **FAST):

            def logged() -> list[dict[str, Any]]:
                return [entry for entry in logs if entry["event"] == "mcp.server_stderr"]

            # Two short lines, and the long one in three events.
            await until(lambda: len(logged()) >= 5, WAIT_SECONDS)
    lines = [(entry["server"], entry["line"]) for entry in logged()]
    assert lines[:2] == [("billing", "starting \x1b[31mred\x1b]0;title\x07"), ("billing", "second")]
    assert "".join(line for _, line in lines[2:]) == "y" * 5000
    assert all(len(line) <= 2000 for _, line in lines)
    assert "starting" not in capfd.readouterr().err


async def test_a_stdio_server_that_ends_at_start_is_refused_with_its_last_words(
    db_url: str, tmp_path: Path
) -> None:
    """The docs' own server run from another directory: the process says why on stderr
    and exits, and the start said only "Connection closed" (the stderr lines are info
    events, which an embedding application does not show unless it asks)."""
    server = MCPServer.stdio("billing", sys.executable, ["billing_server.py"], cwd=str(tmp_path))
    with pytest.raises(ConfigurationError) as refused:
        async with Runtime.open(db_url, App([Agent("clerk", calling(), tools=[server])]), **FAST):
            pass
    message = refused.value.message
    assert message.startswith(
        "agent 'clerk': the tools of MCP server 'billing' could not be listed: "
        "MCP server 'billing' could not be reached: "
    )
    assert "its last line on stderr: " in message
    assert f"can't open file '{tmp_path / 'billing_server.py'}'" in message


@contextmanager
def served(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` serving on 127.0.0.1 in a thread of its own; yields its MCP URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def refusing(status: int) -> Iterator[str]:
    """An endpoint on 127.0.0.1 that answers every request with ``status``, as an
    authenticating proxy in front of an MCP server does; yields its URL."""

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b'{"error": "invalid_token"}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    with served(Refuse) as url:
        yield url


@pytest.mark.parametrize(("status", "said"), [(401, "401 Unauthorized"), (403, "403 Forbidden")])
async def test_a_server_that_refuses_the_worker_at_start_says_the_http_status(
    db_url: str, status: int, said: str
) -> None:
    """A wrong or expired token: the SDK says only "Server returned an error response"."""
    with refusing(status) as url:
        server = MCPServer.http("search", url, headers={"Authorization": "Bearer expired"})
        agent = Agent("clerk", calling(), tools=[server])
        with pytest.raises(ConfigurationError) as refused:
            async with Runtime.open(db_url, App([agent]), **FAST):
                pass
    assert f"it answered HTTP {said}" in refused.value.message
    assert "expired" not in refused.value.message


@contextmanager
def proxied(
    port: int, *, calls_answered: tuple[int, str] | None = None, silent_on_delete: bool = False
) -> Iterator[str]:
    """A proxy on 127.0.0.1 in front of the test server on ``port`` that passes every
    request on; yields its URL. ``calls_answered``: it answers a ``tools/call``, once
    the server has run it, with that status and content type of its own (with 202
    Accepted, as a gateway that works asynchronously does). ``silent_on_delete``: it
    never answers the DELETE that ends a session."""
    ended = threading.Event()
    forwarded = ("content-type", "accept", "mcp-session-id", "mcp-protocol-version")

    class Proxy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            upstream = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_SECONDS)
            headers = {name: self.headers[name] for name in forwarded if name in self.headers}
            upstream.request("POST", "/mcp", body, headers)
            answer = upstream.getresponse()
            content = answer.read()
            upstream.close()
            if calls_answered is not None and b'"tools/call"' in body:
                status, kind = calls_answered
                page = b"" if status == 202 else b"<html>the gateway's own page</html>"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                return
            self.send_response(answer.status)
            for name in ("content-type", "mcp-session-id"):
                if answer.getheader(name) is not None:
                    self.send_header(name, answer.getheader(name) or "")
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        def do_GET(self) -> None:
            # No stream of the server's own messages: the specification allows a 405.
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_DELETE(self) -> None:
            if silent_on_delete:
                ended.wait(WAIT_SECONDS)
            self.do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    with served(Proxy) as url:
        try:
            yield url
        finally:
            ended.set()


@pytest.mark.parametrize(
    "answer",
    [(202, "text/plain"), (200, "text/html"), (404, "text/html")],
    ids=["accepted", "not-json", "session-unknown"],
)
async def test_a_write_whose_answer_the_sdk_words_as_invalid_is_interrupted_not_refused(
    db_url: str, tmp_path: Path, answer: tuple[int, str]
) -> None:
    """The SDK words an answer of 202 Accepted, one that is neither JSON nor an event
    stream, and a 404 for a session it had as an "invalid request" error, which is
    otherwise a refusal; but the request reached the server (or its gateway), and the
    call may have run. Told to the model as refused, the write would be asked for
    again: a second charge."""
    ledger, port = tmp_path / "ledger", free_port()
    charge = INVOICE.tool_calls[0]
    again = ToolCall("create_invoice", {"amount": 5}, "call-2")
    with http_process(ledger, port), proxied(port, calls_answered=answer) as url:
        server = MCPServer.http("billing", url, trusted=True)
        agent = Agent("clerk", calling(charge, again), tools=[server])
        async with Runtime.open(db_url, App([agent]), **FAST) as rt:
            run_id = await rt.submit("clerk", "bill them")
            run = await rt.wait(run_id, timeout=WAIT_SECONDS)
            journal = await rt.steps(run_id)
    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    assert tool_rows(journal)["create_invoice"].status is StepStatus.STARTED
    assert [line["tool"] for line in ledger_lines(str(ledger))] == ["create_invoice"]


async def test_a_server_that_never_answers_the_end_of_its_session_holds_no_close(
    db_url: str, tmp_path: Path
) -> None:
    """The DELETE that ends a Streamable HTTP session was waited for as long as the
    answer to a call (300 s, the SDK's bound): the runtime's close, and a daemon's
    drain, hung that long on a server that never answered it."""
    ledger, port = tmp_path / "ledger", free_port()
    with http_process(ledger, port), proxied(port, silent_on_delete=True) as url:
        server = MCPServer.http("billing", url, trusted=True, connect_timeout_seconds=1.0)
        agent = Agent("clerk", calling(ToolCall("lookup", {"city": "Oslo"}, "c-1")), tools=[server])
        # Far under the SDK's bound, far over the connect timeout the close now waits.
        with anyio.fail_after(20):
            async with Runtime.open(db_url, App([agent]), **FAST) as rt:
                run = await rt.run("clerk", "look it up")
    assert run.state is RunState.COMPLETED
