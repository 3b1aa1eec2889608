"""Operator actions on dead letters: redrive and resolve, each under a new epoch (G9)."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from leaseward import (
    Agent,
    App,
    Client,
    IllegalTransition,
    InvalidInput,
    OtherCallInterrupted,
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
from leaseward.runtime.commits import Stored
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import (
    Event,
    RecoveryAction,
    RecoveryPolicy,
    RunMode,
    decide_recovery,
)
from leaseward.runtime.settlements import Settlement
from leaseward.storage import BatchItem, SQLStore, open_store
from tests.integration.support import Calls, ghost_claims, intent, one_call_agent, provider_step
from tests.integration.test_leases import CHARGE, FAST

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


async def test_a_cancel_asked_before_an_interrupted_write_outlives_its_resolve(
    store_url: str,
) -> None:
    """An operator cancels a run that charges turn after turn; its worker dies mid-charge.
    Recording that charge's outcome must not set the run charging again."""
    calls = Calls()
    agent = one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")
    agent.provider = ScriptedProvider([CHARGE, ProviderReply(text="done")])
    ghost = await ghost_run(store_url)
    store = await open_store(store_url)
    try:
        assert await Client(store).cancel(ghost)
    finally:
        await store.aclose()
    async with Runtime.open(store_url, App([agent]), **FAST) as rt:
        run_id = await dead_lettered(rt, ghost)
        assert (await rt.get(run_id)).cancel_requested
        reopened = await rt.resolve(run_id, applied=True, operator="alice")
        assert (reopened.state, reopened.cancel_requested) == (RunState.QUEUED, True)
        run = await rt.wait(run_id, timeout=10)
        journal = await rt.steps(run_id)

    assert (run.state, run.reason) == (RunState.CANCELLED, Reason.CANCELLED)
    assert len(calls) == 0, "the run went on charging after it was cancelled"
    assert [(step.seq, step.status) for step in journal] == [
        (0, StepStatus.SUCCEEDED),
        (1, StepStatus.SUCCEEDED),
    ]


async def test_a_redrive_drops_a_cancel_asked_before_the_run_was_dead_lettered(
    store_url: str,
) -> None:
    store = await open_store(store_url)
    try:
        opened = intent(1, ToolEffect.NON_IDEMPOTENT_WRITE, "k")
        run_id = await ghost_claims(store, "payer", (provider_step(0, CHARGE), opened))
        assert await Client(store).cancel(run_id)
        run = await store.get_run(run_id)
        assert run is not None
        failed = msgspec.structs.replace(opened, status=StepStatus.FAILED, settles=True)
        settlement = Settlement(Event.DEAD_LETTER, Reason.NOT_RETRYABLE, error="it raised")
        [stored] = await store.commit_batch(
            [BatchItem(run_id, run.epoch, steps=(failed,), settlement=settlement)]
        )
        assert isinstance(stored, Stored)
    finally:
        await store.aclose()
    agent = one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, Calls(), tool_name="charge")
    agent.provider = ScriptedProvider([CHARGE, ProviderReply(text="done")])
    async with Runtime.open(store_url, App([agent]), **FAST) as rt:
        assert (await rt.get(run_id)).cancel_requested
        redriven = await rt.redrive(run_id)
        assert (redriven.state, redriven.cancel_requested) == (RunState.QUEUED, False)
        finished = await rt.wait(run_id, timeout=10)
    assert (finished.state, finished.result) == (RunState.COMPLETED, "done")


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


# -- every dead letter has a way out (G9) ------------------------------------------------


def dead_letter_reasons() -> set[Reason]:
    """Every reason recovery can dead-letter a run with, over all of its inputs."""
    reasons: set[Reason] = set()
    for effect, status, failure_class, reaped, audit_failed, requeues in itertools.product(
        [None, *ToolEffect],
        [None, *StepStatus],
        FailureClass,
        [False, True],
        [False, True],
        [0, 3],
    ):
        recovery = decide_recovery(
            mode=RunMode.QUEUED,
            requeues=requeues,
            last_effect=effect,
            last_status=status,
            failure_class=failure_class,
            reaped=reaped,
            audit_failed=audit_failed,
            policy=RecoveryPolicy(max_requeues=3),
        )
        if recovery.action is RecoveryAction.DEAD_LETTER:
            assert recovery.reason is not None
            reasons.add(recovery.reason)
    return reasons


