"""Leases, fencing, reaping and resume through the real runtime (G1, G2, G6-G8)."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from leaseward import (
    Agent,
    App,
    ProviderReply,
    Reason,
    RunState,
    Runtime,
    ScriptedProvider,
    StepStatus,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.actors import Metrics
from leaseward.runtime.commits import Fenced
from leaseward.runtime.conversation import idempotency_key
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import Event, RecoveryPolicy, StepKind
from leaseward.runtime.settlements import Settlement
from leaseward.storage import BatchItem, open_store
from tests.integration.faults import FaultyExecutor, Statement, faulty_store, query
from tests.integration.support import (
    Calls,
    capture_logs,
    events,
    ghost_claims,
    intent,
    one_call_agent,
    provider_step,
    queued_run,
)

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {
    "poll_interval_seconds": 0.02,
    "reap_interval_seconds": 0.05,
}
CHARGE = ProviderReply(tool_calls=[ToolCall("charge", {"amount": 5}, "call-1")])


async def test_reaped_run_mid_non_idempotent_write_is_dead_lettered_not_rerun(
    store_url: str,
) -> None:
    calls = Calls()
    app = App([one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")])
    store = await open_store(store_url)
    run_id = await ghost_claims(
        store, "payer", (provider_step(0, CHARGE), intent(1, ToolEffect.NON_IDEMPOTENT_WRITE, "k"))
    )
    with capture_logs() as logs:
        async with Runtime.open(store, app, **FAST) as rt:
            run = await rt.wait(run_id, timeout=10)
            journal = await rt.steps(run_id)
    await store.aclose()

    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    assert len(calls) == 0
    assert [(s.seq, s.status) for s in journal] == [
        (0, StepStatus.SUCCEEDED),
        (1, StepStatus.STARTED),
    ]
    assert {"lease.reaped", "run.dead_lettered"} <= set(events(logs))


async def test_reaped_idempotent_write_is_rerun_with_the_same_key(store_url: str) -> None:
    calls = Calls()
    app = App([one_call_agent("payer", ToolEffect.IDEMPOTENT_WRITE, calls, tool_name="charge")])
    store = await open_store(store_url)
    run_id = (await store.create_run(queued_run("payer"))).id
    # The key the ghost handed to the payment system is derived from the journal.
    key = idempotency_key(run_id, 0, 0, "call-1")
    [claimed] = await store.claim_runs("ghost:1", 1, 0.01, ["payer"])
    await store.commit_batch(
        [
            BatchItem(
                run_id,
                claimed.epoch,
                steps=(provider_step(0, CHARGE), intent(1, ToolEffect.IDEMPOTENT_WRITE, key)),
                lease_seconds=0.01,
            )
        ]
    )
    async with Runtime.open(store, app, **FAST) as rt:
        run = await rt.wait(run_id, timeout=10)
        journal = await rt.steps(run_id)
    await store.aclose()

    assert (run.state, run.result, run.requeues) == (RunState.COMPLETED, "done", 1)
    assert [c["key"] for c in calls.seen] == [key]
    assert calls.seen[0]["epoch"] == 2
    charge_rows = [(s.status, s.epoch, s.idempotency_key) for s in journal if s.tool == "charge"]
    assert charge_rows == [(StepStatus.STARTED, 1, key), (StepStatus.SUCCEEDED, 2, key)]


async def test_resume_does_not_repeat_recorded_steps(store_url: str) -> None:
    calls = Calls()
    agent = one_call_agent("reader", ToolEffect.READ_ONLY, calls, tool_name="charge")
    store = await open_store(store_url)
    done = StepWrite(
        seq=1,
        kind=StepKind.TOOL,
        status=StepStatus.SUCCEEDED,
        tool="charge",
        call_id="call-1",
        effect=ToolEffect.READ_ONLY,
        output_json='{"applied":5}',
    )
    run_id = await ghost_claims(store, "reader", (provider_step(0, CHARGE), done))
    async with Runtime.open(store, App([agent]), **FAST) as rt:
        run = await rt.wait(run_id, timeout=10)
        journal = await rt.steps(run_id)
    await store.aclose()

    assert run.state is RunState.COMPLETED
    assert len(calls) == 0, "a recorded tool step ran again"
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    assert provider.calls == 1, "the provider was asked again for a recorded turn"
    assert [s.kind for s in journal] == [StepKind.PROVIDER, StepKind.TOOL, StepKind.PROVIDER]


async def test_stale_epoch_can_neither_record_nor_settle(store_url: str) -> None:
    store = await open_store(store_url)
    run_id = (await store.create_run(queued_run("payer"))).id
    [first] = await store.claim_runs("w1", 1, 0.01, ["payer"])
    await anyio.sleep(0.02)
    app = App([one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, Calls())])
    async with Runtime.open(store, app, concurrency=1, **FAST) as rt:
        # Reaped and re-claimed (epoch 2) by the runtime, which finishes it.
        assert (await rt.wait(run_id, timeout=10)).epoch == 2
    stale = BatchItem(
        run_id,
        first.epoch,
        steps=(intent(9, ToolEffect.NON_IDEMPOTENT_WRITE, "k"),),
        lease_seconds=10,
        settlement=Settlement(Event.FAIL, Reason.NOT_RETRYABLE),
    )
    [outcome] = await store.commit_batch([stale])
    after = await store.get_run(run_id)
    journal = await store.list_steps(run_id)
    await store.aclose()

    assert outcome == Fenced()
    assert after is not None and after.state is RunState.COMPLETED
    assert 9 not in [s.seq for s in journal]


async def test_cancel_is_seen_at_the_next_step_boundary(store_url: str) -> None:
    entered, release = anyio.Event(), anyio.Event()
    calls = Calls()

    async def block(ctx: ToolContext) -> None:
        entered.set()
        await release.wait()

    agent = one_call_agent("slow", ToolEffect.READ_ONLY, calls, body=block)
    async with Runtime.open(store_url, App([agent]), **FAST) as rt:
        run_id = await rt.submit("slow", None)
        await entered.wait()
        assert await rt.cancel(run_id) is True
        assert (await rt.get(run_id)).state is RunState.RUNNING
        release.set()
        run = await rt.wait(run_id, timeout=10)
        assert await rt.cancel(run_id) is False
        queued = await rt.submit("slow", None)
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    assert (run.state, run.reason) == (RunState.CANCELLED, Reason.CANCELLED)
    # The tool call in flight finished and was recorded; the next turn never started.
    assert provider.calls == 1
    assert len(calls) == 1
    async with Runtime.open(store_url, App([]), **FAST) as rt:
        assert await rt.cancel(queued) is True
        assert (await rt.get(queued)).state is RunState.CANCELLED


async def test_a_call_longer_than_the_lease_is_not_reaped(store_url: str) -> None:
    calls = Calls()

    async def outlive_the_lease(ctx: ToolContext) -> None:
        await anyio.sleep(1.5)

    agent = one_call_agent(
        "long",
        ToolEffect.NON_IDEMPOTENT_WRITE,
        calls,
        timeout_seconds=2.0,
        body=outlive_the_lease,
    )
    with capture_logs() as logs:
        # Three leases long; a lease of 0.5 s, not shorter, leaves the keeper's renewals
        # room for the pauses of a busy shared machine.
        async with Runtime.open(store_url, App([agent]), lease_seconds=0.5, **FAST) as rt:
            run = await rt.wait(await rt.submit("long", None), timeout=10)
    assert (run.state, run.epoch, run.requeues) == (RunState.COMPLETED, 1, 0)
    assert len(calls) == 1
    assert "lease.reaped" not in events(logs)


class FailingOnce(Metrics):
    """Metrics whose first count of a tool step raises: a fault inside one run's actor."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def step_recorded(self, kind: StepKind, effect: ToolEffect | None) -> None:
        if kind is StepKind.TOOL and not self.failed:
            self.failed = True
            raise RuntimeError("a fault inside one run")
        super().step_recorded(kind, effect)


