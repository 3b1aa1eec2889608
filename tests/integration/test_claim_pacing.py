"""A worker with room for thousands of runs claims them no faster than it starts them.

A claim's lease runs from when it is sent, and nothing renews it before the run's first
commit or call. A worker that claimed batch after batch while its event loop still had
the last ones to start let a flood of runs wait until their leases were too short to
admit a call; they went back to the queue and were claimed again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    RunState,
    Runtime,
    ScriptedProvider,
)
from leaseward.actors.supervisor import CLAIM_BATCH, STARTING_AT_MOST
from leaseward.storage.executor import Row
from leaseward.storage.protocol import WriteBatch
from tests.integration.faults import Statement, faulty_store, query
from tests.integration.support import queued_run

pytestmark = pytest.mark.anyio

RUNS = 6 * CLAIM_BATCH


async def test_claims_wait_while_the_runs_already_claimed_have_not_started(
    tmp_path: Path,
) -> None:
    """Runs that were claimed before (epoch 1, put back in the queue) each read their
    journal before they start: a claimer that does not wait for them claims batch after
    batch while the reads queue."""
    asked: set[str] = set()

    def reply(request: ProviderRequest) -> ProviderReply:
        asked.add(request.run_id)
        return ProviderReply(text="done")

    app = App([Agent("quick", ScriptedProvider(reply))])
    db = tmp_path / "runs.db"
    store, executor = await faulty_store(f"sqlite:///{db}")
    runs = tuple(queued_run("quick") for _ in range(RUNS))
    await store.commit(WriteBatch(new_runs=runs))
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE runs SET epoch = 1")
    ids = [run.id for run in runs]
    claimed: set[str] = set()
    # At each claim, the runs claimed before it that had not reached their provider yet.
    not_started: list[int] = []

    async def before_claim(statement: Statement) -> None:
        not_started.append(len(claimed - asked))

    async def after_claim(statement: Statement) -> None:
        rows: Sequence[Row] = statement.answer or ()
        claimed.update(str(row["id"]) for row in rows)

    executor.inject(query("claim_runs"), before_claim, after=after_claim)
    try:
        async with Runtime.open(
            store, app, concurrency=RUNS, lease_seconds=30.0, poll_interval_seconds=0.02
        ) as rt:
            infos = await rt.wait_all(ids, timeout=120)
    finally:
        await store.aclose()
    assert all(info.state is RunState.COMPLETED for info in infos)
    assert claimed == set(ids)
    assert max(not_started) <= STARTING_AT_MOST, not_started
