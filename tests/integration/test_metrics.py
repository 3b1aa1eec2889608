"""Prometheus metrics from real actors on a real store, scraped over real HTTP."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Mapping

import anyio
import anyio.to_thread
import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from leaseward import RunState, ToolEffect
from leaseward.actors import LeaseKeeper, LeaseReaper, Metrics, Persister, RunActor, RunSettings
from leaseward.client import new_run_id
from leaseward.runtime.clock import SystemClock
from leaseward.runtime.lifecycle import RecoveryPolicy, RunMode
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.storage import SQLStore, open_store
from tests.integration.faults import fail, faulty_store, settles_tool
from tests.integration.support import Calls, one_call_agent

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
ALLOWED_LABELS = {"state", "kind", "effect", "reason", "le"}


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


async def scrape(registry: CollectorRegistry) -> Samples:
    """GET /metrics from a real exporter on an ephemeral port, and parse what it served."""
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        text = await anyio.to_thread.run_sync(
            _get, f"http://127.0.0.1:{server.server_port}/metrics"
        )
    finally:
        await anyio.to_thread.run_sync(server.shutdown)
        server.server_close()
        thread.join(timeout=5)
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def _queued(agent: str) -> NewRun:
    return NewRun(id=new_run_id(), agent=agent, mode=RunMode.QUEUED, input_json='"hi"')


async def claim(store: SQLStore, agent: str, lease_seconds: float, worker: str) -> RunRecord:
    run_id = (await store.create_run(_queued(agent))).id
    [record] = await store.claim_runs(worker, 1, lease_seconds, [agent])
    assert record.id == run_id
    return record


async def test_actor_metrics_are_served_over_http(db_url: str) -> None:
    metrics = Metrics()
    store, executor = await faulty_store(db_url)
    # Refused as data the store cannot hold: the batch is written again request by
    # request, so only the charge's outcome fails, whatever shares its batch.
    executor.inject(settles_tool("charge"), fail(data_error=True))
    pay_calls, charge_calls = Calls(), Calls()
    payer = one_call_agent("payer", ToolEffect.IDEMPOTENT_WRITE, pay_calls, tool_name="pay")
    # The outcome of "charge" is refused by the store: an audit failure, and since the
    # write is not idempotent, the run is dead-lettered by its RunActor.
    charger = one_call_agent(
        "charger", ToolEffect.NON_IDEMPOTENT_WRITE, charge_calls, tool_name="charge"
    )

    # A worker that claimed a run and died: with no requeues left the reaper dead-letters it.
    await claim(store, "ghostly", 0.01, "ghost:1")
    await anyio.sleep(0.02)
    reaper = LeaseReaper(
        store,
        interval_seconds=0.05,
        policy=RecoveryPolicy(max_requeues=0),
        metrics=metrics,
    )
    [reaped] = await reaper.reap_watching()
    assert reaped.settlement.target is RunState.DEAD_LETTERED

    persister = Persister(store, metrics=metrics)
    keeper = LeaseKeeper(
        persister.renew, SystemClock(), lease_seconds=5, margin_seconds=0.5, metrics=metrics
    )
    actors = [
        RunActor(
            await claim(store, agent.name, 5.0, "w"),
            agent,
            persist=persister.persist,
            load_steps=store.list_steps,
            load_requests=store.list_requests,
            settings=RunSettings(lease_seconds=5),
            clock=SystemClock(),
            worker_id="w",
            # Two thirds of the lease left: the run's first commit renews it.
            lease_deadline=time.monotonic() + 3.0,
            keeper=keeper,
            metrics=metrics,
        )
        for agent in (payer, charger)
    ]
    settlements: dict[str, Settlement | None] = {}

    async def drive(actor: RunActor) -> None:
        settlements[actor.run_id] = await actor.run()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(persister.run)
            await tg.start(keeper.run)
            async with anyio.create_task_group() as runs:
                for actor in actors:
                    runs.start_soon(drive, actor)
            tg.cancel_scope.cancel()
    await store.aclose()

    targets = [settlements[actor.run_id] for actor in actors]
    assert [s.target if s else None for s in targets] == [
        RunState.COMPLETED,
        RunState.DEAD_LETTERED,
    ]
    assert (len(pay_calls), len(charge_calls)) == (1, 1)

    samples = await scrape(metrics.registry)

    # Both runs asked the provider once for a tool call; only "payer" got to its final turn.
    steps = "leaseward_steps_recorded_total"
    assert value(samples, steps, kind="provider", effect="none") == 3
    assert value(samples, steps, kind="tool", effect="idempotent_write") == 2  # intent + outcome
    assert value(samples, steps, kind="tool", effect="non_idempotent_write") == 1  # intent only
    assert value(samples, steps, kind="tool", effect="read_only") is None

    batches, items = persister.stats.batches, persister.stats.items
    assert batches > 0
    assert value(samples, "leaseward_persister_batch_items_count") == batches
    assert value(samples, "leaseward_persister_batch_items_sum") == items
    assert value(samples, "leaseward_persister_batch_items_bucket", le="512.0") == batches
    assert value(samples, "leaseward_persister_batch_items_bucket", le="+Inf") == batches
    assert value(samples, "leaseward_persister_commit_seconds_count") == batches
    assert 0 < (value(samples, "leaseward_persister_commit_seconds_sum") or 0) < 10

    # A commit renews the lease once a third of it has passed: each run's first, its
    # intent (which carries the turn that asked for it), renews what its claim left.
    assert (value(samples, "leaseward_leases_renewed_total") or 0) >= 2
    assert value(samples, "leaseward_leases_reaped_total") == 1
    assert value(samples, "leaseward_audit_failures_total") == 1
    assert value(samples, "leaseward_dead_letters_total", reason="retries_exhausted") == 1
    assert value(samples, "leaseward_dead_letters_total", reason="interrupted_write") == 1
    assert value(samples, "leaseward_runs_settled_total", state="completed") == 1
    # One dead letter by the reaper, one by the actor after the audit failure.
    assert value(samples, "leaseward_runs_settled_total", state="dead_lettered") == 2
    assert value(samples, "leaseward_runs_settled_total", state="failed") is None

    # Low cardinality: no run id, worker id or tool name ever becomes a label.
    labels = {name for (_, pairs) in samples for name, _ in pairs}
    assert labels <= ALLOWED_LABELS


async def test_run_counts_gauge_covers_every_state() -> None:
    metrics = Metrics()
    counts: Mapping[str, int] = {RunState.QUEUED: 3, "running": 1}
    metrics.set_run_counts(counts)
    samples = await scrape(metrics.registry)
    assert value(samples, "leaseward_runs", state="queued") == 3
    assert value(samples, "leaseward_runs", state="running") == 1
    assert {pairs for (name, pairs) in samples if name == "leaseward_runs"} == {
        frozenset({("state", state.value)}) for state in RunState
    }
    assert all(
        v == 0
        for (name, pairs), v in samples.items()
        if name == "leaseward_runs" and dict(pairs)["state"] not in ("queued", "running")
    )

    # A later call replaces the counts, including states that dropped to none.
    metrics.set_run_counts({"completed": 4})
    assert metrics.registry.get_sample_value("leaseward_runs", {"state": "queued"}) == 0
    assert metrics.registry.get_sample_value("leaseward_runs", {"state": "completed"}) == 4

    with pytest.raises(ValueError):
        metrics.set_run_counts({"exploded": 1})


def test_each_metrics_has_its_own_registry_unless_given_one() -> None:
    first, second = Metrics(), Metrics()
    assert first.registry is not second.registry
    first.lease_reaped()
    assert first.registry.get_sample_value("leaseward_leases_reaped_total") == 1
    assert second.registry.get_sample_value("leaseward_leases_reaped_total") == 0

    shared = CollectorRegistry()
    on_shared = Metrics(registry=shared)
    assert on_shared.registry is shared
    on_shared.audit_failed()
    assert shared.get_sample_value("leaseward_audit_failures_total") == 1
    with pytest.raises(ValueError, match="Duplicated"):
        Metrics(registry=shared)


async def test_actors_work_without_a_metrics(db_url: str) -> None:
    """Existing callers that pass no Metrics keep working (each actor gets its own)."""
    store = await open_store(db_url)
    calls = Calls()
    agent = one_call_agent("payer", ToolEffect.IDEMPOTENT_WRITE, calls, tool_name="pay")
    persister = Persister(store)
    run_id = (await store.create_run(_queued("payer"))).id
    [record] = await store.claim_runs("w", 1, 5.0, ["payer"])
    assert record.id == run_id
    actor = RunActor(
        record,
        agent,
        persist=persister.persist,
        load_steps=store.list_steps,
        load_requests=store.list_requests,
        settings=RunSettings(lease_seconds=5),
        clock=SystemClock(),
        worker_id="w",
        lease_deadline=time.monotonic() + 5.0,
        keeper=LeaseKeeper(persister.renew, SystemClock(), lease_seconds=5, margin_seconds=0.5),
    )
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(persister.run)
            settlement = await actor.run()
            tg.cancel_scope.cancel()
    reaper = LeaseReaper(store, interval_seconds=1, policy=RecoveryPolicy())
    assert await reaper.reap_watching() == ()
    await store.aclose()
    assert settlement is not None
    assert settlement.target is RunState.COMPLETED
