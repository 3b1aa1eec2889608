"""Listing runs as the operator console pages them: newest first, filtered, keyset-paged.

Each test runs on SQLite and PostgreSQL (the ``store_url`` fixture); the store's
clock stands still unless the test moves it, so runs created together share one
``created_at`` and only their ids order them.
"""

from __future__ import annotations

import re
import sqlite3
import uuid

import anyio
import attrs
import pytest

import leaseward.client as client_module
from leaseward import Client, InvalidInput, RunNotFound
from leaseward.runtime.commits import Stored
from leaseward.runtime.lifecycle import Event, Reason, RunMode, RunState
from leaseward.runtime.listing import RunCursor, RunListing
from leaseward.runtime.runs import NewRun, RunInfo
from leaseward.runtime.settlements import Settlement
from leaseward.storage import BatchItem, CancelOutcome, SQLStore, open_store
from leaseward.storage.migrations import MIGRATIONS
from leaseward.storage.queries import load_queries
from leaseward.storage.reads import run_listing
from tests.integration.test_purged_keys import dialect_name, empty_url  # noqa: F401
from tests.integration.test_store_conformance import (  # noqa: F401
    COMPLETE,
    StoreClock,
    clock,
    new_run,
    store,
)

pytestmark = pytest.mark.anyio

DEAD = Settlement(Event.DEAD_LETTER, Reason.NOT_RETRYABLE, error="bad key")


async def created(
    store: SQLStore,  # noqa: F811
    run_id: str,
    *,
    agent: str = "a",
    mode: RunMode = RunMode.QUEUED,
    key: str | None = None,
) -> str:
    new: NewRun = attrs.evolve(new_run(agent, run_id=run_id), mode=mode)
    if key is not None:
        new = attrs.evolve(new, idempotency_key=key, request_digest=f"digest-{key}")
    record = await store.create_run(new)
    assert record.id == run_id
    return run_id


async def settled(store: SQLStore, run_id: str, agent: str, settlement: Settlement) -> None:  # noqa: F811
    (run,) = await store.claim_runs("w1", 1, 5.0, [agent])
    assert run.id == run_id
    (outcome,) = await store.commit_batch(
        [BatchItem(run.id, run.epoch, lease_seconds=5.0, settlement=settlement)]
    )
    assert isinstance(outcome, Stored)


def ids(runs: list[RunInfo]) -> list[str]:
    return [run.id for run in runs]


async def every_page(client: Client, size: int, **filters: object) -> list[list[str]]:
    pages: list[list[str]] = []
    after: RunCursor | None = None
    while True:
        page = await client.runs(after=after, limit=size, **filters)  # type: ignore[arg-type]
        if not page:
            return pages
        pages.append(ids(page))
        after = RunCursor.of(page[-1])


# -- order and paging -----------------------------------------------------------------------


async def test_runs_are_newest_first_and_runs_created_together_by_id_descending(
    store: SQLStore,  # noqa: F811
    clock: StoreClock,  # noqa: F811
) -> None:
    for n in (3, 1, 4):
        await created(store, f"run-{n:02d}")
    await clock.advance(10)
    for n in (0, 2):
        await created(store, f"run-{n:02d}")
    listed = await Client(store).runs()
    assert ids(listed) == ["run-02", "run-00", "run-04", "run-03", "run-01"]
    assert [run.created_at for run in listed] == sorted(
        (run.created_at for run in listed), reverse=True
    )


async def test_paging_by_cursor_neither_skips_nor_repeats_runs_created_at_one_instant(
    store: SQLStore,  # noqa: F811
    clock: StoreClock,  # noqa: F811
) -> None:
    for instant in range(3):
        for n in range(5):
            await created(store, f"run-{instant}-{n}")
        await clock.advance(1)
    client = Client(store)
    whole = ids(await client.runs(limit=1000))
    assert len(whole) == 15
    for size in (1, 2, 4, 5, 7):
        pages = await every_page(client, size)
        assert [run_id for page in pages for run_id in page] == whole
        assert all(len(page) == size for page in pages[:-1])


async def test_runs_created_while_paging_do_not_shift_the_later_pages(
    store: SQLStore,  # noqa: F811
    clock: StoreClock,  # noqa: F811
) -> None:
    for n in range(6):
        await created(store, f"run-{n:02d}")
    client = Client(store)
    first = await client.runs(limit=3)
    await created(store, "run-99")
    await clock.advance(1)
    await created(store, "run-newer")
    rest = await client.runs(after=RunCursor.of(first[-1]), limit=100)
    assert ids(first) + ids(rest) == [f"run-{n:02d}" for n in range(5, -1, -1)]


