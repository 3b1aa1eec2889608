"""A run whose commit waits long in the Persister's queue keeps its lease.

A commit renews its run's lease, dated from when it was sent. Behind a deep queue (a
hundred thousand parked calls returning at once) the answer came later than the lease
could cover: the next call was not admitted, the renewal the run asked for instead
waited as long, and the run went back to the queue. The keeper now renews the leases
of runs waiting for a commit, as it renews those of runs in a call.
"""

from __future__ import annotations

import anyio
import pytest

from leaseward import (
    Agent,
    ProviderReply,
    ProviderRequest,
    Role,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.actors import Persister
from leaseward.runtime.commits import CommitOutcome
from leaseward.storage import BatchItem
from tests.integration.faults import faulty_store
from tests.integration.support import PersistFn, run_by_hand

pytestmark = pytest.mark.anyio

LEASE_SECONDS = 3.0
QUEUED_SECONDS = 2.5
"""How long each of the run's commits waits before it reaches the Persister: more of
the lease than a call's admission leaves (3 s less 1.5 s)."""


async def test_a_run_whose_commit_waits_long_in_the_queue_keeps_its_lease(
    db_url: str,
) -> None:
    charged: list[str] = []

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(ctx: ToolContext) -> str:
        """Its intent is committed before the call, and the call admitted after it."""
        charged.append(ctx.run_id)
        return "charged"

    def reply(request: ProviderRequest) -> ProviderReply:
        if any(message.role is Role.TOOL for message in request.messages):
            return ProviderReply(text="done")
        return ProviderReply(tool_calls=(ToolCall("charge", {}, "c0"),))

    agent = Agent("payer", ScriptedProvider(reply), tools=[charge])
    store, _ = await faulty_store(db_url)

    def queued_behind_others(persister: Persister) -> PersistFn:
        async def queued(item: BatchItem) -> CommitOutcome:
            if not charged:
                # Behind other runs' writes, until the call begins.
                await anyio.sleep(QUEUED_SECONDS)
            return await persister.persist(item)

        return queued

    run = await run_by_hand(
        store,
        agent,
        lease_seconds=LEASE_SECONDS,
        margin_seconds=0.5,
        persist_through=queued_behind_others,
    )
    await store.aclose()
    record, settlement, keeper = run.record, run.settlement, run.keeper

    assert charged == [record.id]
    assert settlement is not None and settlement.reason is not None
    assert settlement.reason.value == "completed"
    assert keeper.stats.renewals >= 1
