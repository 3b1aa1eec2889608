"""Bad input gets one clear error and writes nothing; bad tool calls are answered, not run."""

from __future__ import annotations

import asyncio
import functools
import math
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from leaseward import (
    Agent,
    App,
    Client,
    ConfigurationError,
    FailureClass,
    InvalidInput,
    ProviderError,
    ProviderReply,
    ProviderRequest,
    Reason,
    RecoveryPolicy,
    Role,
    RunCursor,
    RunInfo,
    RunMode,
    RunNotFound,
    RunState,
    Runtime,
    RuntimeClosed,
    ScriptedProvider,
    StepKind,
    StepStatus,
    StoreError,
    ToolCall,
    ToolContext,
    ToolDefinitionError,
    ToolEffect,
    UnknownAgent,
    tool,
)
from leaseward.runtime.encoding import MAX_ARGUMENTS_BYTES, MAX_INPUT_BYTES, MAX_RESULT_BYTES
from leaseward.storage import open_store
from leaseward.storage.migrations import MIGRATIONS
from tests.file_modes import unwritable
from tests.integration.support import Calls
from tests.stores import created

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.05}


def path_of(db_url: str) -> Path:
    return Path(db_url.removeprefix("sqlite:///"))


def plain_app() -> App:
    provider = ScriptedProvider([ProviderReply(text="done")])
    return App([Agent("echo", provider)])


async def until(
    rt: Runtime, run_id: str, predicate: Callable[[RunInfo], bool], timeout: float = 5.0
) -> RunInfo:
    """Polls the run until ``predicate`` holds; fails the test after ``timeout`` seconds."""
    with anyio.fail_after(timeout):
        while True:
            info = await rt.get(run_id)
            if predicate(info):
                return info
            await anyio.sleep(0.005)


class Recorder:
    """A scripted reply callable: ``first`` on turn one, then "done"; keeps every request."""

    def __init__(self, first: ProviderReply) -> None:
        self.first = first
        self.requests: list[ProviderRequest] = []

    def __call__(self, request: ProviderRequest) -> ProviderReply:
        self.requests.append(request)
        turn = sum(1 for m in request.messages if m.role is Role.ASSISTANT)
        return self.first if turn == 0 else ProviderReply(text="done")

    def answer_to_first_call(self) -> str:
        assert len(self.requests) == 2, self.requests
        last = self.requests[1].messages[-1]
        assert last.role is Role.TOOL
        assert last.content is not None
        return last.content


def charging_agent(calls: Calls, recorder: Recorder) -> Agent:
    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(ctx: ToolContext, amount: int) -> dict[str, int]:
        calls.record(ctx, amount=amount)
        return {"charged": amount}

    @tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    async def annotate(ctx: ToolContext, memo: str) -> str:
        calls.record(ctx, memo=memo)
        return "noted"

    return Agent("payer", ScriptedProvider(recorder), tools=[charge, annotate])


# -- submit / run -----------------------------------------------------------------------


NOT_JSON: list[Any] = [
    pytest.param(object(), id="object"),
    pytest.param(float("nan"), id="nan"),
    pytest.param(float("inf"), id="inf"),
    pytest.param({1, 2}, id="set"),
    pytest.param({("a", "b"): 1}, id="tuple-key"),
    # json.dumps alone would store {1: "a"} as {"1": "a"}: not the input that was submitted.
    pytest.param({1: "a"}, id="int-key"),
    pytest.param({None: "a"}, id="none-key"),
    pytest.param({True: "a"}, id="bool-key"),
    pytest.param({"outer": [{"inner": {2: "b"}}]}, id="nested-int-key"),
    pytest.param({"nested": [1, {"deep": object()}]}, id="nested-object"),
    pytest.param("x" * (MAX_INPUT_BYTES + 1), id="over-max-input-bytes"),
]


@pytest.mark.parametrize("how", ["submit", "run"])
async def test_unknown_agent_is_refused_and_nothing_is_stored(db_url: str, how: str) -> None:
    async with Runtime.open(db_url, plain_app(), **FAST) as rt:
        with pytest.raises(UnknownAgent) as raised:
            await getattr(rt, how)("ghost", {"x": 1})
        assert "ghost" in str(raised.value)
        assert "echo" in str(raised.value)
        assert await rt.runs() == []


@pytest.mark.parametrize("how", ["submit", "run"])
@pytest.mark.parametrize("value", NOT_JSON)
async def test_input_that_is_not_json_is_refused_and_nothing_is_stored(
    db_url: str, how: str, value: Any
) -> None:
    async with Runtime.open(db_url, plain_app(), **FAST) as rt:
        with pytest.raises(InvalidInput) as raised:
            await getattr(rt, how)("echo", value)
        assert "input" in str(raised.value)
        assert await rt.runs() == []