@pytest.mark.run_crash
async def test_a_run_whose_actor_fails_is_recovered_and_the_worker_goes_on(
    store_url: str,
) -> None:
    agent = one_call_agent("reader", ToolEffect.READ_ONLY, Calls())
    metrics = FailingOnce()
    quick_retry = RecoveryPolicy(backoff_base_seconds=0.01)
    with capture_logs() as logs:
        async with Runtime.open(
            store_url,
            App([agent]),
            lease_seconds=0.3,
            metrics=metrics,
            recovery=quick_retry,
            **FAST,
        ) as rt:
            run_ids = [await rt.submit("reader", None) for _ in range(3)]
            runs = await rt.wait_all(run_ids, timeout=10)
    assert [run.state for run in runs] == [RunState.COMPLETED] * 3
    # The run that failed was taken over once its lease ran out; the others never were.
    assert sorted(run.epoch for run in runs) == [1, 1, 2]
    assert events(logs).count("run.crashed") == 1
    assert metrics.registry.get_sample_value("leaseward_runs_crashed_total") == 1


async def test_drain_releases_runs_without_spending_a_retry(store_url: str) -> None:
    entered = anyio.Event()
    turns: list[int] = []

    def reply(request: Any) -> ProviderReply:
        turns.append(len(request.messages))
        return ProviderReply(tool_calls=[ToolCall("wait", {}, "c")])

    @tool
    async def wait(ctx: ToolContext) -> str:
        entered.set()
        await anyio.sleep(0.2)
        return "waited"

    looping = Agent("looping", ScriptedProvider(reply), tools=[wait])
    async with Runtime.open(store_url, App([looping]), drain_seconds=5, **FAST) as rt:
        run_id = await rt.submit("looping", None)
        await entered.wait()
    async with Runtime.open(store_url, App([]), **FAST) as rt:
        run = await rt.get(run_id)
        journal = await rt.steps(run_id)
    assert (run.state, run.requeues) == (RunState.QUEUED, 0)
    assert run.error is None
    # It stopped at the boundary after the call: the call's record is there.
    assert journal[-1].tool == "wait" and journal[-1].status is StepStatus.SUCCEEDED


