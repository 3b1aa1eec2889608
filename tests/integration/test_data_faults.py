"""Records the store refuses for what they hold, and records stored twice, through whole
runs on each dialect: a fail-soft record is dropped, never re-sent forever; a write still
fails closed; a record whose commit answer was lost costs nothing (G3-G5)."""

from __future__ import annotations

from typing import Any

import pytest

from leaseward import (
    Agent,
    App,
    ProviderReply,
    Reason,
    RecoveryPolicy,
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
from leaseward.runtime.errors import StoreError
from tests.integration.faults import (
    Action,
    Statement,
    fail,
    faulty_store,
    lose_answer,
    records_tool,
)
from tests.integration.support import Calls, capture_logs, events, one_call_agent

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.05}
LONE_SURROGATE = "\ud83d"


def refused_as_data() -> Action:
    """Refused as the store refuses data it cannot hold: the batch is written again
    request by request, and only the request that carries the picked record fails."""
    return fail("refused text", data_error=True)


def provider_records(statement: Statement) -> bool:
    return any(step.kind is StepKind.PROVIDER for step in statement.steps())


def records_outcomes(statement: Statement) -> bool:
    return any(step.settles for step in statement.steps())


async def test_a_read_record_refused_for_its_data_is_dropped_not_sent_again(
    store_url: str,
) -> None:
    calls = Calls()
    store, executor = await faulty_store(store_url)
    refusals = executor.inject(records_tool("lookup"), refused_as_data())
    app = App([one_call_agent("reader", ToolEffect.READ_ONLY, calls, tool_name="lookup")])
    with capture_logs() as logs:
        async with Runtime.open(store, app, **FAST) as rt:
            run = await rt.wait(await rt.submit("reader", None), timeout=10)
            journal = await rt.steps(run.id)
    await store.aclose()

    assert (run.state, run.result, run.requeues) == (RunState.COMPLETED, "done", 0)
    assert len(calls) == 1
    # Sent with the turn that rides with it, refused in its batch and again alone; sent
    # again without the turn, refused twice again; never sent behind the settle, which
    # stores the turn.
    assert refusals.fired == 4
    assert [s.kind for s in journal] == [StepKind.PROVIDER, StepKind.PROVIDER]
    dropped = [entry for entry in logs if entry["event"] == "step.dropped"]
    assert [(entry["seqs"], entry["error"]) for entry in dropped] == [([1], "refused text")]


async def test_a_provider_record_refused_for_its_data_does_not_block_the_settle(
    store_url: str,
) -> None:
    store, executor = await faulty_store(store_url)
    refusals = executor.inject(provider_records, refused_as_data())
    app = App([Agent("echo", ScriptedProvider([ProviderReply(text="done")]))])
    with capture_logs() as logs:
        async with Runtime.open(store, app, **FAST) as rt:
            run = await rt.wait(await rt.submit("echo", None), timeout=10)
            journal = await rt.steps(run.id)
    await store.aclose()

    assert (run.state, run.result) == (RunState.COMPLETED, "done")
    assert journal == []
    assert refusals.fired
    assert "step.dropped" in events(logs)


@pytest.mark.parametrize("effect", [ToolEffect.IDEMPOTENT_WRITE, ToolEffect.NON_IDEMPOTENT_WRITE])
async def test_a_write_outcome_refused_for_its_data_still_fails_closed(
    store_url: str, effect: ToolEffect
) -> None:
    calls = Calls()
    store, executor = await faulty_store(store_url)
    executor.inject(records_outcomes, refused_as_data())
    app = App([one_call_agent("payer", effect, calls, tool_name="charge")])
    with capture_logs() as logs:
        async with Runtime.open(store, app, **FAST) as rt:
            run = await rt.wait(await rt.submit("payer", None), timeout=10)
    await store.aclose()

    assert len(calls) == 1
    assert run.state in (RunState.FAILED, RunState.DEAD_LETTERED)
    assert run.reason in (Reason.AUDIT_FAILED, Reason.INTERRUPTED_WRITE)
    assert "audit.failed" in events(logs)


