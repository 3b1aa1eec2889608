"""A commit whose answer is lost: what the worker may conclude from reading its journal back.

A read-back proves records stored, never that the worker still holds the run: only
an answered commit or a keeper renewal extends a lease or admits a call (G6, G7).
On PostgreSQL the answers are lost for real, by a TCP proxy; on both stores, by an
executor that commits and then says nothing of how it went.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest

from leaseward import (
    Agent,
    App,
    Client,
    ProviderReply,
    ProviderRequest,
    RecoveryPolicy,
    Role,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.runtime.errors import CommitOutcomeUnknown, StoreError
from tests.integration.faults import (
    FaultyExecutor,
    Statement,
    Transaction,
    faulty_store,
    hold,
    lose_answer,
    query,
)
from tests.integration.pg_proxy import CommitDropper
from tests.integration.support import capture_logs, events, until

pytestmark = pytest.mark.anyio

LEASE_SECONDS = 2.0
WAIT_SECONDS = 20.0
# Long enough that a statement held in the partition waits for the heal, not a timeout.
HELD_SECONDS = "60"


def upstream(admin_url: str) -> tuple[str, int, str]:
    parts = urlsplit(admin_url)
    return parts.hostname or "127.0.0.1", parts.port or 5432, parts.username or "postgres"


class CarriesRecordOf:
    """Picks each transaction that writes a record of ``tool``, and after it each one that
    fences a run such a record was for: the worker sends a record whose answer it lost
    again with its run's next write, and when that write is fenced the executor sees
    its fence only, never the record."""

    def __init__(self, tool: str) -> None:
        self._tool = tool
        self._runs: set[str] = set()
        self._picked: Transaction | None = None

    def __call__(self, statement: Statement) -> bool:
        if statement.transaction is None or statement.transaction is self._picked:
            return False
        runs = {step.run_id for step in statement.steps() if step.tool == self._tool}
        self._runs |= runs
        if runs or (
            statement.name == "renew_leases"
            and any(row["run_id"] in self._runs for row in statement.rows("items"))
        ):
            self._picked = statement.transaction
            return True
        return False


def lose_answers_to(executor: FaultyExecutor, proxy: CommitDropper, tool: str) -> None:
    """Loses the answer to every commit that carries a record of ``tool``; the first
    loss partitions the worker from the database until the test heals it."""
    # The proxy loses the next COMMIT of any connection: the worker's heartbeat, the
    # one other writer beside the Persister, must not send it meanwhile.
    one_commit = anyio.Lock()

    async def lose(statement: Statement) -> None:
        await hold(one_commit)(statement)
        proxy.arm(then_partition=not proxy.dropped)

    executor.inject(CarriesRecordOf(tool), lose)
    executor.inject(query("beat_worker"), hold(one_commit))


def payer(provider_calls: list[int]) -> App:
    """lookup (read-only), then "done by A"; counts this worker's provider calls."""

    @tool(effect=ToolEffect.READ_ONLY, timeout_seconds=LEASE_SECONDS)
    async def lookup(ctx: ToolContext) -> str:
        return "found"

    def answer(request: ProviderRequest) -> ProviderReply:
        provider_calls.append(len(request.messages))
        if not any(message.role is Role.TOOL for message in request.messages):
            return ProviderReply(tool_calls=[ToolCall("lookup", {}, "l1")])
        return ProviderReply(text="done by A")

    return App([Agent("payer", ScriptedProvider(answer), tools=[lookup])])


def rescuer() -> App:
    @tool(effect=ToolEffect.READ_ONLY, timeout_seconds=LEASE_SECONDS)
    async def lookup(ctx: ToolContext) -> str:
        return "found"

    provider = ScriptedProvider(lambda request: ProviderReply(text="done by B"))
    return App([Agent("payer", provider, tools=[lookup])])


async def test_a_reaped_worker_whose_fenced_commit_went_unanswered_calls_nothing(
    pg_server: Any, pg_database: str
) -> None:
    """Issue 18, hole 3. A's commit of the lookup's record is stored but its answer is
    lost, and A is partitioned, so its read-back fails and the record stays pending.
    B reaps the run and completes it. A's next commit (the renewal before its provider
    call, carrying the pending record) is fenced, and its answer is lost too. Its
    read-back finds the record stored under A's epoch, by the first commit: before,
    A took that for a renewal and called the provider for a run B had completed."""
    host, port, user = upstream(pg_server.admin_url)
    a_calls: list[int] = []
    async with CommitDropper(host, port) as proxy:
        url = proxy.url(
            pg_database,
            user,
            connect_timeout_seconds=HELD_SECONDS,
            command_timeout_seconds=HELD_SECONDS,
        )
        store, executor = await faulty_store(url)
        lose_answers_to(executor, proxy, "lookup")
        try:
            with capture_logs() as logs:
                async with Runtime.open(
                    store,
                    payer(a_calls),
                    concurrency=1,
                    lease_seconds=LEASE_SECONDS,
                    reap_interval_seconds=1.0,
                    poll_interval_seconds=0.02,
                    worker_id="A",
                ) as a:
                    run_id = await a.submit("payer", "go")
                    await until(lambda: proxy.partitioned, WAIT_SECONDS)
                    async with Runtime.open(
                        pg_server.url_for(pg_database),
                        rescuer(),
                        concurrency=1,
                        lease_seconds=LEASE_SECONDS,
                        reap_interval_seconds=0.05,
                        poll_interval_seconds=0.02,
                        recovery=RecoveryPolicy(backoff_base_seconds=0.05),
                        worker_id="B",
                    ) as b:
                        run = await b.wait(run_id, timeout=WAIT_SECONDS)
                    proxy.heal()
                    await until(lambda: not a.supervisor.active_runs, WAIT_SECONDS)
        finally:
            await store.aclose()

    assert (run.state, run.result, run.epoch) == (RunState.COMPLETED, "done by B", 2)
    assert proxy.dropped >= 2
    assert "commit.undecided" in events(logs)
    assert len(a_calls) == 1, "A called the provider for a run it no longer held"


