"""The bound on an intent's shielded commit, kept by one timer for every run.

An intent is committed in a shielded scope, so that a stop landing meanwhile waits for
the answer; the bound is there for a store that never answers. The runs share one
timer for their bounds (``SharedBounds``): a timer of each scope's own was put on the
event loop and taken off at every write, for a bound almost never reached.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

import anyio
import pytest

from leaseward import StepStatus, ToolEffect
from leaseward.actors import Persister, SharedBounds, run_actor
from leaseward.runtime.clock import SystemClock
from leaseward.runtime.commits import CommitOutcome
from leaseward.storage import BatchItem, open_store
from tests.integration.support import (
    Calls,
    PersistFn,
    capture_logs,
    one_call_agent,
    run_by_hand,
)

pytestmark = pytest.mark.anyio

SLACK_SECONDS = 0.05
BOUND_SECONDS = 0.3
WAIT_SECONDS = 10.0


class CountedTimers:
    """Counts the timers put on the running event loop from now on."""

    def __init__(self) -> None:
        self.count = 0
        self._loop = asyncio.get_running_loop()
        call_at = self._loop.call_at

        def counted(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return call_at(when, callback, *args, **kwargs)

        # On the instance: the class's method comes back when it is deleted.
        setattr(self._loop, "call_at", counted)  # noqa: B010

    def close(self) -> None:
        delattr(self._loop, "call_at")


async def test_a_scope_is_cancelled_once_its_deadline_has_passed() -> None:
    bounds = SharedBounds(SLACK_SECONDS)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with anyio.fail_after(WAIT_SECONDS):
        with anyio.CancelScope(shield=True) as scope:
            bounds.bound(scope, started + 0.1)
            try:
                await anyio.sleep(WAIT_SECONDS)
            finally:
                bounds.release(scope)
    waited = loop.time() - started
    assert scope.cancelled_caught
    # Not before its deadline; the upper side is only a loaded machine's margin.
    assert 0.1 <= waited < WAIT_SECONDS / 2
    assert len(bounds) == 0


async def test_scopes_released_in_time_are_never_cancelled_and_share_one_timer() -> None:
    bounds = SharedBounds(SLACK_SECONDS)
    loop = asyncio.get_running_loop()
    timers = CountedTimers()
    try:
        scopes = []
        first_deadline = loop.time() + BOUND_SECONDS
        while loop.time() < first_deadline - BOUND_SECONDS / 2:
            with anyio.CancelScope(shield=True) as scope:
                bounds.bound(scope, loop.time() + BOUND_SECONDS)
                await anyio.lowlevel.checkpoint()
                bounds.release(scope)
            scopes.append(scope)
        assert timers.count == 1
        # Past every deadline: the timer fires, finds nobody, and is not set again.
        await anyio.sleep(BOUND_SECONDS + 3 * SLACK_SECONDS)
    finally:
        timers.close()
    assert len(scopes) > 100
    assert not any(scope.cancel_called for scope in scopes)
    # The test's own sleep put the second.
    assert timers.count == 2
    assert len(bounds) == 0


async def test_an_earlier_deadline_given_after_a_later_one_is_kept() -> None:
    bounds = SharedBounds(SLACK_SECONDS)
    loop = asyncio.get_running_loop()
    late = anyio.CancelScope(shield=True)
    bounds.bound(late, loop.time() + WAIT_SECONDS)
    started = loop.time()
    with anyio.fail_after(WAIT_SECONDS / 2):
        with anyio.CancelScope(shield=True) as early:
            bounds.bound(early, started + 0.1)
            await anyio.sleep(WAIT_SECONDS)
    assert early.cancelled_caught
    assert not late.cancel_called
    assert len(bounds) == 1
    bounds.release(late)


async def test_an_intent_the_store_never_answers_is_given_up_at_its_bound(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write is never called: without an answer, the intent is read back, found not
    stored, and the run fails closed instead of waiting on its shielded commit forever."""
    monkeypatch.setattr(run_actor, "SETTLE_TIMEOUT_SECONDS", BOUND_SECONDS)
    calls = Calls()
    agent = one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")
    store = await open_store(db_url, clock=SystemClock())
    intents_sent: list[float] = []

    def intents_never_answered(persister: Persister) -> PersistFn:
        async def never_answered(item: BatchItem) -> CommitOutcome:
            intents_sent.append(time.monotonic())
            await anyio.sleep_forever()
            raise AssertionError("never answered")

        def persist(item: BatchItem) -> Awaitable[CommitOutcome]:
            if any(step.status is StepStatus.STARTED and not step.withdraws for step in item.steps):
                return never_answered(item)
            return persister.persist(item)

        return persist

    run = await run_by_hand(
        store,
        agent,
        lease_seconds=30.0,
        margin_seconds=1.0,
        persist_through=intents_never_answered,
        bounds=SharedBounds(SLACK_SECONDS),
        timeout_seconds=WAIT_SECONDS,
    )
    journal = await store.list_steps(run.record.id)
    await store.aclose()
    settlement, ended = run.settlement, run.ended_at

    assert len(calls) == 0
    assert len(intents_sent) == 1
    assert ended - intents_sent[0] >= BOUND_SECONDS
    assert settlement is not None and settlement.error is not None
    assert "the intent of charge (call call-1) could not be stored" in settlement.error
    assert [step for step in journal if step.tool == "charge"] == []


async def test_a_settlement_the_store_never_answers_is_given_up_at_its_bound_and_said(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store locked past the bound leaves the settlement on its way: it may still be
    stored after the actor gave up, or the reaper settles the run later. Either way the
    worker's log is the only place that can say the actor stopped without an answer."""
    monkeypatch.setattr(run_actor, "SETTLE_TIMEOUT_SECONDS", BOUND_SECONDS)
    calls = Calls()
    agent = one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")
    store = await open_store(db_url, clock=SystemClock())

    def settlements_never_answered(persister: Persister) -> PersistFn:
        async def never_answered(item: BatchItem) -> CommitOutcome:
            await anyio.sleep_forever()
            raise AssertionError("never answered")

        def persist(item: BatchItem) -> Awaitable[CommitOutcome]:
            if item.settlement is not None:
                return never_answered(item)
            return persister.persist(item)

        return persist

    with capture_logs() as logs:
        run = await run_by_hand(
            store,
            agent,
            lease_seconds=30.0,
            margin_seconds=1.0,
            persist_through=settlements_never_answered,
            timeout_seconds=WAIT_SECONDS,
        )
    await store.aclose()

    assert len(calls) == 1
    assert run.settlement is None
    [line] = [entry for entry in logs if entry["event"] == "run.settle_unanswered"]
    assert (line["log_level"], line["run_id"], line["transition"]) == (
        "error",
        run.record.id,
        "complete",
    )
    assert f"within {BOUND_SECONDS:g} s" in line["error"]