async def test_input_just_under_the_limit_is_accepted(db_url: str) -> None:
    # The limit counts the bytes of the JSON text: the two quotes count too.
    value = "x" * (MAX_INPUT_BYTES - 2)
    async with Runtime.open(db_url, plain_app(), **FAST) as rt:
        run = await rt.run("echo", value)
    assert run.state is RunState.COMPLETED


async def test_input_limit_counts_utf8_bytes_not_characters(db_url: str) -> None:
    value = "é" * (MAX_INPUT_BYTES // 2)  # fewer characters than the limit, more bytes
    async with Runtime.open(db_url, plain_app(), **FAST) as rt:
        with pytest.raises(InvalidInput, match="byte limit"):
            await rt.submit("echo", value)
        assert await rt.runs() == []


async def test_client_with_an_app_refuses_unknown_agents(db_url: str) -> None:
    async with Client.open(created(db_url), app=plain_app()) as client:
        with pytest.raises(UnknownAgent, match="ghost"):
            await client.submit("ghost", None)
        with pytest.raises(InvalidInput):
            await client.submit("echo", object())
        assert await client.runs() == []


async def test_client_without_an_app_refuses_an_empty_agent_name(db_url: str) -> None:
    async with Client.open(created(db_url)) as client:
        with pytest.raises(UnknownAgent):
            await client.submit("", None)
        assert await client.runs() == []


@pytest.mark.parametrize("operation", ["get", "steps", "cancel"])
async def test_unknown_run_id_is_run_not_found(db_url: str, operation: str) -> None:
    async with Runtime.open(db_url, plain_app(), **FAST) as rt:
        with pytest.raises(RunNotFound, match="nope"):
            await getattr(rt, operation)("nope")
        assert await rt.runs() == []


# -- tool calls the model gets wrong ----------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"amount": "five"}, "charge: amount: Input should be a valid integer"),
        ({"amount": "5"}, "charge: amount: Input should be a valid integer"),
        ({}, "charge: amount: Field required"),
        ({"amount": 5, "currency": "EUR"}, "charge: currency: Extra inputs are not permitted"),
    ],
)
async def test_arguments_failing_the_schema_are_answered_and_never_executed(
    db_url: str, arguments: dict[str, Any], problem: str
) -> None:
    calls = Calls()
    recorder = Recorder(ProviderReply(tool_calls=[ToolCall("charge", arguments, "c1")]))
    async with Runtime.open(db_url, App([charging_agent(calls, recorder)]), **FAST) as rt:
        run = await rt.wait(await rt.submit("payer", None), timeout=10)
        journal = await rt.steps(run.id)

    assert len(calls) == 0
    answer = recorder.answer_to_first_call()
    assert "invalid arguments for charge" in answer
    assert problem in answer
    tool_rows = [s for s in journal if s.kind is StepKind.TOOL]
    assert [(s.tool, s.status, s.effect) for s in tool_rows] == [
        ("charge", StepStatus.FAILED, ToolEffect.NON_IDEMPOTENT_WRITE)
    ]
    assert problem in (tool_rows[0].error or "")
    assert tool_rows[0].arguments == arguments
    assert (run.state, run.reason, run.result) == (RunState.COMPLETED, Reason.COMPLETED, "done")


async def test_unknown_tool_is_answered_and_journaled_as_a_failed_non_idempotent_write(
    db_url: str,
) -> None:
    calls = Calls()
    recorder = Recorder(ProviderReply(tool_calls=[ToolCall("refund", {"amount": 5}, "c1")]))
    async with Runtime.open(db_url, App([charging_agent(calls, recorder)]), **FAST) as rt:
        run = await rt.wait(await rt.submit("payer", None), timeout=10)
        journal = await rt.steps(run.id)

    assert len(calls) == 0
    answer = recorder.answer_to_first_call()
    assert "unknown tool 'refund'" in answer
    assert "charge" in answer  # the model is told what exists
    tool_rows = [s for s in journal if s.kind is StepKind.TOOL]
    assert [(s.tool, s.status, s.effect) for s in tool_rows] == [
        ("refund", StepStatus.FAILED, ToolEffect.NON_IDEMPOTENT_WRITE)
    ]
    assert (run.state, run.result) == (RunState.COMPLETED, "done")