async def test_a_cursor_read_back_from_its_token_gives_the_same_next_page(
    store: SQLStore,  # noqa: F811
    clock: StoreClock,  # noqa: F811
) -> None:
    for n in range(4):
        await created(store, f"run-{n:02d}")
        await clock.advance(0.001)
    client = Client(store)
    first = await client.runs(limit=2)
    token = RunCursor.of(first[-1]).token()
    again = await client.runs(after=RunCursor.parse(token), limit=2)
    assert ids(again) == ["run-01", "run-00"]


# -- filters ----------------------------------------------------------------------------------


@pytest.fixture
async def mixed(store: SQLStore, clock: StoreClock) -> Client:  # noqa: F811
    """Runs of two agents, in every state the filters tell apart, one second apart:

    ======  =====  ===========  =============  =======  ===================
    run     agent  mode         state          key      created (s after t0)
    ======  =====  ===========  =============  =======  ===================
    done-a  a      queued       completed               0
    dead-b  b      queued       dead_lettered  order-2  1
    q-a     a      queued       queued         order-1  2
    q-b     b      queued       queued                  3
    gone-a  a      queued       cancelled               4
    live-b  b      interactive  running                 5
    ======  =====  ===========  =============  =======  ===================
    """
    # A claim takes the oldest queued run of its agents: these are settled as they are made.
    await created(store, "done-a")
    await settled(store, "done-a", "a", COMPLETE)
    await clock.advance(1)
    await created(store, "dead-b", agent="b", key="order-2")
    await settled(store, "dead-b", "b", DEAD)
    await clock.advance(1)
    await created(store, "q-a", key="order-1")
    await clock.advance(1)
    await created(store, "q-b", agent="b")
    await clock.advance(1)
    await created(store, "gone-a")
    assert await store.request_cancel("gone-a") is CancelOutcome.CANCELLED
    await clock.advance(1)
    await created(store, "live-b", agent="b", mode=RunMode.INTERACTIVE)
    return Client(store)


async def created_at(client: Client) -> dict[str, float]:
    return {run.id: run.created_at for run in await client.runs()}


async def test_the_mixed_runs_are_what_the_filters_are_checked_against(mixed: Client) -> None:
    listed = [(run.id, run.agent, run.mode, run.state) for run in await mixed.runs()]
    assert listed == [
        ("live-b", "b", RunMode.INTERACTIVE, RunState.RUNNING),
        ("gone-a", "a", RunMode.QUEUED, RunState.CANCELLED),
        ("q-b", "b", RunMode.QUEUED, RunState.QUEUED),
        ("q-a", "a", RunMode.QUEUED, RunState.QUEUED),
        ("dead-b", "b", RunMode.QUEUED, RunState.DEAD_LETTERED),
        ("done-a", "a", RunMode.QUEUED, RunState.COMPLETED),
    ]


async def test_each_filter_alone(mixed: Client) -> None:
    at = await created_at(mixed)
    assert ids(await mixed.runs(state=RunState.QUEUED)) == ["q-b", "q-a"]
    assert ids(await mixed.runs(state=RunState.WAITING_FOR_INPUT)) == []
    assert ids(await mixed.runs(agent="a")) == ["gone-a", "q-a", "done-a"]
    assert ids(await mixed.runs(agent="nobody")) == []
    assert ids(await mixed.runs(reason=Reason.NOT_RETRYABLE)) == ["dead-b"]
    assert ids(await mixed.runs(reason=Reason.CANCELLED)) == ["gone-a"]
    assert ids(await mixed.runs(mode=RunMode.INTERACTIVE)) == ["live-b"]
    assert ids(await mixed.runs(mode=RunMode.QUEUED)) == [
        "gone-a",
        "q-b",
        "q-a",
        "dead-b",
        "done-a",
    ]
    # The created range is half-open: from created_after, up to but not created_before.
    assert ids(await mixed.runs(created_after=at["gone-a"])) == ["live-b", "gone-a"]
    assert ids(await mixed.runs(created_before=at["dead-b"])) == ["done-a"]
    assert ids(await mixed.runs(created_after=at["dead-b"], created_before=at["q-b"])) == [
        "q-a",
        "dead-b",
    ]
    assert await mixed.runs(created_after=at["q-b"], created_before=at["q-b"]) == []


