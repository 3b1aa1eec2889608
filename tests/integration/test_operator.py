"""Operator actions on dead letters: redrive and resolve, each under a new epoch (G9)."""

from __future__ import annotations

import pytest
from support import Calls, one_call_agent
from test_leases import CHARGE, FAST, ghost_claims, intent, provider_step

from leaseward import (
    Agent,
    App,
    IllegalTransition,
    ProviderError,
    ProviderReply,
    ProviderRequest,
    Reason,
    Role,
    RunNotFound,
    RunState,
    Runtime,
    ScriptedProvider,
    StepStatus,
    ToolEffect,
)
from leaseward.storage import open_store

pytestmark = pytest.mark.anyio


async def ghost_run(store_url: str) -> str:
    """A run whose worker died in a non-idempotent call. Made before any runtime is
    open: one would claim the run first (on PostgreSQL it hears of it at once)."""
    store = await open_store(store_url)
    try:
        return await ghost_claims(
            store,
            "payer",
            (provider_step(0, CHARGE), intent(1, ToolEffect.NON_IDEMPOTENT_WRITE, "k")),
        )
    finally:
        await store.aclose()


async def dead_lettered(rt: Runtime, run_id: str) -> str:
    run = await rt.wait(run_id, timeout=10)
    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    return run_id


@pytest.mark.parametrize("applied", [True, False])
async def test_resolve_resumes_an_interrupted_write_without_running_it(
    store_url: str, applied: bool
) -> None:
    calls = Calls()
    seen: list[ProviderRequest] = []

    def answer(request: ProviderRequest) -> ProviderReply:
        seen.append(request)
        return ProviderReply(text="done")

    agent = one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")
    agent.provider = ScriptedProvider([CHARGE, answer])
    ghost = await ghost_run(store_url)
    async with Runtime.open(store_url, App([agent]), **FAST) as rt:
        run_id = await dead_lettered(rt, ghost)
        with pytest.raises(IllegalTransition, match="resolve"):
            await rt.redrive(run_id)
        reopened = await rt.resolve(run_id, applied=applied, operator="alice", note="checked")
        assert (reopened.state, reopened.epoch) == (RunState.QUEUED, 2)
        run = await rt.wait(run_id, timeout=10)
        journal = await rt.steps(run_id)
        with pytest.raises(IllegalTransition, match="interrupted_write"):
            await rt.resolve(run_id, applied=True)

    assert (run.state, run.result) == (RunState.COMPLETED, "done")
    assert len(calls) == 0, "the interrupted call ran again"
    decided = journal[1]
    assert decided.status is (StepStatus.SUCCEEDED if applied else StepStatus.FAILED)
    assert decided.resolved_by == "alice" and decided.resolved_at is not None
    assert decided.output["resolution"] == ("applied" if applied else "not_applied")
    tool_messages = [m for m in seen[0].messages if m.role is Role.TOOL]
    assert len(tool_messages) == 1 and "alice" in (tool_messages[0].content or "")


async def test_redrive_requeues_a_not_retryable_run_under_a_new_epoch(store_url: str) -> None:
    broken = [True]

    def answer(request: ProviderRequest) -> ProviderReply:
        if broken[0]:
            raise ProviderError("invalid api key", failure_class="auth")
        return ProviderReply(text="ok")

    app = App([Agent("chat", ScriptedProvider(answer))])
    async with Runtime.open(store_url, app, **FAST) as rt:
        run_id = await rt.submit("chat", "hi")
        dead = await rt.wait(run_id, timeout=10)
        assert (dead.state, dead.reason) == (RunState.DEAD_LETTERED, Reason.NOT_RETRYABLE)
        assert [r.id for r in await rt.dead_letters(reason=Reason.NOT_RETRYABLE)] == [run_id]
        assert await rt.dead_letters(reason=Reason.INTERRUPTED_WRITE) == []
        broken[0] = False
        redriven = await rt.redrive(run_id)
        assert (redriven.state, redriven.requeues, redriven.epoch) == (
            RunState.QUEUED,
            0,
            dead.epoch + 1,
        )
        run = await rt.wait(run_id, timeout=10)
        with pytest.raises(IllegalTransition, match="completed"):
            await rt.redrive(run_id)
        with pytest.raises(RunNotFound):
            await rt.redrive("missing")
    assert (run.state, run.result, run.epoch) == (RunState.COMPLETED, "ok", dead.epoch + 2)
