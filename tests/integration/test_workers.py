"""The workers registry through the real runtime, and retention through the Client.

A Runtime registers its worker before its first claim, beats on the reaper's timer
and forgets itself when it stops; a Client tells which agents live workers serve,
and purges finished runs.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

import anyio
import pytest

from leaseward import (
    Agent,
    App,
    Client,
    InvalidInput,
    ProviderReply,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    UnknownAgent,
    WorkerInfo,
    tool,
)
from leaseward.actors import WORKER_GONE_AFTER_BEATS, WORKER_GONE_AFTER_MIN_SECONDS
from leaseward.runtime.commits import Stored
from leaseward.runtime.workers import WorkerRegistration
from leaseward.storage import BatchItem, SQLStore, open_store
from tests.integration.faults import FaultyExecutor, Statement, fail, faulty_store, query
from tests.integration.support import capture_logs, events
from tests.integration.test_leases import FAST
from tests.integration.test_store_conformance import DEAD, new_run
from tests.stores import created

pytestmark = pytest.mark.anyio


@pytest.fixture
def store_url(store_url: str) -> str:
    """The conftest store, created: these tests open a Client first, which creates none."""
    return created(store_url)


def app_of(*names: str) -> App:
    return App([Agent(name, ScriptedProvider([ProviderReply(text="done")])) for name in names])


async def beaten(client: Client, after: float) -> WorkerInfo:
    """The worker once its heartbeat is later than ``after``."""
    with anyio.fail_after(10):
        while True:
            listed = await client.workers()
            if listed and listed[0].heartbeat_at > after:
                return listed[0]
            await anyio.sleep(0.02)


async def test_a_runtime_registers_beats_and_forgets_its_worker(store_url: str) -> None:
    async with Client.open(store_url) as client:
        async with Runtime.open(
            store_url, app_of("payer", "greeter"), worker_id="w-test", **FAST
        ) as rt:
            (registered,) = await client.workers()
            assert (registered.id, registered.host, registered.pid) == (
                "w-test",
                socket.gethostname(),
                os.getpid(),
            )
            assert registered.agents == ("payer", "greeter")
            assert registered.live
            # A reap interval of 0.05 s is far below the floor: the floor decides.
            assert registered.stale_after_seconds == max(
                WORKER_GONE_AFTER_BEATS * FAST["reap_interval_seconds"],
                WORKER_GONE_AFTER_MIN_SECONDS,
            )
            assert await rt.served_agents() == {"payer", "greeter"}

            later = await beaten(client, registered.heartbeat_at)
            assert later.started_at == registered.started_at
            assert later.live
        assert await client.workers() == []
        assert await client.served_agents() == frozenset()


async def test_a_worker_given_the_id_of_a_live_one_elsewhere_says_so(store_url: str) -> None:
    store = await open_store(store_url)
    try:
        elsewhere = WorkerRegistration("w-test", "elsewhere", 4242, ("payer",), 60.0)
        await store.register_worker(elsewhere)
        with capture_logs() as logs:
            async with Runtime.open(store, app_of("payer"), worker_id="w-test", **FAST):
                pass
            async with Runtime.open(store, app_of("payer"), worker_id="w-other", **FAST):
                pass
    finally:
        await store.aclose()
    [warned] = [entry for entry in logs if entry["event"] == "worker.id_in_use"]
    assert (warned["worker_id"], warned["host"], warned["pid"]) == ("w-test", "elsewhere", 4242)


async def test_two_runtimes_of_one_process_are_two_workers(store_url: str) -> None:
    """Without a worker_id each is named by the process: the second open one is told
    apart, and the first closing leaves the second's row and agents as they were."""
    base = f"{socket.gethostname()}:{os.getpid()}"
    async with Client.open(store_url) as client:
        async with Runtime.open(store_url, app_of("payer"), **FAST) as first:
            async with Runtime.open(store_url, app_of("greeter"), **FAST) as second:
                assert (first.worker_id, second.worker_id) == (base, f"{base}/2")
                listed = {w.id: w.agents for w in await client.workers()}
                assert listed == {base: ("payer",), f"{base}/2": ("greeter",)}
                async with Runtime.open(store_url, app_of("payer"), **FAST) as third:
                    assert third.worker_id == f"{base}/3"
                named = Runtime.open(store_url, app_of("payer"), worker_id="named", **FAST)
                async with named as own:
                    assert own.worker_id == "named"
            after = await beaten(client, max(w.heartbeat_at for w in await client.workers()))
            assert (after.id, after.agents) == (base, ("payer",))
            assert [w.id for w in await client.workers()] == [base]
            async with Runtime.open(store_url, app_of("greeter"), **FAST) as again:
                # The id the closed one had is free again.
                assert again.worker_id == f"{base}/2"
        assert await client.workers() == []