async def test_arguments_over_the_size_limit_are_refused_before_the_call(db_url: str) -> None:
    calls = Calls()
    memo = "m" * (MAX_ARGUMENTS_BYTES + 1)
    recorder = Recorder(ProviderReply(tool_calls=[ToolCall("annotate", {"memo": memo}, "c1")]))
    async with Runtime.open(db_url, App([charging_agent(calls, recorder)]), **FAST) as rt:
        run = await rt.wait(await rt.submit("payer", None), timeout=10)
        journal = await rt.steps(run.id)

    assert len(calls) == 0
    answer = recorder.answer_to_first_call()
    assert f"over the {MAX_ARGUMENTS_BYTES}-byte limit" in answer
    assert len(answer) < 1000  # the refusal does not echo the arguments back
    tool_rows = [s for s in journal if s.kind is StepKind.TOOL]
    assert [(s.tool, s.status) for s in tool_rows] == [("annotate", StepStatus.FAILED)]
    assert tool_rows[0].arguments is None
    assert (run.state, run.result) == (RunState.COMPLETED, "done")


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        pytest.param(
            "r" * (MAX_RESULT_BYTES + 1), f"over the {MAX_RESULT_BYTES}-byte limit", id="big"
        ),
        pytest.param(object(), "is not a JSON value", id="object"),
        pytest.param({"score": math.nan}, "is not a JSON value", id="nan"),
    ],
)
async def test_tool_result_that_cannot_be_recorded_reaches_the_model_as_an_error(
    db_url: str, result: Any, problem: str
) -> None:
    executed: list[str] = []

    @tool
    async def fetch(ctx: ToolContext) -> Any:
        executed.append(ctx.call_id)
        return result

    recorder = Recorder(ProviderReply(tool_calls=[ToolCall("fetch", {}, "c1")]))
    app = App([Agent("reader", ScriptedProvider(recorder), tools=[fetch])])
    async with Runtime.open(db_url, app, **FAST) as rt:
        run = await rt.wait(await rt.submit("reader", None), timeout=10)
        journal = await rt.steps(run.id)

    assert executed == ["c1"]
    answer = recorder.answer_to_first_call()
    assert "the result of fetch" in answer
    assert problem in answer
    assert len(answer) < 1000
    (row,) = [s for s in journal if s.kind is StepKind.TOOL]
    assert isinstance(row.output, dict)
    assert problem in row.output["error"]
    # A failed call, as the model is told: no filter for failed calls may miss it.
    assert row.status is StepStatus.FAILED
    assert row.error is not None and problem in row.error
    assert recorder.requests[1].messages[-1].is_error is True
    assert (run.state, run.result) == (RunState.COMPLETED, "done")


async def test_call_arguments_no_journal_holds_are_refused_to_the_model_alone(
    db_url: str,
) -> None:
    """A custom provider's decoded arguments holding a NaN or an object that is not JSON:
    that call is answered with an error, the others of the turn are made, and the run
    goes on, as for argument text a model API sent that is not JSON."""
    made: list[Any] = []

    @tool
    async def measure(ctx: ToolContext, n: float) -> float:
        made.append(n)
        return n

    calls = (
        ToolCall("measure", {"n": math.nan}, "c1"),
        ToolCall("measure", {"n": 1.5}, "c2"),
        ToolCall("measure", {"n": object()}, "c3"),
    )
    recorder = Recorder(ProviderReply(tool_calls=calls))
    app = App([Agent("measurer", ScriptedProvider(recorder), tools=[measure])])
    async with Runtime.open(db_url, app, **FAST) as rt:
        run = await rt.wait(await rt.submit("measurer", None), timeout=10)
        journal = await rt.steps(run.id)
    assert (run.state, run.result) == (RunState.COMPLETED, "done")
    assert made == [1.5]
    rows = {s.call_id: s for s in journal if s.kind is StepKind.TOOL}
    assert rows["c2"].status is StepStatus.SUCCEEDED
    for refused in ("c1", "c3"):
        assert rows[refused].status is StepStatus.FAILED
        assert "the arguments of measure could not be read" in (rows[refused].error or "")
    told = [m for m in recorder.requests[1].messages if m.role is Role.TOOL]
    assert [m.is_error for m in told] == [True, False, True]


async def test_max_steps_fails_the_run_after_exactly_that_many_provider_steps(
    db_url: str,
) -> None:
    @tool
    async def lookup(ctx: ToolContext) -> str:
        return "again"

    provider = ScriptedProvider(lambda request: ProviderReply(tool_calls=[ToolCall("lookup")]))
    app = App([Agent("looper", provider, tools=[lookup], max_steps=2)])
    async with Runtime.open(db_url, app, **FAST) as rt:
        run = await rt.wait(await rt.submit("looper", None), timeout=10)
        journal = await rt.steps(run.id)

    assert (run.state, run.reason) == (RunState.FAILED, Reason.MAX_STEPS)
    assert provider.calls == 2
    assert [s.kind for s in journal].count(StepKind.PROVIDER) == 2
    assert run.requeues == 0


# -- provider failures ------------------------------------------------------------------


class FailingProvider:
    def __init__(self, failure_class: str) -> None:
        self.failure_class = failure_class
        self.calls = 0

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        self.calls += 1
        raise ProviderError(f"failure {self.calls}", failure_class=self.failure_class)


def failing_app(failure_class: str) -> tuple[App, FailingProvider]:
    provider = FailingProvider(failure_class)
    return App([Agent("flaky", provider)]), provider


