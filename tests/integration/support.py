"""Test support: small agent kits, polling, captured logs, and runs set up by hand."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

import anyio
import attrs
import structlog

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.actors import LeaseKeeper, Persister, RunActor, RunSettings, SharedBounds
from leaseward.client import new_run_id
from leaseward.runtime.clock import SystemClock
from leaseward.runtime.commits import CommitOutcome, Stored
from leaseward.runtime.conversation import normalize_reply, reply_to_json
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import RunMode, StepKind, StepStatus
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.storage import BatchItem, SQLStore

PersistFn = Callable[[BatchItem], Awaitable[CommitOutcome]]


class Calls:
    """Counts tool executions, with what each one was given."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def record(self, ctx: ToolContext, **arguments: Any) -> None:
        self.seen.append(
            {
                "run_id": ctx.run_id,
                "epoch": ctx.epoch,
                "call_id": ctx.call_id,
                "key": ctx.idempotency_key,
                **arguments,
            }
        )

    def __len__(self) -> int:
        return len(self.seen)


def one_call_agent(
    name: str,
    effect: ToolEffect,
    calls: Calls,
    *,
    tool_name: str = "act",
    timeout_seconds: float = 10.0,
    body: Callable[[ToolContext], Any] | None = None,
) -> Agent:
    """An agent that calls ``tool_name`` once with amount=5, then answers "done"."""

    @tool(name=tool_name, effect=effect, timeout_seconds=timeout_seconds)
    async def act(ctx: ToolContext, amount: int) -> dict[str, int]:
        calls.record(ctx, amount=amount)
        if body is not None:
            await body(ctx)
        return {"applied": amount}

    provider = ScriptedProvider(
        [
            ProviderReply(tool_calls=[ToolCall(tool_name, {"amount": 5}, "call-1")]),
            ProviderReply(text="done"),
        ]
    )
    return Agent(name, provider, tools=[act])


def app_of(*agents: Agent) -> App:
    return App(agents)


def provider_step(seq: int, reply: ProviderReply) -> StepWrite:
    return StepWrite(
        seq=seq,
        kind=StepKind.PROVIDER,
        status=StepStatus.SUCCEEDED,
        output_json=dump_json(reply_to_json(normalize_reply(reply, seq))),
    )


async def until(condition: Callable[[], Awaitable[bool] | bool], timeout: float) -> None:
    """Poll ``condition`` (sync or async) until it holds; fail after ``timeout`` seconds."""
    with anyio.fail_after(timeout):
        for _ in itertools.count():
            held = condition()
            if await held if isinstance(held, Awaitable) else held:
                return
            await anyio.sleep(0.005)


def events(captured: Sequence[Mapping[str, Any]]) -> list[str]:
    return [entry["event"] for entry in captured]


@contextmanager
def capture_logs() -> Iterator[list[dict[str, Any]]]:
    """structlog's ``capture_logs`` with leaseward's loggers open down to DEBUG: they
    emit only what their ``logging`` level lets through, and that is all it can see."""
    logger = logging.getLogger("leaseward")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        with structlog.testing.capture_logs() as logs:
            # Each captured entry is the event dict structlog built: a plain dict.
            yield cast(list[dict[str, Any]], logs)
    finally:
        logger.setLevel(level)


async def ghost_claims(store: SQLStore, agent: str, steps: tuple[StepWrite, ...]) -> str:
    """A worker that claims a run, journals ``steps`` under a tiny lease, and dies."""
    run_id = (await store.create_run(queued_run(agent))).id
    [claimed] = await store.claim_runs("ghost:1", 1, 0.01, [agent])
    [outcome] = await store.commit_batch(
        [BatchItem(run_id, claimed.epoch, steps=steps, lease_seconds=0.01)]
    )
    assert isinstance(outcome, Stored)
    return run_id


def queued_run(agent: str) -> NewRun:
    return NewRun(id=new_run_id(), agent=agent, mode=RunMode.QUEUED, input_json='"hi"')


def intent(seq: int, effect: ToolEffect, key: str) -> StepWrite:
    return StepWrite(
        seq=seq,
        kind=StepKind.TOOL,
        status=StepStatus.STARTED,
        tool="charge",
        call_id="call-1",
        effect=effect,
        idempotency_key=key,
        arguments_json='{"amount":5}',
    )


def lone_actor(
    record: RunRecord,
    agent: Agent,
    store: SQLStore,
    *,
    persist: PersistFn,
    keeper: LeaseKeeper,
    lease_seconds: float,
    lease_deadline: float,
    bounds: SharedBounds | None = None,
) -> RunActor:
    """The actor of one run claimed by hand, outside any Supervisor: the test runs the
    Persister and the keeper it is given, and stands between it and ``persist``."""
    return RunActor(
        record,
        agent,
        persist=persist,
        load_steps=store.list_steps,
        load_requests=store.list_requests,
        settings=RunSettings(lease_seconds=lease_seconds),
        clock=SystemClock(),
        worker_id="w",
        lease_deadline=lease_deadline,
        keeper=keeper,
        bounds=bounds,
    )


@attrs.frozen
class HandRun:
    """A run carried out by ``run_by_hand``: as claimed, how it settled, the keeper that
    held its lease, and when (monotonic) its actor returned."""

    record: RunRecord
    settlement: Settlement | None
    keeper: LeaseKeeper
    ended_at: float


async def run_by_hand(
    store: SQLStore,
    agent: Agent,
    *,
    lease_seconds: float,
    margin_seconds: float,
    persist_through: Callable[[Persister], PersistFn],
    bounds: SharedBounds | None = None,
    timeout_seconds: float = 20.0,
) -> HandRun:
    """One queued run of ``agent``, claimed by hand and carried out to its settlement by a
    lone actor, with a Persister and a keeper of its own. The actor persists through what
    ``persist_through`` makes of that Persister: where the test stands between them."""
    await store.create_run(queued_run(agent.name))
    claimed_at = time.monotonic()
    [record] = await store.claim_runs("w", 1, lease_seconds, [agent.name])
    persister = Persister(store)
    keeper = LeaseKeeper(
        persister.renew, SystemClock(), lease_seconds=lease_seconds, margin_seconds=margin_seconds
    )
    async with anyio.create_task_group() as actors:
        actor = lone_actor(
            record,
            agent,
            store,
            persist=persist_through(persister),
            keeper=keeper,
            lease_seconds=lease_seconds,
            lease_deadline=claimed_at + lease_seconds,
            bounds=bounds,
        )
        await actors.start(persister.run)
        await actors.start(keeper.run)
        with anyio.fail_after(timeout_seconds):
            settlement = await actor.run()
        ended_at = time.monotonic()
        actors.cancel_scope.cancel()
    return HandRun(record, settlement, keeper, ended_at)
