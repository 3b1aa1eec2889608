"""Bad input of every kind, generated: submit payloads, provider replies, tool results.

Each gives one clear error, recorded in the journal or raised to the caller; the
runtime never crashes, every submitted run reaches a terminal state, and a
well-behaved run beside it in the same process is unaffected. Each example gets
its own SQLite file: hypothesis runs the body many times per test, so the store
is made inside it rather than by a function-scoped fixture.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic_core import to_jsonable_python

from leaseward import (
    Agent,
    App,
    InvalidInput,
    ProviderError,
    ProviderReply,
    ProviderRequest,
    Reason,
    RecoveryPolicy,
    Role,
    RunInfo,
    RunState,
    Runtime,
    ScriptedProvider,
    StepKind,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.runtime.conversation import (
    normalize_reply,
    reply_to_json,
    with_unjournalable_arguments_refused,
)
from leaseward.runtime.encoding import (
    MAX_ARGUMENTS_BYTES,
    MAX_INPUT_BYTES,
    MAX_JSON_DEPTH,
    MAX_RESULT_BYTES,
    dump_json,
    load_json,
)
from tests.integration.support import capture_logs, events

EXAMPLES = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
WAIT_SECONDS = 10.0
# Events that say the runtime, not the input, had a problem.
UNWELL = {"actor.crashed", "persister.batch_failed", "step.record_failed", "step.dropped"}
FAST: dict[str, Any] = {
    "poll_interval_seconds": 0.01,
    "reap_interval_seconds": 0.05,
    "recovery": RecoveryPolicy(backoff_base_seconds=0.01),
}

LONE = "\ud83d"
# Any code point, lone surrogates and NUL included: what decoded JSON may hold.
any_text = st.text(
    st.characters(codec=None, exclude_categories=())
    | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
    | st.just("\x00"),
    max_size=12,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(any_text, inner, max_size=3)
        | st.tuples(inner, inner)
    ),
    max_leaves=8,
)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def sized(size: int) -> str:
    return "x" * size


def not_json() -> list[Any]:
    return [object(), {1, 2}, b"bytes", float("nan"), {1: "int key"}, {None: "none key"}]


# Values a caller or a tool may hand over: JSON, not quite JSON, too big, too deep.
bad_values = (
    json_values
    | st.sampled_from(not_json())
    | st.dictionaries(any_text, st.sampled_from(not_json()), min_size=1, max_size=2)
    | st.builds(sized, st.sampled_from([1000, MAX_INPUT_BYTES - 16, MAX_RESULT_BYTES + 1]))
    | st.builds(nested, st.sampled_from([MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH + 1, 5000]))
)


def echo_agent() -> Agent:
    return Agent("echo", ScriptedProvider([ProviderReply(text="done")]))


@asynccontextmanager
async def runtime(*agents: Agent) -> AsyncIterator[Runtime]:
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'runs.db'}"
        async with Runtime.open(url, App([echo_agent(), *agents]), **FAST) as rt:
            yield rt


async def beside_a_good_run(rt: Runtime, agent: str, value: Any) -> RunInfo:
    """Runs ``agent`` on ``value`` beside an echo run, which must be unaffected."""
    good = await rt.submit("echo", {"good": True})
    bad = await rt.submit(agent, value)
    finished = await rt.wait(bad, timeout=WAIT_SECONDS)
    control = await rt.wait(good, timeout=WAIT_SECONDS)
    assert (control.state, control.result) == (RunState.COMPLETED, "done")
    assert [step.kind for step in await rt.steps(good)] == [StepKind.PROVIDER]
    return finished


def run(body: Callable[[], Any]) -> None:
    anyio.run(body, backend="asyncio")


@EXAMPLES
@given(bad_values)
def test_submit_accepts_a_json_value_or_refuses_it_with_invalid_input(value: Any) -> None:
    async def body() -> None:
        async with runtime() as rt:
            try:
                expected = load_json(dump_json(value, limit=MAX_INPUT_BYTES))
            except InvalidInput:
                expected = InvalidInput
            try:
                run_id = await rt.submit("echo", value)
            except InvalidInput as exc:
                assert expected is InvalidInput, exc
                assert exc.message.startswith("the run input ")
                assert await rt.runs() == []
                return
            assert expected is not InvalidInput
            record = await rt.store.get_run(run_id)
            assert record is not None and record.input == expected
            finished = await rt.wait(run_id, timeout=WAIT_SECONDS)
            assert (finished.state, finished.result) == (RunState.COMPLETED, "done")

    run(body)


# A tool call as a provider may send it: any name, arguments of any shape and size,
# ids missing, repeated or not text.
call_specs = st.tuples(
    st.sampled_from(["lookup", "charge"]) | any_text,
    st.fixed_dictionaries({"q": any_text})
    | st.fixed_dictionaries({"amount": st.integers()})
    | st.fixed_dictionaries({"q": st.builds(sized, st.just(MAX_ARGUMENTS_BYTES + 1))})
    | st.dictionaries(any_text, json_values, max_size=3)
    | bad_values,
    st.sampled_from(["", "c1", "c1"]) | any_text | st.none(),
)
reply_specs = st.tuples(st.none() | any_text, st.lists(call_specs, max_size=4))


@EXAMPLES
@given(reply_specs)
@example((None, []))
@example(
    (
        f"text {LONE}",
        [
            ("lookup", {"q": LONE}, f"id {LONE}"),
            (f"name {LONE}", {}, "c1"),
            ("charge", {"amount": 5}, "c1"),
            ("lookup", {f"key {LONE}": 1}, ""),
        ],
    )
)
def test_any_provider_reply_ends_in_a_terminal_state_with_a_readable_journal(
    spec: tuple[str | None, list[tuple[str, Any, Any]]],
) -> None:
    text, calls = spec
    executed: list[str] = []

    @tool(timeout_seconds=5)
    async def lookup(ctx: ToolContext, q: str) -> str:
        executed.append(ctx.call_id)
        return q

    @tool(effect=ToolEffect.IDEMPOTENT_WRITE, timeout_seconds=5)
    async def charge(ctx: ToolContext, amount: int) -> dict[str, int]:
        executed.append(ctx.call_id)
        return {"charged": amount}

    def reply(request: ProviderRequest) -> ProviderReply:
        if any(message.role is Role.ASSISTANT for message in request.messages):
            return ProviderReply(text="done")
        return ProviderReply(text, [ToolCall(name, args, call_id) for name, args, call_id in calls])

    agent = Agent("model", ScriptedProvider(reply), tools=[lookup, charge])
    # A reply the provider cannot build (arguments not a mapping, a name not text) cannot
    # go in the journal at all; a call whose arguments are no JSON (a NaN, a key 1) is
    # answered to the model as one whose arguments could not be read.
    refusal: ProviderError | InvalidInput | None = None
    try:
        built = normalize_reply(reply(ProviderRequest("r", "m", (), ())), 0)
        try:
            dump_json(reply_to_json(built), what="the provider reply")
        except InvalidInput:
            refused = with_unjournalable_arguments_refused(built)
            dump_json(reply_to_json(refused), what="the provider reply")
    except (ProviderError, InvalidInput) as exc:
        refusal = exc

    async def body() -> None:
        with capture_logs() as logs:
            async with runtime(agent) as rt:
                finished = await beside_a_good_run(rt, "model", None)
                journal = await rt.steps(finished.id)
        assert not UNWELL & set(events(logs)), events(logs)
        if refusal is not None:
            # Its error ends the run, and the journal holds nothing of it.
            assert (finished.state, finished.reason) == (
                RunState.DEAD_LETTERED,
                Reason.NOT_RETRYABLE,
            )
            assert refusal.message in (finished.error or "")
            assert journal == []
            return
        assert finished.state is RunState.COMPLETED, finished.error
        # A reply without calls is the last; its text, whatever it holds, the result.
        assert finished.result == ("done" if calls else text)
        # Nothing was left out of the journal: every turn, and an answer to each call.
        kinds = [step.kind for step in journal]
        assert kinds.count(StepKind.PROVIDER) == (2 if calls else 1)
        assert kinds.count(StepKind.TOOL) == len(calls)
        for step in journal:
            for field in (step.tool, step.call_id, step.error):
                assert field is None or "\x00" not in field
                (field or "").encode()
        assert len(executed) <= len(calls)

    run(body)


def as_recorded(value: Any) -> Any:
    """A result as the journal keeps it: JSON as it is, else as pydantic encodes it;
    InvalidInput when neither can be recorded."""
    try:
        return load_json(dump_json(value, limit=MAX_RESULT_BYTES))
    except InvalidInput:
        pass
    try:
        return load_json(dump_json(to_jsonable_python(value), limit=MAX_RESULT_BYTES))
    except (InvalidInput, ValueError):
        return InvalidInput


@EXAMPLES
@given(bad_values)
def test_any_tool_result_is_recorded_or_answered_as_an_error_or_for_a_write_summarized(
    value: Any,
) -> None:
    @tool(timeout_seconds=5)
    async def produce(ctx: ToolContext) -> Any:
        return value

    @tool(effect=ToolEffect.IDEMPOTENT_WRITE, timeout_seconds=5)
    async def keep(ctx: ToolContext) -> Any:
        return value

    provider = ScriptedProvider(
        [
            ProviderReply(tool_calls=[ToolCall("produce"), ToolCall("keep")]),
            ProviderReply(text="done"),
        ]
    )
    agent = Agent("producer", provider, tools=[produce, keep])
    expected = as_recorded(value)

    async def body() -> None:
        async with runtime(agent) as rt:
            finished = await beside_a_good_run(rt, "producer", None)
            journal = await rt.steps(finished.id)
        assert (finished.state, finished.result) == (RunState.COMPLETED, "done")
        outputs = [step.output for step in journal if step.kind is StepKind.TOOL]
        assert len(outputs) == 2
        read, write = outputs
        if expected is InvalidInput:
            assert isinstance(read, dict) and set(read) == {"error"}, read
            # The write ran: it is never reported as failed.
            assert isinstance(write, dict) and write["status"] == "succeeded", write
        else:
            assert read == write == expected

    run(body)