async def test_non_retryable_provider_error_dead_letters_at_once(db_url: str) -> None:
    app, provider = failing_app("auth")
    async with Runtime.open(db_url, app, **FAST) as rt:
        run = await rt.wait(await rt.submit("flaky", None), timeout=10)

    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.NOT_RETRYABLE)
    assert run.failure_class is FailureClass.AUTH
    assert run.requeues == 0
    assert provider.calls == 1
    assert "failure 1" in (run.error or "")


async def test_retryable_provider_error_requeues_with_backoff(db_url: str) -> None:
    app, provider = failing_app("rate_limit")
    policy = RecoveryPolicy(backoff_base_seconds=30)
    async with Runtime.open(db_url, app, recovery=policy, **FAST) as rt:
        run_id = await rt.submit("flaky", None)
        run = await until(rt, run_id, lambda r: r.requeues >= 1)
        store = await open_store(db_url)
        try:
            record = await store.get_run(run_id)
        finally:
            await store.aclose()

    assert (run.state, run.requeues) == (RunState.QUEUED, 1)
    assert run.failure_class is FailureClass.RATE_LIMIT
    assert provider.calls == 1
    assert record is not None
    assert record.available_at - record.updated_at == pytest.approx(30.0)
    assert record.lease_owner is None


async def test_retryable_provider_error_dead_letters_when_retries_run_out(db_url: str) -> None:
    app, provider = failing_app("server_error")
    policy = RecoveryPolicy(backoff_base_seconds=0.01, max_requeues=2)
    async with Runtime.open(db_url, app, recovery=policy, **FAST) as rt:
        run = await rt.wait(await rt.submit("flaky", None), timeout=10)

    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.RETRIES_EXHAUSTED)
    assert run.requeues == 2
    assert run.failure_class is FailureClass.SERVER_ERROR
    assert provider.calls == 3
    assert run.epoch == 3


async def test_interactive_run_with_a_failing_provider_fails_and_is_never_requeued(
    db_url: str,
) -> None:
    app, provider = failing_app("rate_limit")
    policy = RecoveryPolicy(backoff_base_seconds=0.01)
    async with Runtime.open(db_url, app, recovery=policy, **FAST) as rt:
        run = await rt.run("flaky", None)
        again = await rt.get(run.id)

    assert run.mode is RunMode.INTERACTIVE
    assert (run.state, run.reason) == (RunState.FAILED, Reason.INTERACTIVE_FAILED)
    assert run.requeues == 0
    assert run.failure_class is FailureClass.RATE_LIMIT
    assert provider.calls == 1
    assert again == run


def undecoded_arguments(request: ProviderRequest) -> ProviderReply:
    """A provider bug: the arguments left as the JSON text a model API sends."""
    return ProviderReply(tool_calls=[ToolCall("send_email", '{"to": "a@b.c"}', "call-7")])  # type: ignore[arg-type]


async def test_tool_call_arguments_that_are_not_a_mapping_end_the_run_naming_the_call(
    db_url: str,
) -> None:
    calls = Calls()

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def send_email(ctx: ToolContext, to: str) -> str:
        calls.record(ctx, to=to)
        return "sent"

    app = App([Agent("mailer", ScriptedProvider(undecoded_arguments), tools=[send_email])])
    async with Runtime.open(db_url, app, **FAST) as rt:
        queued = await rt.wait(await rt.submit("mailer", None), timeout=10)
        interactive = await rt.run("mailer", None)
        journals = [await rt.steps(run.id) for run in (queued, interactive)]

    assert (queued.state, queued.reason) == (RunState.DEAD_LETTERED, Reason.NOT_RETRYABLE)
    assert (interactive.state, interactive.reason) == (RunState.FAILED, Reason.INTERACTIVE_FAILED)
    for run in (queued, interactive):
        assert (run.error or "").startswith(
            "ProviderError: tool call 'send_email' (call id 'call-7') from the provider has "
            "arguments of type str, not a mapping"
        ), run.error
    # The reply never became a step, so nothing of it can be executed on a retry.
    assert journals == [[], []]
    assert len(calls) == 0