class CommitsThenFallsSilent:
    """Commits every batch carrying a record of ``tool``, then answers that the outcome is
    unknown. The first such answer cuts the worker off from its database: its reads
    (the journal's, the reaper's) wait for ``partition_over`` and fail, so that it
    neither learns what it stored nor reaps its own run while another worker takes
    it over."""

    def __init__(self, executor: FaultyExecutor, tool: str, partition_over: anyio.Event) -> None:
        self._partition_over = partition_over
        self.partitioned = anyio.Event()
        self.silent = executor.inject(CarriesRecordOf(tool), self._fall_silent)
        executor.inject(query("list_steps", "running_leases"), self._cut_off)

    async def _fall_silent(self, statement: Statement) -> None:
        await lose_answer()(statement)
        self.partitioned.set()

    async def _cut_off(self, statement: Statement) -> None:
        if self.partitioned.is_set() and not self._partition_over.is_set():
            await self._partition_over.wait()
            raise StoreError("injected: the database cannot be reached")


async def test_a_read_back_of_records_sent_before_renews_nothing(store_url: str) -> None:
    """The same hole on both stores, with the answers lost by the store wrapper: A's
    renewal carries only a record an earlier commit stored, so finding that record in
    the journal says nothing of this commit, and A must not call the provider."""
    a_calls: list[int] = []
    partition_over = anyio.Event()
    store, executor = await faulty_store(store_url)
    silence = CommitsThenFallsSilent(executor, "lookup", partition_over)
    try:
        with capture_logs() as logs:
            async with Runtime.open(
                store,
                payer(a_calls),
                concurrency=1,
                lease_seconds=LEASE_SECONDS,
                reap_interval_seconds=1.0,
                poll_interval_seconds=0.02,
                worker_id="A",
            ) as a:
                run_id = await a.submit("payer", "go")
                with anyio.fail_after(WAIT_SECONDS):
                    await silence.partitioned.wait()
                async with Runtime.open(
                    store_url,
                    rescuer(),
                    concurrency=1,
                    lease_seconds=LEASE_SECONDS,
                    reap_interval_seconds=0.05,
                    poll_interval_seconds=0.02,
                    recovery=RecoveryPolicy(backoff_base_seconds=0.05),
                    worker_id="B",
                ) as b:
                    run = await b.wait(run_id, timeout=WAIT_SECONDS)
                partition_over.set()
                await until(lambda: not a.supervisor.active_runs, WAIT_SECONDS)
    finally:
        await store.aclose()

    assert (run.state, run.result, run.epoch) == (RunState.COMPLETED, "done by B", 2)
    assert silence.silent.fired >= 2
    assert "commit.undecided" in events(logs)
    assert len(a_calls) == 1, "A called the provider for a run it no longer held"


async def test_a_submit_whose_answer_was_lost_returns_the_run_it_stored(store_url: str) -> None:
    """The run was stored though nobody heard so: the submit reads it back and returns it,
    so a caller who would retry on an error queues no second run."""
    store, executor = await faulty_store(store_url)
    try:
        executor.inject(query("insert_runs"), lose_answer(), times=1)
        run_id = await Client(store).submit("payer", "go")
        assert (await Client(store).get(run_id)).state is RunState.QUEUED
        assert [run.id for run in await Client(store).runs()] == [run_id]
    finally:
        await store.aclose()


async def test_a_submit_many_whose_answer_was_lost_returns_the_runs_it_stored(
    store_url: str,
) -> None:
    store, executor = await faulty_store(store_url)
    try:
        executor.inject(query("insert_runs"), lose_answer(), times=1)
        run_ids = await Client(store).submit_many("payer", ["a", "b", "c"])
        stored = sorted(run.id for run in await Client(store).runs())
    finally:
        await store.aclose()
    assert len(run_ids) == 3
    assert stored == sorted(run_ids)


async def lost_before_commit(statement: Statement) -> None:
    """A connection gone before the COMMIT went out: nothing was stored."""
    raise CommitOutcomeUnknown("injected: the connection went before the COMMIT")


async def test_a_submit_many_whose_answer_was_lost_and_that_stored_nothing_names_its_runs(
    store_url: str,
) -> None:
    store, executor = await faulty_store(store_url)

    try:
        executor.inject(query("insert_runs"), lost_before_commit, times=1)
        with pytest.raises(CommitOutcomeUnknown) as raised:
            await Client(store).submit_many("payer", ["a", "b"])
        assert await Client(store).runs() == []
    finally:
        await store.aclose()
    said = raised.value.message
    assert "the connection went before the COMMIT" in said, said
    assert re.search(r"its 2 runs, [0-9a-f-]{36} to [0-9a-f-]{36}, may be queued", said), said


async def test_a_submit_whose_answer_was_lost_and_that_stored_nothing_names_its_run(
    store_url: str,
) -> None:
    store, executor = await faulty_store(store_url)

    try:
        executor.inject(query("insert_runs"), lost_before_commit, times=1)
        with pytest.raises(CommitOutcomeUnknown) as raised:
            await Client(store).submit("payer", "go")
        assert await Client(store).runs() == []
    finally:
        await store.aclose()
    said = raised.value.message
    assert "the connection went before the COMMIT" in said, said
    assert re.search(r"run [0-9a-f-]{36} may be queued", said), said
