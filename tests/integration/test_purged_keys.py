"""An idempotency key outlives the purge of its run (G11): a retried submit after a routine
purge finds the run it made, and only an explicit operator action forgets the key.

Each test runs on both dialects. The purge that forgets nothing here is the one an
operator runs every night: ``purge(finished_before=...)`` of runs that finished moments
ago.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from leaseward import (
    App,
    Client,
    IdempotencyKeyConflict,
    InvalidInput,
    Reason,
    RunNotFound,
    RunPurged,
    RunState,
    Runtime,
    ToolEffect,
)
from leaseward.runtime.encoding import request_digest
from leaseward.runtime.lifecycle import RunMode
from leaseward.storage import SQLStore, open_store
from leaseward.storage.migrations import MIGRATIONS
from leaseward.storage.queries import load_queries
from tests.integration.support import Calls, one_call_agent
from tests.stores import created

pytestmark = pytest.mark.anyio


@pytest.fixture
def store_url(store_url: str) -> str:
    """The conftest store, created: some of these tests open a Client first, which
    creates none."""
    return created(store_url)


ORDER = {"order": "A-42", "amount_cents": 1999}
KEY = "checkout-A-42"
FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.05}
# Runs that finished before the purge started: the purge's "now" is read after they did.
JUST_NOW = timedelta(microseconds=1)


def payer(calls: Calls) -> App:
    return App([one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls)])


async def test_a_routine_purge_keeps_the_key_and_the_order_is_charged_once(
    store_url: str,
) -> None:
    calls = Calls()
    async with Runtime.open(store_url, payer(calls), **FAST) as rt:
        run_id = await rt.submit("payer", ORDER, idempotency_key=KEY)
        done = await rt.wait(run_id, timeout=10)
        assert done.state is RunState.COMPLETED
        assert await rt.submit("payer", ORDER, idempotency_key=KEY) == run_id

        purged = await rt.purge(finished_before=JUST_NOW)
        assert purged.runs == 1

        # The retried submit finds the purged run: nothing is queued.
        assert await rt.submit("payer", ORDER, idempotency_key=KEY) == run_id
        assert await rt.runs() == []
        # rt.run with the key does not run the agent again either.
        with pytest.raises(RunPurged) as ran:
            await rt.run("payer", ORDER, idempotency_key=KEY)
        assert ran.value.run_id == run_id
        assert await rt.runs() == []
        # A key reused for other work is still refused, purged run or not.
        with pytest.raises(IdempotencyKeyConflict, match=run_id):
            await rt.submit("payer", {**ORDER, "amount_cents": 1}, idempotency_key=KEY)

        with pytest.raises(RunPurged) as got:
            await rt.get(run_id)
        assert isinstance(got.value, RunNotFound)
        gone = got.value.purged
        assert (gone.run_id, gone.state, gone.reason) == (
            run_id,
            RunState.COMPLETED,
            Reason.COMPLETED,
        )
        assert gone.finished_at == pytest.approx(done.finished_at)
        assert done.finished_at is not None and gone.purged_at >= done.finished_at
        assert got.value.message.startswith(f"run {run_id} was purged at ")
        assert "; it had ended completed at " in got.value.message
        with pytest.raises(RunPurged):
            await rt.wait(run_id, timeout=1)
        with pytest.raises(RunPurged):
            await rt.steps(run_id)
    # Another process, later: the same answer.
    async with Client.open(store_url) as client:
        assert await client.submit("payer", ORDER, idempotency_key=KEY) == run_id
        assert await client.runs() == []
    assert len(calls) == 1


async def test_rt_run_after_its_run_was_purged_raises_and_runs_nothing(store_url: str) -> None:
    calls = Calls()
    async with Runtime.open(store_url, payer(calls), **FAST) as rt:
        first = await rt.run("payer", ORDER, idempotency_key=KEY)
        assert (first.mode, first.state) == (RunMode.INTERACTIVE, RunState.COMPLETED)
        assert (await rt.purge(finished_before=JUST_NOW)).runs == 1
        with pytest.raises(RunPurged) as caught:
            await rt.run("payer", ORDER, idempotency_key=KEY)
        assert (caught.value.run_id, caught.value.purged.state) == (first.id, RunState.COMPLETED)
        assert await rt.submit("payer", ORDER, idempotency_key=KEY) == first.id
        assert await rt.runs() == []
    assert len(calls) == 1


async def test_submits_racing_a_purge_of_their_run_all_get_its_id(store_url: str) -> None:
    async with Client.open(store_url) as owner:
        run_id = await owner.submit("payer", ORDER, idempotency_key=KEY)
        assert await owner.cancel(run_id)
        await anyio.sleep(0.01)
        async with AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(Client.open(store_url)) for _ in range(4)]
            seen: list[str] = []

            async def resubmit(client: Client) -> None:
                for _ in range(10):
                    seen.append(await client.submit("payer", ORDER, idempotency_key=KEY))

            async def purge() -> None:
                assert (await owner.purge(finished_before=JUST_NOW)).runs == 1

            async with anyio.create_task_group() as group:
                for client in clients:
                    group.start_soon(resubmit, client)
                group.start_soon(purge)
        assert seen == [run_id] * 40
        assert await owner.runs() == []
        with pytest.raises(RunPurged):
            await owner.get(run_id)


async def cancelled_and_purged(client: Client, run_id: str) -> None:
    """``run_id`` ended (cancelled) and was purged by a routine purge."""
    assert await client.cancel(run_id)
    await anyio.sleep(0.01)
    assert (await client.purge(finished_before=JUST_NOW)).runs == 1


async def test_every_action_on_a_purged_run_says_it_was_purged(store_url: str) -> None:
    async with Client.open(store_url) as client:
        run_id = await client.submit("payer", ORDER, idempotency_key=KEY)
        await cancelled_and_purged(client, run_id)
        actions: dict[str, Callable[[], Awaitable[object]]] = {
            "cancel": lambda: client.cancel(run_id),
            "redrive": lambda: client.redrive(run_id),
            "resolve": lambda: client.resolve(run_id, applied=True, step=1),
            "approve": lambda: client.approve(run_id),
            "reject": lambda: client.reject(run_id, reason="no"),
            "reply": lambda: client.send_input(run_id, 1),
        }
        for name, action in actions.items():
            with pytest.raises(RunPurged, match="was purged") as caught:
                await action()
            assert caught.value.run_id == run_id, name


async def test_a_purged_run_without_a_key_is_simply_not_found(store_url: str) -> None:
    async with Client.open(store_url) as client:
        run_id = await client.submit("payer", ORDER)
        await cancelled_and_purged(client, run_id)
        with pytest.raises(RunNotFound) as caught:
            await client.get(run_id)
        assert not isinstance(caught.value, RunPurged)


# -- forgetting keys: the operator's action ------------------------------------------------


@pytest.mark.parametrize("older_than", [timedelta(0), timedelta(seconds=-1), 30])
async def test_forgetting_keys_needs_a_positive_age(store_url: str, older_than: Any) -> None:
    async with Client.open(store_url) as client:
        with pytest.raises(InvalidInput, match="older_than"):
            await client.forget_keys(older_than=older_than)


async def test_a_forgotten_key_makes_a_new_run(store_url: str) -> None:
    async with Client.open(store_url) as client:
        run_id = await client.submit("payer", ORDER, idempotency_key=KEY)
        await cancelled_and_purged(client, run_id)
        assert (await client.forget_keys(older_than=JUST_NOW, dry_run=True)).keys == 1
        assert await client.submit("payer", ORDER, idempotency_key=KEY) == run_id
        assert await client.runs() == []

        assert (await client.forget_keys(older_than=JUST_NOW)).keys == 1
        fresh = await client.submit("payer", ORDER, idempotency_key=KEY)
        assert fresh != run_id
        assert [r.id for r in await client.runs()] == [fresh]
        with pytest.raises(RunNotFound) as caught:
            await client.get(run_id)
        assert not isinstance(caught.value, RunPurged)


async def test_the_run_of_a_key_is_found_stored_purged_and_not_once_forgotten(
    store_url: str,
) -> None:
    async with Client.open(store_url) as client:
        assert await client.run_id_for_key(KEY) is None
        run_id = await client.submit("payer", ORDER, idempotency_key=KEY)
        assert await client.run_id_for_key(KEY) == run_id
        await cancelled_and_purged(client, run_id)
        assert await client.run_id_for_key(KEY) == run_id
        await client.forget_keys(older_than=JUST_NOW)
        assert await client.run_id_for_key(KEY) is None
        assert await client.run_id_for_key("a\x00key") is None
        with pytest.raises(InvalidInput):
            await client.run_id_for_key("")
        assert await client.runs() == []


# -- migration 0007: the keys of existing runs are carried over ----------------------------


@pytest.fixture
def empty_url(request: pytest.FixtureRequest, dialect_name: str, tmp_path: Path) -> Iterator[str]:
    if dialect_name == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    server: Any = request.getfixturevalue("pg_server")
    name = server.create_database(migrated=False)
    try:
        yield server.url_for(name)
    finally:
        server.drop(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def dialect_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def migrate_to(store: SQLStore, version: int) -> None:
    """The schema as a leaseward whose newest migration was ``version`` left it."""
    executor = store._executor
    queries = load_queries(executor.dialect)
    async with executor.transaction():
        await executor.execute(queries["create_migrations_table"])
        for migration in MIGRATIONS:
            if migration.version > version:
                break
            for statement in migration.statements(executor.dialect):
                await executor.execute(statement)
            await executor.execute(
                queries["record_migration"],
                {"version": migration.version, "name": migration.name, "now": 1.0},
            )


LEGACY_RUN = (
    "INSERT INTO runs (id, agent, mode, state, reason, input_json, result_json, epoch, "
    "requeues, available_at, cancel_requested, created_at, updated_at, finished_at, "
    "idempotency_key, request_digest) VALUES ('{id}', 'payer', 'queued', '{state}', {reason}, "
    "'{{}}', NULL, 1, 0, 100, {false}, 100, 100, {finished}, {key}, {digest})"
)


async def test_migration_7_carries_the_keys_of_existing_runs_over(empty_url: str) -> None:
    store = await open_store(empty_url, migrate=False)
    try:
        await migrate_to(store, 6)
        digest = request_digest("payer", {})
        false = "FALSE" if store._executor.dialect == "postgresql" else "0"
        async with store._executor.transaction():
            for run_id, state, key in (
                ("done-1", "completed", "'order-1'"),
                ("queued-2", "queued", "'order-2'"),
                ("plain-3", "completed", "NULL"),
            ):
                terminal = state == "completed"
                await store._executor.execute(
                    LEGACY_RUN.format(
                        id=run_id,
                        state=state,
                        reason="'completed'" if terminal else "NULL",
                        false=false,
                        finished="200" if terminal else "NULL",
                        key=key,
                        digest="NULL" if key == "NULL" else f"'{digest}'",
                    )
                )
        assert await store.schema_version() == 6
        assert await store.migrate() == MIGRATIONS[-1].version
        client = Client(store)
        assert await client.submit("payer", {}, idempotency_key="order-1") == "done-1"
        assert await client.submit("payer", {}, idempotency_key="order-2") == "queued-2"
        with pytest.raises(IdempotencyKeyConflict, match="done-1"):
            await client.submit("payer", [], idempotency_key="order-1")
        assert (await client.purge(finished_before=JUST_NOW)).runs == 2
        assert await client.submit("payer", {}, idempotency_key="order-1") == "done-1"
        with pytest.raises(RunPurged) as caught:
            await client.get("done-1")
        assert (caught.value.purged.state, caught.value.purged.finished_at) == (
            RunState.COMPLETED,
            200.0,
        )
        assert sorted(r.id for r in await client.runs()) == ["queued-2"]
    finally:
        await store.aclose()