# -- configuration and store URLs -------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 1.5}, "concurrency"),
        ({"lease_seconds": -1}, "lease_seconds"),
        ({"lease_seconds": math.nan}, "lease_seconds"),
        ({"reap_interval_seconds": 0}, "reap_interval_seconds"),
        ({"poll_interval_seconds": -0.5}, "poll_interval_seconds"),
        (
            {"lease_seconds": 2, "reap_interval_seconds": 2},
            r"^reap_interval_seconds \(2\) must be shorter than lease_seconds \(2\)",
        ),
        ({"reap_interval_seconds": 3600}, r"reap_interval_seconds \(3600\) must be shorter"),
        ({"app": "not an app"}, "App"),
        ({"app": [Agent("x", ScriptedProvider([]))]}, "App"),
        ({"worker_id": ""}, r"^worker_id must be a name"),
        ({"worker_id": "  "}, r"^worker_id must be a name"),
        ({"worker_id": " web-1"}, r"^worker_id must be a name"),
        ({"worker_id": 7}, r"^worker_id must be a name"),
        ({"recovery": "retry"}, r"^recovery must be a RecoveryPolicy"),
        ({"metrics": "prometheus"}, r"^metrics must be a Metrics"),
        ({"clock": "utc"}, r"^clock must be a Clock"),
        ({"group_commit": "no"}, r"^group_commit must be True or False"),
        ({"trace_content": 1}, r"^trace_content must be True or False"),
        ({"tune_collector": None}, r"^tune_collector must be True or False"),
        ({"worker_id": "web\ud800"}, r"^worker_id must be a name"),
        ({"worker_id": "web\x00"}, r"^worker_id must be a name"),
    ],
)
async def test_bad_runtime_settings_are_configuration_errors_and_create_no_file(
    db_url: str, kwargs: dict[str, Any], fragment: str
) -> None:
    settings = {"app": plain_app(), **FAST, **kwargs}
    app = settings.pop("app")
    with pytest.raises(ConfigurationError, match=fragment):
        async with Runtime.open(db_url, app, **settings):
            pytest.fail("the runtime opened")
    assert not path_of(db_url).exists()


async def plain_function(x: int) -> int:
    return x


@tool
async def decorated(x: int) -> int:
    return x


class SyncProvider:
    """Every run of its agent would fail: its reply cannot be awaited."""

    def complete(self, request: ProviderRequest) -> ProviderReply:
        return ProviderReply(text="done")


@pytest.mark.parametrize(
    ("build", "error", "fragment"),
    # mypy refuses the first three; code that is not type-checked reaches the runtime.
    [
        (
            lambda: App(Agent("x", ScriptedProvider([]))),  # type: ignore[arg-type]
            ConfigurationError,
            r"App\(\[agent",
        ),
        (lambda: App("x"), ConfigurationError, r"App\(\[agent"),  # type: ignore[arg-type]
        (
            lambda: Agent("x", ScriptedProvider([]), tools=decorated),  # type: ignore[arg-type]
            ToolDefinitionError,
            r"\[tool",
        ),
        (
            lambda: Agent("x", ScriptedProvider([]), tools=[plain_function]),
            ToolDefinitionError,
            "decorate it with @tool",
        ),
        (lambda: App(None), ConfigurationError, r"App\(\[agent"),  # type: ignore[arg-type]
        # Every call would time out at once, crash its run's actor (NaN), or never end.
        *(
            (
                functools.partial(Agent, "x", ScriptedProvider([], timeout_seconds=timeout)),
                ConfigurationError,
                "the provider's timeout_seconds must be a number of seconds greater than 0",
            )
            for timeout in cast(list[float], [-1, 0, math.nan, math.inf, "30", True])
        ),
        (
            lambda: Agent("x", ScriptedProvider([]), instructions=5),  # type: ignore[arg-type]
            ConfigurationError,
            "instructions must be a string",
        ),
        (
            lambda: Agent("x", SyncProvider()),  # type: ignore[arg-type]
            ConfigurationError,
            r"complete\(\) must be async",
        ),
        (
            lambda: ScriptedProvider(None),  # type: ignore[arg-type]
            ConfigurationError,
            "replies",
        ),
        (
            lambda: ScriptedProvider("done"),  # type: ignore[arg-type]
            ConfigurationError,
            "replies",
        ),
        (
            lambda: ScriptedProvider(["hello"]),  # type: ignore[list-item]
            ConfigurationError,
            r"ProviderReply\(text='hello'\), not 'hello'",
        ),
    ],
    ids=[
        "app-of-one-agent",
        "app-of-a-name",
        "agent-with-one-tool",
        "undecorated-function",
        "app-of-none",
        *(f"provider-timeout-{t}" for t in ("negative", "zero", "nan", "inf", "str", "bool")),
        "instructions-int",
        "sync-provider",
        "scripted-replies-none",
        "scripted-replies-str",
        "scripted-replies-of-str",
    ],
)
def test_an_app_built_wrong_is_refused_saying_how_to_build_it(
    build: Callable[[], Any], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=fragment):
        build()


@pytest.mark.parametrize(
    "url",
    [
        "runs.db",
        "mysql://x/y",
        "postgresql://localhost/runs?pool_size=none",
        "postgresql://",
        "sqlite://host/x.db",
        "sqlite:///",
        "sqlite:///x.db?synchronous=sometimes",
        "sqlite:///x.db?busy_timeout_ms=soon",
        "sqlite:///x.db?bogus=1",
    ],
)
async def test_bad_store_urls_are_configuration_errors_and_create_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError):
        async with Runtime.open(url, plain_app(), **FAST):
            pytest.fail("the runtime opened")
    with pytest.raises(ConfigurationError):
        async with Client.open(url):
            pytest.fail("the client opened")
    assert list(tmp_path.iterdir()) == []