async def test_a_write_intent_refused_for_its_data_is_never_called(store_url: str) -> None:
    calls = Calls()
    store, executor = await faulty_store(store_url)
    refusals = executor.inject(records_tool("charge", StepStatus.STARTED), refused_as_data())
    app = App([one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")])
    async with Runtime.open(store, app, **FAST) as rt:
        run_id = await rt.submit("payer", None)
        with pytest.raises(TimeoutError):
            await rt.wait(run_id, timeout=0.3)
    await store.aclose()

    assert len(calls) == 0
    assert refusals.fired


async def test_a_provider_turn_whose_commit_answer_was_lost_costs_the_next_write_nothing(
    store_url: str,
) -> None:
    calls = Calls()
    store, executor = await faulty_store(store_url)
    # The commit that carries the turn (here the write's intent) goes through and its
    # answer is lost on the way back, as a store reports it: the outcome is unknown,
    # so the worker reads the journal back and finds both.
    lost = executor.inject(provider_records, lose_answer(), times=1)
    app = App([one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")])
    with capture_logs() as logs:
        async with Runtime.open(store, app, **FAST) as rt:
            run = await rt.wait(await rt.submit("payer", None), timeout=10)
            journal = await rt.steps(run.id)
    await store.aclose()

    assert lost.fired, "the fault never fired"
    assert (run.state, run.result, run.requeues) == (RunState.COMPLETED, "done", 0)
    assert len(calls) == 1
    assert [(s.seq, s.kind, s.status) for s in journal] == [
        (0, StepKind.PROVIDER, StepStatus.SUCCEEDED),
        (1, StepKind.TOOL, StepStatus.SUCCEEDED),
        (2, StepKind.PROVIDER, StepStatus.SUCCEEDED),
    ]
    assert "commit.stored" in events(logs)
    assert "step.dropped" not in events(logs)


async def test_an_intent_stored_but_answered_as_refused_is_withdrawn_not_left_open(
    store_url: str,
) -> None:
    calls = Calls()
    store, executor = await faulty_store(store_url)
    # The COMMIT of the turn and the intent goes through, and the worker hears "not
    # persisted": it does not call the write (G3), and its settlement withdraws the
    # intent it cannot know is not there, so the next attempt makes the call once
    # instead of taking it for an interrupted write.
    lost = executor.inject(provider_records, lose_answer(StoreError("answer lost")), times=1)
    app = App([one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")])
    async with Runtime.open(
        store, app, recovery=RecoveryPolicy(backoff_base_seconds=0.01), **FAST
    ) as rt:
        run = await rt.wait(await rt.submit("payer", None), timeout=10)
        journal = await rt.steps(run.id)
    await store.aclose()

    assert lost.fired, "the fault never fired"
    assert (run.state, run.result, run.requeues) == (RunState.COMPLETED, "done", 1)
    assert len(calls) == 1
    assert [(s.seq, s.kind, s.status, s.epoch) for s in journal] == [
        (0, StepKind.PROVIDER, StepStatus.SUCCEEDED, 1),
        (1, StepKind.TOOL, StepStatus.SUCCEEDED, 2),
        (2, StepKind.PROVIDER, StepStatus.SUCCEEDED, 2),
    ]


async def test_lone_surrogates_in_a_reply_are_journaled_and_resume_to_the_same_keys(
    store_url: str,
) -> None:
    seen: list[ToolContext] = []

    @tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    async def note(ctx: ToolContext, text: str) -> str:
        seen.append(ctx)
        if len(seen) == 1:
            raise ConnectionError("the first attempt dies mid-call")
        return text

    reply = ProviderReply(
        text=f"thinking {LONE_SURROGATE}",
        tool_calls=[ToolCall("note", {"text": LONE_SURROGATE}, f"id-{LONE_SURROGATE}")],
    )
    provider = ScriptedProvider([reply, ProviderReply(text=f"done {LONE_SURROGATE}")])
    app = App([Agent("writer", provider, tools=[note])])
    async with Runtime.open(
        store_url, app, recovery=RecoveryPolicy(backoff_base_seconds=0.01), **FAST
    ) as rt:
        run = await rt.wait(await rt.submit("writer", LONE_SURROGATE), timeout=10)
        journal = await rt.steps(run.id)

    assert run.state is RunState.COMPLETED, run.error
    assert run.requeues == 1
    assert len(seen) == 2
    # The resumed attempt rebuilt the call from the journal: same id, same key.
    assert seen[0].call_id == seen[1].call_id
    assert seen[0].idempotency_key == seen[1].idempotency_key
    assert all(s.output is None or isinstance(s.output, dict | str) for s in journal)
    assert isinstance(run.result, str) and run.result.startswith("done")


async def test_a_write_asked_for_by_a_dropped_provider_turn_waits_for_a_recorded_one(
    store_url: str,
) -> None:
    calls = Calls()
    store, executor = await faulty_store(store_url)
    # The first provider record only: refused in its batch, then alone.
    dropped = executor.inject(provider_records, refused_as_data(), times=2)
    app = App([one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")])
    quick_retry = RecoveryPolicy(backoff_base_seconds=0.01)
    async with Runtime.open(store, app, recovery=quick_retry, **FAST) as rt:
        run = await rt.wait(await rt.submit("payer", None), timeout=10)
        journal = await rt.steps(run.id)
    await store.aclose()

    assert dropped.fired == 2
    assert (run.state, run.requeues) == (RunState.COMPLETED, 1)
    assert len(calls) == 1
    # The intent is never in the journal without the turn that asked for it: a resumed
    # run would not know the call, ask the model again, and could pay twice.
    intent_at = next(s.seq for s in journal if s.tool == "charge")
    assert [s.kind for s in journal if s.seq < intent_at] == [StepKind.PROVIDER]