async def test_filters_together_must_all_match(mixed: Client) -> None:
    at = await created_at(mixed)
    assert ids(await mixed.runs(state=RunState.QUEUED, agent="b")) == ["q-b"]
    assert ids(await mixed.runs(state=RunState.RUNNING, agent="a")) == []
    assert ids(await mixed.runs(agent="b", mode=RunMode.INTERACTIVE)) == ["live-b"]
    assert ids(await mixed.runs(state=RunState.DEAD_LETTERED, reason=Reason.NOT_RETRYABLE)) == [
        "dead-b"
    ]
    assert ids(await mixed.runs(state=RunState.QUEUED, created_after=at["q-b"])) == ["q-b"]
    assert ids(await mixed.runs(agent="a", created_before=at["gone-a"])) == ["q-a", "done-a"]
    assert ids(
        await mixed.runs(
            agent="a",
            state=RunState.CANCELLED,
            reason=Reason.CANCELLED,
            mode=RunMode.QUEUED,
            created_after=at["done-a"],
            created_before=at["live-b"],
        )
    ) == ["gone-a"]


async def test_filters_page_by_cursor_too(mixed: Client) -> None:
    assert await every_page(mixed, 1, mode=RunMode.QUEUED, created_after=0.0) == [
        ["gone-a"],
        ["q-b"],
        ["q-a"],
        ["dead-b"],
        ["done-a"],
    ]
    assert await every_page(mixed, 2, agent="b") == [["live-b", "q-b"], ["dead-b"]]


async def test_the_dead_letters_of_a_reason_are_still_listed(mixed: Client) -> None:
    assert ids(await mixed.dead_letters()) == ["dead-b"]
    assert ids(await mixed.dead_letters(reason=Reason.NOT_RETRYABLE)) == ["dead-b"]
    assert await mixed.dead_letters(reason=Reason.INTERRUPTED_WRITE) == []


async def test_search_finds_a_run_by_its_id_or_its_idempotency_key_exactly(mixed: Client) -> None:
    assert ids(await mixed.runs(search="q-b")) == ["q-b"]
    assert ids(await mixed.runs(search="order-1")) == ["q-a"]
    assert ids(await mixed.runs(search="order-2")) == ["dead-b"]
    # Exact matches only: no prefix, no pattern, no other case.
    for near in ("q-", "q-b ", "Q-B", "order", "order-%", "%", "_-b"):
        assert await mixed.runs(search=near) == []
    # With other filters, the run found must match them too.
    assert ids(await mixed.runs(search="order-2", state=RunState.DEAD_LETTERED)) == ["dead-b"]
    assert await mixed.runs(search="order-2", state=RunState.QUEUED) == []


async def test_a_search_matching_one_run_by_id_and_another_by_key_lists_both(
    store: SQLStore,  # noqa: F811
    clock: StoreClock,  # noqa: F811
) -> None:
    await created(store, "shared-name")
    await clock.advance(1)
    await created(store, "other", key="shared-name")
    assert ids(await Client(store).runs(search="shared-name")) == ["other", "shared-name"]


async def test_a_run_id_copied_in_upper_case_names_its_run_and_a_key_keeps_its_case(
    store: SQLStore,  # noqa: F811
    clock: StoreClock,  # noqa: F811
) -> None:
    run_id, shouted_key = str(uuid.uuid4()), str(uuid.uuid4()).upper()
    await created(store, run_id)
    await clock.advance(1)
    await created(store, "keyed", key=shouted_key)
    client = Client(store)
    assert ids(await client.runs(search=run_id.upper())) == [run_id]
    assert (await client.get(run_id.upper())).id == run_id
    assert (await client.get(run_id.title())).id == run_id
    assert await client.steps(run_id.upper()) == await client.steps(run_id)
    assert await client.requests(run_id.upper()) == await client.requests(run_id)
    assert await client.cancel(run_id.upper()) is True
    assert (await client.wait(run_id.upper(), timeout=0)).id == run_id
    [waited] = await client.wait_all([run_id.upper()], timeout=0)
    assert waited.id == run_id
    # A key is the caller's text: only its own case finds it.
    assert ids(await client.runs(search=shouted_key)) == ["keyed"]
    assert await client.runs(search=shouted_key.lower()) == []