async def test_store_in_a_missing_directory_is_a_store_error_and_creates_nothing(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(StoreError, match="does not exist"):
        async with Runtime.open(f"sqlite:///{missing / 'runs.db'}", plain_app(), **FAST):
            pytest.fail("the runtime opened")
    assert not missing.exists()
    assert list(tmp_path.iterdir()) == []


def _table_names(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return sorted(name for (name,) in rows)
    finally:
        connection.close()


async def test_a_locked_new_database_is_a_store_error_and_gets_no_schema(db_url: str) -> None:
    # Running as root makes chmod useless, so the file is made unwritable another
    # real way: a second connection holds an exclusive lock on it.
    path = path_of(db_url)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("CREATE TABLE unrelated (x)")
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError, match="locked"):
            async with Runtime.open(f"{db_url}?busy_timeout_ms=50", plain_app(), **FAST):
                pytest.fail("the runtime opened")
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    assert _table_names(path) == ["unrelated"]


async def test_a_locked_database_refuses_writes_with_a_store_error_and_keeps_no_half(
    db_url: str,
) -> None:
    path = path_of(db_url)
    async with Runtime.open(f"{db_url}?busy_timeout_ms=50", plain_app(), **FAST) as rt:
        first = await rt.run("echo", "before")
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            with pytest.raises(StoreError, match="locked"):
                await rt.submit("echo", "during")
            with pytest.raises(StoreError, match="locked"):
                await rt.run("echo", "during")
            with pytest.raises(StoreError, match="locked"):
                await rt.cancel(first.id)
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        runs = await rt.runs()
        # The store still works once the lock is gone.
        after = await rt.run("echo", "after")
    assert [r.id for r in runs] == [first.id]
    assert after.state is RunState.COMPLETED


async def test_reopening_a_locked_migrated_database_is_a_store_error(db_url: str) -> None:
    path = path_of(db_url)
    async with Runtime.open(db_url, plain_app(), **FAST) as rt:
        await rt.submit("echo", 1)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError, match="locked"):
            async with Runtime.open(f"{db_url}?busy_timeout_ms=50", plain_app(), **FAST):
                pytest.fail("the runtime opened")
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    connection = sqlite3.connect(path)
    try:
        versions = connection.execute("SELECT version FROM schema_migrations").fetchall()
        count = connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        connection.close()
    assert versions == [(m.version,) for m in MIGRATIONS]
    assert count == 1


async def test_a_read_only_database_is_a_store_error(db_url: str) -> None:
    path = path_of(db_url)
    async with Runtime.open(db_url, plain_app(), **FAST) as rt:
        await rt.submit("echo", 1)
    with (
        unwritable(path, path.parent),
        pytest.raises(StoreError, match="unable to open database file"),
    ):
        async with Runtime.open(db_url, plain_app(), **FAST) as rt:
            await rt.submit("echo", 2)
    connection = sqlite3.connect(path)
    try:
        count = connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        connection.close()
    assert count == 1


# -- a Runtime or Client used after it closed --------------------------------------------


async def test_a_runtime_used_after_it_closed_refuses_each_call_at_once(store_url: str) -> None:
    async with Runtime.open(store_url, plain_app(), **FAST) as rt:
        run_id = await rt.submit("echo", 1)
        await rt.wait(run_id, timeout=10)
    # Each of them would otherwise wait forever for the Persister that stopped with it.
    writes: dict[str, Callable[[], Awaitable[object]]] = {
        "submit": lambda: rt.submit("echo", 2),
        "submit_many": lambda: rt.submit_many("echo", [3]),
        "run": lambda: rt.run("echo", 4),
        "cancel": lambda: rt.cancel(run_id),
        "reap_once": lambda: rt.reap_once(),
    }
    for name, call in writes.items():
        with anyio.fail_after(5), pytest.raises(RuntimeClosed, match="closed") as caught:
            await call()
        assert "Runtime.open" in str(caught.value), name
    # Reads go to the store the Runtime opened, and closed, itself.
    with pytest.raises(StoreError, match="is closed"):
        await rt.get(run_id)
    async with Client.open(store_url) as client:
        assert [r.id for r in await client.runs()] == [run_id]


async def test_a_client_used_after_it_closed_says_its_store_is_closed(store_url: str) -> None:
    async with Runtime.open(store_url, plain_app(), **FAST):
        pass
    async with Client.open(store_url) as client:
        run_id = await client.submit("echo", 1)
    for call in (
        lambda: client.get(run_id),
        lambda: client.submit("echo", 2),
        lambda: client.cancel(run_id),
        lambda: client.runs(),
    ):
        with anyio.fail_after(5), pytest.raises(StoreError, match="is closed"):
            await call()


# -- text no store can hold: a lone surrogate, as NUL ------------------------------------

