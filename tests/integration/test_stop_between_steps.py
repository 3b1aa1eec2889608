"""A stop that lands while the answer to a run's commit is already there.

anyio delivers a cancel to a task whose awaited future is done only at the task's
next await. A run woken by that answer goes on at once to its next turn, and a
provider that answers without awaiting leaves no await before the next call: the
admission's checkpoint is what keeps that call from starting after the stop (a
reap's cancel: the lease is another worker's by then)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

import anyio
import anyio.abc
import pytest

from leaseward import (
    Agent,
    ProviderReply,
    ProviderRequest,
    Role,
    RunMode,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    tool,
)
from leaseward.actors import LeaseKeeper, Persister
from leaseward.client import new_run_id
from leaseward.runtime.clock import SystemClock
from leaseward.runtime.commits import CommitOutcome
from leaseward.runtime.runs import NewRun
from leaseward.storage import BatchItem
from tests.integration.faults import faulty_store
from tests.integration.support import lone_actor

pytestmark = pytest.mark.anyio

LEASE_SECONDS = 5.0


async def test_a_stop_that_comes_with_a_commits_answer_starts_no_further_call(
    db_url: str,
) -> None:
    looked: list[str] = []

    @tool
    async def look(ctx: ToolContext, key: str) -> str:
        looked.append(key)
        return key

    def reply(request: ProviderRequest) -> ProviderReply:
        turn = sum(1 for message in request.messages if message.role is Role.TOOL)
        if turn < 3:
            return ProviderReply(tool_calls=(ToolCall("look", {"key": f"k{turn}"}, f"c{turn}"),))
        return ProviderReply(text="done")

    agent = Agent("looker", ScriptedProvider(reply), tools=[look])
    store, _ = await faulty_store(db_url)
    await store.create_run(
        NewRun(id=new_run_id(), agent="looker", mode=RunMode.QUEUED, input_json='"hi"')
    )
    [record] = await store.claim_runs("w", 1, LEASE_SECONDS, ["looker"])
    persister = Persister(store)
    keeper = LeaseKeeper(
        persister.renew, SystemClock(), lease_seconds=LEASE_SECONDS, margin_seconds=0.5
    )
    stop = anyio.CancelScope()

    async with anyio.create_task_group() as actors:

        def persist(item: BatchItem) -> Awaitable[CommitOutcome]:
            answer = persister.persist(item)
            if not item.steps or stop.cancel_called:
                return answer
            relayed: asyncio.Future[CommitOutcome] = asyncio.get_running_loop().create_future()

            async def relay() -> None:
                # The run's answer first, then the stop, in one turn of the loop.
                relayed.set_result(await answer)
                stop.cancel()

            actors.start_soon(relay)
            return relayed

        actor = lone_actor(
            record,
            agent,
            store,
            persist=persist,
            keeper=keeper,
            lease_seconds=LEASE_SECONDS,
            lease_deadline=time.monotonic() + LEASE_SECONDS,
        )
        await actors.start(persister.run)
        await actors.start(keeper.run)
        with anyio.fail_after(10):
            with stop:
                await actor.run()
        actors.cancel_scope.cancel()
    await store.aclose()

    # The first read's result was the commit the stop came with: nothing after it ran.
    assert looked == ["k0"]