async def test_a_cancel_by_an_upper_case_id_wakes_the_runs_waiters_at_once(
    store: SQLStore,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Waiters that would poll only after an hour: only the cancel's own wake-up ends them.
    monkeypatch.setattr(client_module, "WAIT_POLL_SECONDS", 3600.0)
    run_id = str(uuid.uuid4())
    await created(store, run_id)
    client = Client(store)
    waited: list[RunInfo] = []

    async def wait() -> None:
        waited.append(await client.wait(run_id))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            assert await client.cancel(run_id.upper()) is True
    assert [run.state for run in waited] == [RunState.CANCELLED]


async def test_listed_runs_carry_the_store_clock_their_lease_compares_with(
    store: SQLStore,  # noqa: F811
    clock: StoreClock,  # noqa: F811
) -> None:
    await created(store, "held")
    await store.claim_runs("w1", 1, 5.0, ["a"])
    await clock.advance(6)
    (run,) = await Client(store).runs(state=RunState.RUNNING)
    assert run.lease_expires_at is not None and run.read_at is not None
    assert run.read_at == pytest.approx(clock.now())
    assert run.lease_expires_at < run.read_at


# -- counts and refusals ---------------------------------------------------------------------


async def test_run_counts_name_every_state(mixed: Client) -> None:
    counts = await mixed.run_counts()
    assert counts == {
        RunState.QUEUED: 2,
        RunState.RUNNING: 1,
        RunState.WAITING_FOR_APPROVAL: 0,
        RunState.WAITING_FOR_INPUT: 0,
        RunState.COMPLETED: 1,
        RunState.FAILED: 0,
        RunState.CANCELLED: 1,
        RunState.DEAD_LETTERED: 1,
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"limit": 0},
        {"limit": -1},
        {"limit": True},
        {"limit": 2.5},
        {"created_after": float("nan")},
        {"created_before": float("inf")},
        {"created_after": "yesterday"},
        {"search": ""},
        {"search": 7},
        {"after": "not-a-cursor"},
        # Nanoseconds taken for seconds, and before the year 1: no calendar shows them.
        {"created_after": 1_796_597_640_000_000_000},
        {"created_before": -99_999_999_999_999_999},
        # PostgreSQL's text holds no NUL: its driver would fail, not find nothing.
        {"agent": "a\x00"},
        {"search": "x\x00y"},
    ],
)
async def test_a_listing_asked_with_a_wrong_value_is_refused(
    store: SQLStore,  # noqa: F811
    bad: dict[str, object],
) -> None:
    with pytest.raises(InvalidInput):
        await Client(store).runs(**bad)  # type: ignore[arg-type]


async def test_a_run_id_no_store_could_hold_is_a_run_not_found_on_every_store(
    store: SQLStore,  # noqa: F811
) -> None:
    client = Client(store)
    ghost = "run\x00id"
    for asked in (
        client.get(ghost),
        client.steps(ghost),
        client.requests(ghost),
        client.cancel(ghost),
        client.redrive(ghost),
        client.resolve(ghost, applied=True, operator="alice", note="checked"),
        client.approve(ghost, operator="alice"),
        client.wait_all([ghost], timeout=1),
    ):
        with pytest.raises(RunNotFound, match=r"run\\x00id"):
            await asked
    with pytest.raises(InvalidInput, match="a run id is a string"):
        await client.get(7)  # type: ignore[arg-type]


async def test_a_garbled_cursor_token_is_refused_before_the_store_is_asked(
    store: SQLStore,  # noqa: F811
) -> None:
    await created(store, "run-00")
    token = RunCursor(created_at=1.0, id="run-00").token()
    for garbled in (token[:-1], token + "=", token + "!", "", "x" * 5000):
        with pytest.raises(InvalidInput):
            await Client(store).runs(after=RunCursor.parse(garbled))


# -- indexes: each shape of filters reads its page in order from an index -----------------------

T = 1_700_000_000.0
SHAPES = [
    ({}, "runs_by_created"),
    ({"state": RunState.COMPLETED}, "runs_by_state"),
    ({"agent": "a"}, "runs_by_agent"),
    ({"state": RunState.COMPLETED, "agent": "a"}, "runs_by_agent_state"),
    ({"mode": RunMode.INTERACTIVE}, "runs_by_mode"),
    ({"created_after": T, "created_before": T + 60}, "runs_by_created"),
    ({"state": RunState.FAILED, "created_after": T}, "runs_by_state"),
    ({"agent": "a", "created_before": T}, "runs_by_agent"),
    ({"after": RunCursor(created_at=T, id="r")}, "runs_by_created"),
    ({"state": RunState.FAILED, "after": RunCursor(created_at=T, id="r")}, "runs_by_state"),
    (
        {"agent": "a", "state": RunState.FAILED, "after": RunCursor(created_at=T, id="r")},
        "runs_by_agent_state",
    ),
]


