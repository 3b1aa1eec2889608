"""A decision that arrives after its request expired (G12): refused, and the request is
expired in the same transaction, exactly as the reaper's expiry pass would have done.

Every test runs on both stores. Most stand the store's own clock still and move it
(``StoreClock``: SQLite's injected clock, PostgreSQL's database clock), so that no
reaper expires a request before the test means it to. The race runs on real clocks
beside a live reaper.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from leaseward import (
    Client,
    Decision,
    HumanRequest,
    IllegalTransition,
    RequestExpired,
    RunState,
)
from leaseward.actors.reaper import LeaseReaper
from leaseward.runtime.lifecycle import RecoveryPolicy, StepStatus
from tests.integration.approval_worker import EXPIRY_SECONDS, executions
from tests.integration.test_approval import WA, WAIT_SECONDS, WI, parked, runtime, until_state
from tests.integration.test_store_conformance import StoreClock

pytestmark = pytest.mark.anyio

EXPIRED_RESULT = '{"error": "rejected: approval expired"}'


@pytest.fixture
async def clock(anyio_backend: str, store_url: str) -> AsyncIterator[StoreClock]:
    if not store_url.startswith("postgresql"):
        yield StoreClock()
        return
    import asyncpg

    connection = await asyncpg.connect(store_url)
    try:
        moved = StoreClock(connection)
        await moved.start()
        yield moved
    finally:
        await connection.close()


def outcome(request: HumanRequest) -> tuple[Any, ...]:
    """What a decision leaves on a request, without which request it was."""
    return (request.decision, request.operator, request.note, request.value, request.decided_at)


async def test_an_approval_after_the_expiry_is_refused_and_the_call_never_runs(
    store_url: str, tmp_path: Path, clock: StoreClock
) -> None:
    async with runtime(store_url, tmp_path, clock=clock) as rt:
        late = await parked(rt, "expiring")
        reaped = await parked(rt, "expiring")
    # Every worker is down past the expiry: no reaper expired anything.
    await clock.advance(EXPIRY_SECONDS + 0.5)
    async with Client.open(store_url, clock=clock) as client:
        [before] = await client.requests(late)
        assert before.pending and before.expires_at is not None
        with pytest.raises(RequestExpired) as refused:
            await client.approve(late, operator="alice", note="ok")
        # The other request is expired by the reaper's pass, for comparison.
        reaper = LeaseReaper(client.store, interval_seconds=1.0, policy=RecoveryPolicy())
        [by_reaper] = await reaper.expire_once()
        assert (by_reaper.run_id, by_reaper.requeued) == (reaped, True)
        [expired] = await client.requests(late)
        [expired_by_reaper] = await client.requests(reaped)
        records = [await client.store.get_run(r) for r in (late, reaped)]
        # Refused again, however it is asked, once it has expired.
        for again in (
            client.approve(late),
            client.reject(late, "call-1", reason="too late anyway"),
            client.approve(reaped, "call-1"),
        ):
            with pytest.raises(RequestExpired, match="it was rejected as expired"):
                await again

    assert refused.value.message == (
        f"call call-1 of run {late}: the request expired at "
        f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(before.expires_at))}; "
        "it was rejected as expired"
    )
    assert (refused.value.run_id, refused.value.call_id) == (late, "call-1")
    assert refused.value.expires_at == before.expires_at
    assert isinstance(refused.value, IllegalTransition)
    # Exactly what the reaper's expiry did to the other run, at the same instant.
    assert outcome(expired) == outcome(expired_by_reaper)
    assert outcome(expired) == (Decision.EXPIRED, None, "approval expired", None, clock.now())
    late_run, reaped_run = records
    assert late_run is not None and reaped_run is not None
    assert (late_run.state, late_run.epoch, late_run.available_at) == (
        reaped_run.state,
        reaped_run.epoch,
        reaped_run.available_at,
    )
    assert late_run.state is RunState.QUEUED

    # The runs go on as after any expiry: the model is told, and nothing executes.
    async with runtime(store_url, tmp_path, clock=clock) as rt:
        finals = [await rt.wait(r, timeout=WAIT_SECONDS) for r in (late, reaped)]
    assert [(r.state, r.result) for r in finals] == [(RunState.COMPLETED, EXPIRED_RESULT)] * 2
    assert executions(tmp_path) == []


async def test_a_late_approval_through_a_runtime_resumes_its_run_at_once(
    store_url: str, tmp_path: Path, clock: StoreClock
) -> None:
    # Polling and reaping once a minute: only the late approval expires the request, and
    # only the runtime's own wake-up can resume the run in time.
    idle = {"poll_interval_seconds": 60.0, "reap_interval_seconds": 60.0, "lease_seconds": 120.0}
    async with runtime(store_url, tmp_path, clock=clock, **idle) as rt:
        run_id = await parked(rt, "expiring")
        await clock.advance(EXPIRY_SECONDS + 0.5)
        with pytest.raises(RequestExpired):
            await rt.approve(run_id)
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
    assert (run.state, run.result) == (RunState.COMPLETED, EXPIRED_RESULT)
    assert executions(tmp_path) == []


async def test_a_decision_at_the_expiry_itself_is_in_time(
    store_url: str, tmp_path: Path, clock: StoreClock
) -> None:
    async with runtime(store_url, tmp_path, clock=clock) as rt:
        run_id = await parked(rt, "expiring")
        [request] = await rt.requests(run_id)
        assert request.expires_at is not None
        await clock.advance(request.expires_at - clock.now())
        # The reaper expires only what expired before now; a decision now still counts.
        assert await rt.store.expire_requests(10) == []
        await rt.approve(run_id, operator="alice")
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        [decided] = await rt.requests(run_id)
    assert (decided.decision, decided.decided_at) == (Decision.APPROVED, request.expires_at)
    assert (run.state, run.result) == (RunState.COMPLETED, '{"charged": 9}')
    assert [e["run_id"] for e in executions(tmp_path)] == [run_id]


async def test_a_late_decision_expires_every_expired_request_of_its_run_and_only_those(
    store_url: str, tmp_path: Path, clock: StoreClock
) -> None:
    async with runtime(store_url, tmp_path, clock=clock) as rt:
        run_id = await parked(rt, "pair_expiring")
    await clock.advance(EXPIRY_SECONDS + 0.5)
    async with Client.open(store_url, clock=clock) as client:
        with pytest.raises(RequestExpired):
            await client.approve(run_id, "second")
        requests = {r.call_id: r for r in await client.requests(run_id)}
        run = await client.get(run_id)
    # "first" expired too, as the reaper would have expired it; "late" has an hour.
    assert {c: r.decision for c, r in requests.items()} == {
        "first": Decision.EXPIRED,
        "second": Decision.EXPIRED,
        "late": None,
    }
    assert run.state is WA


async def test_an_approval_of_a_run_that_moved_on_names_what_it_waits_for_now(
    store_url: str, tmp_path: Path, clock: StoreClock
) -> None:
    async with runtime(store_url, tmp_path, clock=clock) as rt:
        run_id = await parked(rt, "expire_then_ask")
        await clock.advance(EXPIRY_SECONDS + 0.5)
        # The reaper expires the request; the run goes on and asks a question.
        await until_state(rt.client, run_id, WI)
        with pytest.raises(IllegalTransition) as asking:
            await rt.approve(run_id)
        await rt.send_input(run_id, "no")
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        with pytest.raises(RequestExpired, match="call call-1 of run"):
            await rt.approve(run_id)
    assert not isinstance(asking.value, RequestExpired)
    assert "is waiting_for_input: it waits for no approval" in asking.value.message
    assert (run.state, run.result) == (RunState.COMPLETED, f"{EXPIRED_RESULT} | no")
    assert executions(tmp_path) == []


async def approve_late_behind_the_stores_back(store_url: str, run_id: str) -> None:
    """What a store that took no notice of the expiry left behind: an approval decided a
    second after its request expired, and the run requeued by it."""
    approve = (
        "UPDATE approvals SET decision = 'approved', operator = 'alice', "
        "decided_at = expires_at + 1 WHERE run_id = {run}"
    )
    requeue = "UPDATE runs SET state = 'queued' WHERE id = {run}"
    if store_url.startswith("postgresql"):
        import asyncpg

        connection = await asyncpg.connect(store_url)
        try:
            for statement in (approve, requeue):
                await connection.execute(statement.format(run="$1"), run_id)
        finally:
            await connection.close()
        return
    with contextlib.closing(sqlite3.connect(store_url.removeprefix("sqlite:///"))) as db, db:
        for statement in (approve, requeue):
            db.execute(statement.format(run="?"), (run_id,))


async def test_the_gate_never_executes_an_approval_decided_after_its_expiry(
    store_url: str, tmp_path: Path, clock: StoreClock
) -> None:
    async with runtime(store_url, tmp_path, clock=clock) as rt:
        run_id = await parked(rt, "expiring")
    await clock.advance(EXPIRY_SECONDS + 2.0)
    await approve_late_behind_the_stores_back(store_url, run_id)
    async with runtime(store_url, tmp_path, clock=clock) as rt:
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        [request] = await rt.requests(run_id)
        steps = await rt.steps(run_id)
    assert request.decision is Decision.APPROVED
    assert request.decided_at is not None and request.expires_at is not None
    assert request.decided_at > request.expires_at
    assert (run.state, run.result) == (RunState.COMPLETED, EXPIRED_RESULT)
    assert executions(tmp_path) == []
    [refused] = [s for s in steps if s.call_id == "call-1"]
    assert (refused.status, refused.error) == (StepStatus.FAILED, "rejected: approval expired")


# -- the race with a live reaper, on real clocks ---------------------------------------------


async def test_a_decision_racing_the_reapers_expiry_never_wins_after_the_expiry(
    store_url: str, tmp_path: Path
) -> None:
    """Half the approvals are sent once the store's clock has passed the expiry, half a
    little before it; the reaper expires requests every 0.2 s meanwhile. After the
    expiry, a decision never wins; before it, either may, and each side agrees."""
    async with runtime(store_url, tmp_path, reap_interval_seconds=0.2) as rt:
        after = [await rt.submit("race", "go") for _ in range(6)]
        before = [await rt.submit("race", "go") for _ in range(4)]
        refused: set[str] = set()

        async def approve(run_id: str, lead_seconds: float) -> None:
            """Approve once the store's clock reads the request's expiry minus the lead."""
            with anyio.fail_after(WAIT_SECONDS):
                while True:
                    requests = await rt.requests(run_id)
                    if requests:
                        [request] = requests
                        assert request.expires_at is not None
                        store_now = request.requested_at + request.age_seconds
                        due = request.expires_at - lead_seconds
                        if request.decision is not None or store_now > due:
                            break
                    await anyio.sleep(0.002)
            try:
                await rt.approve(run_id, operator="racer")
            except RequestExpired:
                refused.add(run_id)

        async with anyio.create_task_group() as tasks:
            for run_id in after:
                tasks.start_soon(approve, run_id, 0.0)
            for run_id in before:
                tasks.start_soon(approve, run_id, 0.03)
        finals = {r: await rt.wait(r, timeout=WAIT_SECONDS) for r in after + before}
        requests = {r: (await rt.requests(r))[0] for r in after + before}

    executed = [e["run_id"] for e in executions(tmp_path)]
    # Sent after the expiry on the store's clock: refused, every time, and never run.
    assert refused >= set(after)
    for run_id in after + before:
        request = requests[run_id]
        assert request.expires_at is not None and request.decided_at is not None
        if run_id in refused:
            assert request.decision is Decision.EXPIRED
            assert request.decided_at > request.expires_at
            assert run_id not in executed
            assert finals[run_id].result == EXPIRED_RESULT
        else:
            # The approval won: it was decided in time, and its call ran once.
            assert request.decision is Decision.APPROVED
            assert request.decided_at <= request.expires_at
            assert executed.count(run_id) == 1
        assert finals[run_id].state is RunState.COMPLETED