async def dead_letter(store: SQLStore, reason: Reason, *, outcome: StepStatus | None) -> str:
    """A run dead-lettered with ``reason`` by its worker, over a charge whose outcome the
    journal holds (``outcome``) or not (None: its intent is still open)."""
    opened = intent(1, ToolEffect.NON_IDEMPOTENT_WRITE, "k")
    run_id = await ghost_claims(store, "payer", (provider_step(0, CHARGE), opened))
    run = await store.get_run(run_id)
    assert run is not None
    steps: tuple[StepWrite, ...] = ()
    if outcome is not None:
        steps = (msgspec.structs.replace(opened, status=outcome, settles=True),)
    if outcome is StepStatus.SUCCEEDED:
        steps = (msgspec.structs.replace(steps[0], output_json='{"applied":5}'),)
    settlement = Settlement(Event.DEAD_LETTER, reason, error=f"dead-lettered {reason.value}")
    [stored] = await store.commit_batch(
        [BatchItem(run_id, run.epoch, steps=steps, settlement=settlement)]
    )
    assert isinstance(stored, Stored)
    return run_id


async def test_a_verdict_bound_to_a_step_lands_only_on_the_call_at_that_step(
    store_url: str,
) -> None:
    """An operator checked the call at one step; the run since resumed and was interrupted
    at another (someone resolved the first meanwhile). The verdict must not land there."""
    store = await open_store(store_url)
    try:
        run_id = await dead_letter(store, Reason.INTERRUPTED_WRITE, outcome=None)
        client = Client(store)
        with pytest.raises(
            OtherCallInterrupted, match=r"call call-1 of charge \(step 1\), not step 3"
        ):
            await client.resolve(run_id, applied=False, operator="alice", step=3)
        for bad in (-1, True, "1"):
            with pytest.raises(InvalidInput, match="step"):
                await client.resolve(run_id, applied=False, step=bad)  # type: ignore[arg-type]
        unchanged = await client.get(run_id)
        assert (unchanged.state, unchanged.reason) == (
            RunState.DEAD_LETTERED,
            Reason.INTERRUPTED_WRITE,
        )
        assert (await client.steps(run_id))[1].status is StepStatus.STARTED
        resolved = await client.resolve(run_id, applied=True, operator="alice", step=1)
        assert resolved.state is RunState.QUEUED
    finally:
        await store.aclose()


# (reason, the charge's recorded outcome or None for an open intent, the operator action)
DEAD_LETTERS = [
    (Reason.INTERRUPTED_WRITE, None, "resolve"),
    # The stranded case: the outcome's commit went unanswered, the worker failed closed,
    # yet the outcome is in the journal. Nothing is left to decide: redrive.
    (Reason.INTERRUPTED_WRITE, StepStatus.SUCCEEDED, "redrive"),
    (Reason.NOT_RETRYABLE, StepStatus.SUCCEEDED, "redrive"),
    (Reason.NOT_RETRYABLE, StepStatus.FAILED, "redrive"),
    (Reason.RETRIES_EXHAUSTED, StepStatus.SUCCEEDED, "redrive"),
]


def test_the_walk_covers_every_dead_letter_reason() -> None:
    assert dead_letter_reasons() == {reason for reason, _, _ in DEAD_LETTERS}


@pytest.mark.parametrize(("reason", "outcome", "action"), DEAD_LETTERS)
async def test_every_dead_letter_has_an_operator_action_that_moves_it(
    store_url: str, reason: Reason, outcome: StepStatus | None, action: str
) -> None:
    calls = Calls()
    agent = one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")
    store = await open_store(store_url)
    try:
        run_id = await dead_letter(store, reason, outcome=outcome)
        dead = await store.get_run(run_id)
        assert dead is not None and (dead.state, dead.reason) == (RunState.DEAD_LETTERED, reason)
        # The other action refuses, saying which one applies.
        if action == "resolve":
            with pytest.raises(IllegalTransition, match="needs `resolve`"):
                await store.redrive(run_id)
            moved = await store.resolve(run_id, applied=True, operator="alice")
        else:
            refusal = "redrive" if reason is Reason.INTERRUPTED_WRITE else "interrupted_write"
            with pytest.raises(IllegalTransition, match=refusal):
                await store.resolve(run_id, applied=True, operator="alice")
            moved = await store.redrive(run_id)
        assert (moved.state, moved.epoch) == (RunState.QUEUED, dead.epoch + 1)
        async with Runtime.open(store, App([agent]), **FAST) as rt:
            run = await rt.wait(run_id, timeout=10)
            journal = await rt.steps(run_id)
    finally:
        await store.aclose()

    assert (run.state, run.result) == (RunState.COMPLETED, "done")
    assert len(calls) == 0, "the charge ran again"
    assert [s.status for s in journal if s.tool == "charge"] == [outcome or StepStatus.SUCCEEDED]