LONE = "\ud800"
UNHOLDABLE = [pytest.param(f"x{LONE}", id="lone-surrogate"), pytest.param("x\x00", id="nul")]


@pytest.mark.parametrize("text", UNHOLDABLE)
async def test_text_no_store_can_hold_is_refused_alike_on_every_store(
    store_url: str, text: str
) -> None:
    async with Runtime.open(store_url, plain_app(), **FAST) as rt:
        with pytest.raises(InvalidInput, match="idempotency key"):
            await rt.submit("echo", 1, idempotency_key=text)
        with pytest.raises(InvalidInput, match="idempotency key"):
            await rt.run("echo", 1, idempotency_key=text)
        assert await rt.run_id_for_key(text) is None
        for read in (
            lambda: rt.get(text),
            lambda: rt.steps(text),
            lambda: rt.cancel(text),
            lambda: rt.approve(text),
            lambda: rt.wait_all([text], timeout=1),
        ):
            with pytest.raises(RunNotFound):
                await read()
        with pytest.raises(InvalidInput, match="search"):
            await rt.runs(search=text)
        with pytest.raises(InvalidInput, match="agent"):
            await rt.runs(agent=text)
        with pytest.raises(InvalidInput, match="run id"):
            RunCursor(created_at=1.0, id=text)
        async with Client.open(store_url) as client:
            with pytest.raises(UnknownAgent):
                await client.submit(text, 1)
        assert await rt.runs() == []


@pytest.mark.parametrize("text", UNHOLDABLE)
def test_an_agent_named_with_text_no_store_can_hold_is_refused(text: str) -> None:
    with pytest.raises(ConfigurationError, match="agent's name"):
        Agent(text, ScriptedProvider([]))


# -- a parameter of the wrong kind ---------------------------------------------------------

WRONG_KIND: list[Any] = [
    pytest.param(
        lambda c: c.submit_many("echo", None), "collection of inputs", id="submit-many-none"
    ),
    pytest.param(lambda c: c.submit_many("echo", 5), "collection of inputs", id="submit-many-int"),
    pytest.param(lambda c: c.wait_all(None, timeout=1), "sequence of run ids", id="wait-all-none"),
    pytest.param(lambda c: c.wait_all(5, timeout=1), "sequence of run ids", id="wait-all-int"),
    pytest.param(lambda c: c.wait("x", timeout=10**400), "timeout", id="wait-huge-int"),
    pytest.param(lambda c: c.runs(state="finished"), "state", id="runs-state"),
    pytest.param(lambda c: c.runs(reason=3), "reason", id="runs-reason"),
    pytest.param(lambda c: c.runs(mode="batch"), "mode", id="runs-mode"),
    pytest.param(lambda c: c.dead_letters(reason="gone"), "reason", id="dead-letters-reason"),
    pytest.param(lambda c: c.approvals(limit=-1), "limit", id="approvals-negative"),
    pytest.param(lambda c: c.approvals(limit=0), "limit", id="approvals-zero"),
    pytest.param(lambda c: c.approvals(limit="10"), "limit", id="approvals-str"),
    pytest.param(lambda c: c.approvals(limit=True), "limit", id="approvals-bool"),
    # Past a 64-bit integer, each store's driver refused it in words of its own.
    pytest.param(lambda c: c.approvals(limit=2**63), "limit", id="approvals-huge"),
    pytest.param(lambda c: c.runs(limit=2**63), "limit", id="runs-huge"),
    pytest.param(
        lambda c: c.resolve("x", applied=True, step=2**63), "step", id="resolve-huge-step"
    ),
    pytest.param(
        lambda c: c.purge(finished_before=timedelta(days=1), batch_runs=2**63),
        "batch_runs",
        id="purge-huge-batch",
    ),
    pytest.param(
        lambda c: c.forget_keys(older_than=timedelta(days=1), batch_keys=2**63),
        "batch_keys",
        id="forget-huge-batch",
    ),
    pytest.param(
        lambda c: c.purge(finished_before=timedelta(days=1), state="done"),
        "state",
        id="purge-state",
    ),
    # Taken for its truth, "false" would delete the dead letters an operator waits on.
    pytest.param(
        lambda c: c.purge(finished_before=timedelta(days=1), include_dead_letters="false"),
        "include_dead_letters",
        id="purge-include-str",
    ),
    pytest.param(
        lambda c: c.purge(finished_before=timedelta(days=1), dry_run=0),
        "dry_run",
        id="purge-dry-run-int",
    ),
    pytest.param(
        lambda c: c.forget_keys(older_than=timedelta(days=1), dry_run="no"),
        "dry_run",
        id="forget-dry-run-str",
    ),
]


@pytest.mark.parametrize(("call", "fragment"), WRONG_KIND)
async def test_a_parameter_of_the_wrong_kind_is_invalid_input_on_every_store(
    store_url: str, call: Callable[[Client], Awaitable[object]], fragment: str
) -> None:
    async with Runtime.open(store_url, plain_app(), **FAST) as rt:
        with pytest.raises(InvalidInput, match=fragment):
            await call(rt.client)
        assert await rt.runs() == []


