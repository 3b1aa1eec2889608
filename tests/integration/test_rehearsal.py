"""A worker's store readied before its first batch: on PostgreSQL the connections its
batches commit on are open, and their statements parsed and planned, by a rehearsal
rolled back; a connection opened later rehearses as it opens; and nothing is changed."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from leaseward import Agent, App, ProviderReply, RunState, Runtime, ScriptedProvider, StoreError
from leaseward.runtime.runs import RunRecord
from leaseward.storage import (
    MOST_CONCURRENT_BATCHES,
    SIDE_BY_SIDE_ROUND_TRIP_SECONDS,
    SQLStore,
    open_store,
)
from tests.integration.pg_proxy import CommitDropper
from tests.integration.support import capture_logs, events
from tests.integration.test_store_conformance import new_run
from tests.integration.test_unanswered_commits import upstream

pytestmark = pytest.mark.anyio

JOURNAL_FUNCTION = "leaseward_write_journal("
PREPARED = "SELECT statement FROM pg_prepared_statements"


def idle_app() -> App:
    return App(agents=[Agent("idle", ScriptedProvider(lambda request: ProviderReply(text="done")))])


async def prepared_on_held_connections(store: SQLStore, count: int) -> list[list[str]]:
    """What ``count`` connections held at once each has prepared: the pool gives its
    most recently used ones first, and opens more when they are all held."""
    executor = store._executor
    seen: list[list[str]] = []
    all_held = anyio.Event()

    async def hold() -> None:
        async with executor.reading():
            rows = await executor.fetch_all(PREPARED)
            seen.append([str(row["statement"]) for row in rows])
            if len(seen) == count:
                all_held.set()
            await all_held.wait()

    async with anyio.create_task_group() as group:
        for _ in range(count):
            group.start_soon(hold)
    return seen


async def test_a_runtime_on_postgresql_opens_with_its_batches_connections_ready(
    pg_url: str,
) -> None:
    async with Runtime.open(pg_url, idle_app(), concurrency=4) as rt:
        store = rt.supervisor.persister._store
        assert isinstance(store, SQLStore)
        rehearsed = MOST_CONCURRENT_BATCHES + 2
        held = await prepared_on_held_connections(store, rehearsed)
    assert all(any(JOURNAL_FUNCTION in text for text in texts) for texts in held), held


async def test_a_connection_opened_after_the_rehearsal_rehearses_as_it_opens(
    pg_url: str,
) -> None:
    store = await open_store(f"{pg_url}?pool_size=8")
    try:
        await store.rehearse()
        # More than were rehearsed: the pool opens the rest now.
        held = await prepared_on_held_connections(store, MOST_CONCURRENT_BATCHES + 4)
    finally:
        await store.aclose()
    assert all(any(JOURNAL_FUNCTION in text for text in texts) for texts in held), held


async def test_without_a_rehearsal_a_fresh_connection_has_nothing_prepared(pg_url: str) -> None:
    # What the two tests above tell apart: reading prepares only the read.
    store = await open_store(f"{pg_url}?pool_size=8")
    try:
        held = await prepared_on_held_connections(store, 3)
    finally:
        await store.aclose()
    assert not any(JOURNAL_FUNCTION in text for texts in held for text in texts), held


async def test_a_rehearsal_changes_nothing(store_url: str) -> None:
    store = await open_store(store_url)
    try:
        queued = await store.create_run(new_run())
        await store.rehearse()
        after = await store.get_run(queued.id)
        runs = await store.list_runs()
    finally:
        await store.aclose()
    assert after == queued
    assert after is not None and after.state is RunState.QUEUED
    assert [run.id for run in runs] == [queued.id]


async def test_a_failing_rehearsal_is_logged_and_the_store_still_works(pg_url: str) -> None:
    store = await open_store(pg_url)
    executor = store._executor

    async def broken() -> None:
        await executor.fetch_all("SELECT * FROM no_such_table")

    try:
        with capture_logs() as logs:
            await executor.rehearse(broken, connections=2)
        assert "store.rehearsal_failed" in events(logs)
        created = await store.create_run(new_run())
        assert (await store.get_run(created.id)) == created
    finally:
        await store.aclose()


async def test_sqlite_has_nothing_to_rehearse(tmp_path: Any) -> None:
    store = await open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    called: list[str] = []

    async def work() -> None:
        called.append("rehearsed")
        raise StoreError("not to be run")

    try:
        await store._executor.rehearse(work, connections=3)
    finally:
        await store.aclose()
    assert called == []


async def test_a_rehearsal_the_server_does_not_finish_is_given_up_within_one_timeout(
    pg_url: str,
) -> None:
    store = await open_store(f"{pg_url}?command_timeout_seconds=0.5")
    executor = store._executor
    finished: list[int] = []

    async def slow() -> None:
        # Each statement within the statement timeout; all four are not.
        for statement in range(4):
            await executor.fetch_all("SELECT pg_sleep(0.3)")
            finished.append(statement)

    try:
        with capture_logs() as logs:
            await executor.rehearse(slow, connections=1)
        # A sleep lasts at least its 0.3 s: one at most ends within the 0.5 s given.
        assert len(finished) <= 1
        assert "store.rehearsal_failed" in events(logs)
        created = await store.create_run(new_run())
        assert (await store.get_run(created.id)) == created
    finally:
        await store.aclose()


async def test_a_rehearsal_cut_off_at_its_begin_leaves_the_next_write_committed(
    pg_server: Any, pg_database: str
) -> None:
    """The server answers the rehearsal's BEGIN after the rehearsal's bound: the
    transaction it began stays open on the connection unless the rehearsal ends it, and
    the next write on that connection would run inside it, reported committed, and be
    rolled back with it."""
    host, port, user = upstream(pg_server.admin_url)

    async def nothing() -> None:
        pass

    async with CommitDropper(host, port) as proxy:
        store = await open_store(
            proxy.url(pg_database, user, pool_size="1", command_timeout_seconds="0.3")
        )
        try:
            proxy.hold_answer(b"BEGIN", 0.45)
            with capture_logs() as logs:
                await store._executor.rehearse(nothing, connections=1)
            assert "store.rehearsal_failed" in events(logs)
            created = await store.create_run(new_run())
        finally:
            await store.aclose()
    assert await read_back(pg_server.url_for(pg_database), created) == created


async def test_a_connection_whose_rehearsal_is_cut_off_as_it_opens_commits_the_next_write(
    pg_server: Any, pg_database: str
) -> None:
    """The same, for a connection the pool opens later, which rehearses as it opens and
    goes straight to its first user."""
    host, port, user = upstream(pg_server.admin_url)
    created: list[RunRecord] = []

    async def nothing() -> None:
        pass

    async def write() -> None:
        created.append(await store.create_run(new_run()))

    async with CommitDropper(host, port) as proxy:
        store = await open_store(
            proxy.url(pg_database, user, pool_size="2", command_timeout_seconds="0.3")
        )
        try:
            await store._executor.rehearse(nothing, connections=1)
            proxy.hold_answer(b"BEGIN", 0.45)
            with capture_logs() as logs:
                # The one connection open is this block's: the write opens the second.
                async with store._executor.reading(), anyio.create_task_group() as tg:
                    tg.start_soon(write)
            assert "store.rehearsal_failed" in events(logs)
        finally:
            await store.aclose()
    assert await read_back(pg_server.url_for(pg_database), created[0]) == created[0]


async def read_back(url: str, written: RunRecord) -> RunRecord | None:
    """``written`` as a store of its own reads it: the writer's connection would see its
    own open transaction."""
    reader = await open_store(url)
    try:
        return await reader.get_run(written.id)
    finally:
        await reader.aclose()


def batches_for(trip: float) -> int:
    return 1 if trip < SIDE_BY_SIDE_ROUND_TRIP_SECONDS else MOST_CONCURRENT_BATCHES


async def test_a_server_on_this_machine_gets_one_batch_at_a_time(pg_url: str) -> None:
    """Before, a worker's Persister always kept two batches on a PostgreSQL server at
    once. With the server on the same two cores, a second batch's backend took the core
    the runs step on, and one batch at a time made 7-15% more steps a second. The round
    trip the rehearsal measures tells such a server from one a network away.

    The local server answers in about 0.1 ms; a machine so loaded that none of the
    round trips timed came back within the bound makes the worker keep two batches,
    as for a server that far, which is what the rule asks."""
    with capture_logs() as logs:
        async with Runtime.open(pg_url, idle_app(), concurrency=4) as rt:
            store = rt.supervisor.persister._store
            assert isinstance(store, SQLStore)
            trip = store._executor.round_trip_seconds
            batches = rt.supervisor.persister.concurrent_batches
    assert trip is not None and 0 < trip < 1.0
    assert batches == batches_for(trip)
    [measured] = [entry for entry in logs if entry["event"] == "store.round_trip_measured"]
    assert measured["milliseconds"] == round(trip * 1000, 3)


async def test_a_server_whose_answers_are_slow_gets_batches_side_by_side(
    pg_server: Any, pg_database: str
) -> None:
    """Through a proxy that holds every answer for twice the bound, as a network path
    would: the runs answered by one batch step while the other is on its way."""
    host, port, user = upstream(pg_server.admin_url)
    delay = 2 * SIDE_BY_SIDE_ROUND_TRIP_SECONDS
    async with (
        CommitDropper(host, port, answer_delay_seconds=delay) as proxy,
        Runtime.open(proxy.url(pg_database, user), idle_app(), concurrency=4) as rt,
    ):
        store = rt.supervisor.persister._store
        assert isinstance(store, SQLStore)
        trip = store._executor.round_trip_seconds
        batches = rt.supervisor.persister.concurrent_batches
        run_id = await rt.submit("idle", {})
        info = await rt.wait(run_id, timeout=10)
    assert trip is not None and trip >= delay
    assert batches == MOST_CONCURRENT_BATCHES
    assert info.state is RunState.COMPLETED


async def test_a_store_whose_round_trip_is_unknown_keeps_batches_side_by_side(
    pg_url: str,
) -> None:
    # Unmeasured (no rehearsal yet, or it failed): as a server that may be far away.
    store = await open_store(pg_url)
    try:
        unmeasured = store.concurrent_batches
        await store.rehearse()
        measured = store.concurrent_batches
        trip = store._executor.round_trip_seconds
    finally:
        await store.aclose()
    assert unmeasured == MOST_CONCURRENT_BATCHES
    assert trip is not None
    assert measured == batches_for(trip)


async def test_sqlite_has_one_writer_whatever_it_measures(tmp_path: Any) -> None:
    store = await open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        await store.rehearse()
        batches = store.concurrent_batches
    finally:
        await store.aclose()
    assert batches == 1