async def plan_of(store_url: str, filters: dict[str, object]) -> str:
    dialect = "postgresql" if store_url.startswith("postgresql") else "sqlite"
    sql, params = run_listing(load_queries(dialect), RunListing(**filters), T)  # type: ignore[arg-type]
    if dialect == "sqlite":
        connection = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        try:
            rows = connection.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
        finally:
            connection.close()
        return "\n".join(row[-1] for row in rows)
    import asyncpg

    from leaseward.storage.postgres import translate_params

    text, names = translate_params(sql)
    pg = await asyncpg.connect(store_url)
    try:
        # On a table this small a scan and a sort would be cheapest: forbid them, so
        # that the plan is the one a big table gets, if an index can serve it at all.
        await pg.execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
        await pg.execute("SET enable_sort = off")
        rows = await pg.fetch("EXPLAIN " + text, *[params[name] for name in names])
    finally:
        await pg.close()
    return "\n".join(row[0] for row in rows)


@pytest.mark.parametrize(("filters", "index"), SHAPES)
async def test_a_page_of_each_shape_is_read_in_order_from_its_index(
    store: SQLStore,  # noqa: F811
    store_url: str,
    filters: dict[str, object],
    index: str,
) -> None:
    await created(store, "r")
    plan = await plan_of(store_url, filters)
    assert re.search(rf"USING (COVERING )?INDEX {index}\b|Index Scan Backward using {index} ", plan)
    assert "TEMP B-TREE" not in plan and "Sort" not in plan


# -- migration 0009 --------------------------------------------------------------------------

LISTING_INDEXES = {
    "runs_by_created",
    "runs_by_state",
    "runs_by_agent",
    "runs_by_agent_state",
    "runs_by_mode",
}


async def index_columns(sql_store: SQLStore) -> dict[str, str]:
    executor = sql_store._executor
    if executor.dialect == "sqlite":
        rows = await executor.fetch_all(
            "SELECT name, sql AS definition FROM sqlite_master WHERE tbl_name = 'runs'"
            " AND type = 'index' AND sql IS NOT NULL"
        )
    else:
        rows = await executor.fetch_all(
            "SELECT indexname AS name, indexdef AS definition FROM pg_indexes"
            " WHERE tablename = 'runs'"
        )
    return {
        row["name"]: re.sub(r"\s+", "", row["definition"].partition("(")[2]).lower()
        for row in rows
        if row["name"] in LISTING_INDEXES
    }


async def migrated_without_run_listing(store: SQLStore) -> None:  # noqa: F811
    """The schema as a leaseward without migration 9 left it: every other migration
    applied and recorded, 10 and later too, as on a store that main migrated first."""
    executor = store._executor
    queries = load_queries(executor.dialect)
    async with executor.transaction():
        await executor.execute(queries["create_migrations_table"])
        for migration in MIGRATIONS:
            if migration.name == "run_listing":
                continue
            for statement in migration.statements(executor.dialect):
                await executor.execute(statement)
            await executor.execute(
                queries["record_migration"],
                {"version": migration.version, "name": migration.name, "now": 1.0},
            )


async def test_migration_9_indexes_the_runs_already_stored(
    empty_url: str,  # noqa: F811
) -> None:
    opened = await open_store(empty_url, migrate=False)
    try:
        await migrated_without_run_listing(opened)
        for n in range(3):
            await created(opened, f"run-{n}", agent=f"agent-{n % 2}")
        assert await index_columns(opened) == {"runs_by_created": "created_at)"}
        before = await Client(opened).runs(agent="agent-0")
        assert await opened.migrate() == MIGRATIONS[-1].version
        assert await index_columns(opened) == {
            "runs_by_created": "created_at,id)",
            "runs_by_state": "state,created_at,id)",
            "runs_by_agent": "agent,created_at,id)",
            "runs_by_agent_state": "agent,state,created_at,id)",
            "runs_by_mode": "mode,created_at,id)",
        }
        after = await Client(opened).runs(agent="agent-0")
        assert ids(after) == ids(before) and sorted(ids(after)) == ["run-0", "run-2"]
    finally:
        await opened.aclose()