async def test_two_runtimes_on_one_store_never_both_hold_a_run(store_url: str) -> None:
    executions: list[tuple[str, str]] = []
    charging = {"a": anyio.Event(), "b": anyio.Event()}

    def build(worker: str) -> App:
        @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
        async def charge(ctx: ToolContext, amount: int) -> int:
            executions.append((ctx.run_id, worker))
            charging[worker].set()
            # Until the other worker charges too: on SQLite the first to take the write
            # lock could otherwise run the whole queue while the other's claim sleeps in
            # SQLite's busy handler (1 run in 60 or so), and the two would never compete.
            with anyio.move_on_after(5):
                await charging["b" if worker == "a" else "a"].wait()
            return amount

        return App([Agent("payer", ScriptedProvider([CHARGE, ProviderReply(text="ok")]), [charge])])

    async with (
        Runtime.open(store_url, build("a"), concurrency=4, worker_id="a", **FAST) as a,
        Runtime.open(store_url, build("b"), concurrency=4, worker_id="b", **FAST) as b,
    ):
        ids = [await (a if i % 2 else b).submit("payer", i) for i in range(40)]
        runs = [await a.wait(run_id, timeout=20) for run_id in ids]
    assert all(r.state is RunState.COMPLETED and r.epoch == 1 for r in runs)
    assert sorted(run_id for run_id, _ in executions) == sorted(ids)
    assert {worker for _, worker in executions} == {"a", "b"}


async def test_step_records_of_concurrent_runs_share_transactions(store_url: str) -> None:
    calls = Calls()
    app = App([one_call_agent("reader", ToolEffect.READ_ONLY, calls)])
    with capture_logs() as logs:
        async with Runtime.open(store_url, app, concurrency=20, **FAST) as rt:
            ids = [await rt.submit("reader", i) for i in range(20)]
            runs = [await rt.wait(run_id, timeout=20) for run_id in ids]
            stats = rt.supervisor.persister.stats
    assert all(r.state is RunState.COMPLETED for r in runs)
    assert stats.largest_batch > 1
    assert stats.batches < stats.items
    names = set(events(logs))
    assert {"run.claimed", "step.recorded", "run.settled"} <= names


def slow_claims(executor: FaultyExecutor) -> anyio.Event:
    """Claims commit, then take a while to come back: a shutdown can land in between.
    The event is set when the first claim that leased a run has committed."""
    claimed = anyio.Event()

    async def slow(statement: Statement) -> None:
        if not statement.answer:
            return
        assert statement.transaction is not None

        async def late() -> None:
            claimed.set()
            await anyio.sleep(0.3)

        statement.transaction.after_commit(late)

    executor.inject(query("claim_runs"), after=slow)
    return claimed


async def test_a_claim_in_flight_at_shutdown_is_released_not_left_leased(store_url: str) -> None:
    store, executor = await faulty_store(store_url)
    claimed = slow_claims(executor)
    app = App([one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, Calls())])
    async with Runtime.open(store, app, **FAST) as rt:
        run_id = await rt.submit("payer", None)
        await claimed.wait()
    run = await store.get_run(run_id)
    await store.aclose()
    assert run is not None
    # Claimed in the store while the runtime shut down: started, and released at once.
    assert (run.state, run.epoch, run.requeues, run.lease_owner) == (RunState.QUEUED, 1, 0, None)