async def test_a_state_reason_or_mode_given_by_its_value_filters_as_its_member(
    db_url: str,
) -> None:
    async with Runtime.open(db_url, plain_app(), **FAST) as rt:
        done = await rt.wait(await rt.submit("echo", 1), timeout=10)
        assert [r.id for r in await rt.runs(state="completed", reason="completed")] == [done.id]  # type: ignore[arg-type]
        assert [r.id for r in await rt.runs(mode="queued")] == [done.id]  # type: ignore[arg-type]
        assert await rt.runs(state="queued") == []  # type: ignore[arg-type]
        purged = await rt.purge(finished_before=timedelta(days=1), state="completed", dry_run=True)  # type: ignore[arg-type]
        assert purged.runs == 0


# -- a store given as something other than a URL or a Store ----------------------------


@pytest.mark.parametrize("given", [None, 5, b"sqlite:///runs.db"], ids=["none", "int", "bytes"])
async def test_a_store_that_is_neither_a_url_nor_a_store_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=r"sqlite:///runs\.db"):
        async with Runtime.open(given, plain_app(), **FAST):
            pytest.fail("the runtime opened")
    with pytest.raises(ConfigurationError, match=r"sqlite:///runs\.db"):
        async with Client.open(given):
            pytest.fail("the client opened")
    assert list(tmp_path.iterdir()) == []


async def test_a_path_given_for_a_store_url_names_the_url_to_give(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with pytest.raises(ConfigurationError, match=f"sqlite:///{path}"):
        async with Runtime.open(path, plain_app(), **FAST):  # type: ignore[arg-type]
            pytest.fail("the runtime opened")
    with pytest.raises(ConfigurationError, match=f"sqlite:///{path}"):
        async with Client.open(path):  # type: ignore[arg-type]
            pytest.fail("the client opened")
    assert not path.exists()


def test_a_client_made_from_a_url_or_a_wrong_app_says_how_to_open_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"Client\.open"):
        Client(f"sqlite:///{tmp_path / 'runs.db'}")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="app must be an App"):
        Client(cast(Any, object()), app="payer")  # type: ignore[arg-type]


async def test_a_runtime_called_from_another_event_loop_says_where_to_call_it(
    store_url: str,
) -> None:
    """Before, a submit from another thread's loop answered a future of that loop from
    this one, which asyncio does not allow, and a wait failed on a foreign future."""
    async with Runtime.open(store_url, plain_app(), **FAST) as rt:
        run_id = await rt.submit("echo", 1)
        raised: dict[str, BaseException] = {}

        def elsewhere() -> None:
            async def calls() -> None:
                for name, call in (
                    ("submit", lambda: rt.submit("echo", 2)),
                    ("run", lambda: rt.run("echo", 3)),
                    ("cancel", lambda: rt.cancel(run_id)),
                    ("wait", lambda: rt.wait(run_id, timeout=1)),
                    ("wait_all", lambda: rt.wait_all([run_id], timeout=1)),
                ):
                    try:
                        await asyncio.wait_for(call(), 5)
                    except BaseException as exc:
                        raised[name] = exc

            asyncio.run(calls())

        await anyio.to_thread.run_sync(elsewhere)
        assert [r.id for r in await rt.runs()] == [run_id]
    assert set(raised) == {"submit", "run", "cancel", "wait", "wait_all"}
    for exc in raised.values():
        assert isinstance(exc, ConfigurationError), exc
        assert "run_coroutine_threadsafe" in exc.message


async def test_a_read_from_another_event_loop_is_refused_and_the_runtime_still_closes(
    store_url: str,
) -> None:
    """Before, the first read of a fresh Runtime from another thread's loop waited for
    ever, and leaving the Runtime's block then hung too."""
    raised: dict[str, BaseException] = {}
    with anyio.fail_after(30):
        async with Runtime.open(store_url, plain_app(), **FAST) as rt:

            def elsewhere() -> None:
                async def calls() -> None:
                    for name, call in (
                        ("get", lambda: rt.get("nope")),
                        ("runs", lambda: rt.runs()),
                        ("steps", lambda: rt.steps("nope")),
                        ("approvals", lambda: rt.approvals()),
                        ("workers", lambda: rt.workers()),
                    ):
                        try:
                            await asyncio.wait_for(call(), 5)
                        except BaseException as exc:
                            raised[name] = exc

                asyncio.run(calls())

            await anyio.to_thread.run_sync(elsewhere)
            assert await rt.runs() == []
    assert set(raised) == {"get", "runs", "steps", "approvals", "workers"}
    for exc in raised.values():
        assert isinstance(exc, ConfigurationError), exc
        assert "opened on another event loop" in exc.message