async def test_a_draining_worker_is_listed_draining_and_serves_no_agent(store_url: str) -> None:
    released = anyio.Event()
    entered = anyio.Event()

    @tool
    async def wait(ctx: ToolContext) -> str:
        entered.set()
        await released.wait()
        return "waited"

    calling = Agent(
        "caller",
        ScriptedProvider([ProviderReply(tool_calls=[ToolCall("wait", {}, "c")])]),
        tools=[wait],
    )
    seen: list[tuple[str, frozenset[str]]] = []

    async def watch(client: Client) -> None:
        with anyio.fail_after(10):
            while not seen:
                (listed,) = await client.workers()
                if listed.status == "draining":
                    seen.append((listed.status, await client.served_agents()))
                await anyio.sleep(0.02)
        released.set()

    async with Client.open(store_url) as client, anyio.create_task_group() as watching:
        async with Runtime.open(store_url, App([calling]), drain_seconds=30, **FAST) as rt:
            run_id = await rt.submit("caller", None)
            await entered.wait()
            assert [(w.status, w.draining_since) for w in await client.workers()] == [
                ("live", None)
            ]
            assert await client.served_agents() == {"caller"}
            watching.start_soon(watch, client)
        # The drain waited for the call, which the watcher let end once it saw the drain.
        assert seen == [("draining", frozenset())]
        assert (await client.get(run_id)).state is RunState.QUEUED
        assert await client.workers() == []


async def test_runtime_submit_refuses_an_agent_of_no_app_and_queues_nothing(
    store_url: str,
) -> None:
    async with Runtime.open(store_url, app_of("payer"), **FAST) as rt:
        with pytest.raises(UnknownAgent, match=r"'nosuchagent'.*payer"):
            await rt.submit("nosuchagent", {})
        assert await rt.runs() == []


async def test_a_client_queues_a_run_no_live_worker_serves(store_url: str) -> None:
    async with Client.open(store_url) as client:
        run_id = await client.submit("nosuchagent", {})
        assert (await client.get(run_id)).state is RunState.QUEUED
        assert "nosuchagent" not in await client.served_agents()


def break_registry(executor: FaultyExecutor) -> anyio.Event:
    """Every change to the workers table fails; the event is set at the first heartbeat."""
    beaten = anyio.Event()

    async def beat(statement: Statement) -> None:
        if not statement.params["starting"]:
            beaten.set()

    executor.inject(query("beat_worker"), beat)
    executor.inject(query("beat_worker", "remove_worker"), fail("sqlite: disk I/O error"))
    return beaten


async def test_a_failing_registry_is_logged_and_runs_go_on(db_url: str) -> None:
    store, executor = await faulty_store(db_url)
    beaten = break_registry(executor)
    try:
        with capture_logs() as logs:
            async with Runtime.open(store, app_of("payer"), **FAST) as rt:
                run = await rt.wait(await rt.submit("payer", {}), timeout=10)
                with anyio.fail_after(10):
                    await beaten.wait()
    finally:
        await store.aclose()
    assert run.state is RunState.COMPLETED
    assert events(logs).count("worker.registry_failed") == 2
    assert "worker.heartbeat_failed" in events(logs)


# -- purge through the Client -------------------------------------------------------------


async def test_client_purge_keeps_dead_letters_unless_asked(store_url: str) -> None:
    store = await open_store(store_url)
    try:
        await dead_letter(store)
        queued = await Client(store).submit("nosuchagent", {})
    finally:
        await store.aclose()
    async with Runtime.open(store_url, app_of("payer"), **FAST) as rt:
        done = await rt.wait(await rt.submit("payer", {}), timeout=10)
        await anyio.sleep(0.2)
        recently = timedelta(seconds=0.1)

        dry = await rt.purge(finished_before=recently, dry_run=True)
        assert (dry.runs, dry.steps, dry.dry_run) == (1, 1, True)
        purged = await rt.purge(finished_before=recently)
        assert (purged.runs, purged.steps, purged.dry_run) == (1, 1, False)
        left = {r.id: r.state for r in await rt.runs()}
        assert RunState.DEAD_LETTERED in left.values()
        assert done.id not in left and queued in left

        dead = await rt.purge(
            finished_before=recently, state=RunState.DEAD_LETTERED, include_dead_letters=True
        )
        assert dead.runs == 1
        assert [r.id for r in await rt.runs()] == [queued]


async def dead_letter(store: SQLStore) -> None:
    await store.create_run(new_run("payer-old"))
    (run,) = await store.claim_runs("w0", 1, 5.0, ["payer-old"])
    (outcome,) = await store.commit_batch([BatchItem(run.id, run.epoch, settlement=DEAD)])
    assert isinstance(outcome, Stored)


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"finished_before": timedelta(0)}, "positive timedelta"),
        ({"finished_before": 30}, "positive timedelta"),
        ({"finished_before": timedelta(days=1), "state": RunState.QUEUED}, "queued runs are not"),
        (
            {"finished_before": timedelta(days=1), "state": RunState.DEAD_LETTERED},
            "include_dead_letters",
        ),
        ({"finished_before": timedelta(days=1), "batch_runs": 0}, "batch_runs"),
    ],
)
async def test_client_purge_refuses_bad_arguments(
    db_url: str, arguments: dict[str, Any], fragment: str
) -> None:
    async with Client.open(created(db_url)) as client:
        run_id = await client.submit("payer", {})
        await client.cancel(run_id)
        with pytest.raises(InvalidInput, match=fragment):
            await client.purge(**arguments)
        assert [r.id for r in await client.runs()] == [run_id]
