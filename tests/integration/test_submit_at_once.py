"""A submit is committed at once, on its caller's turn of the event loop.

One ``await rt.submit(...)`` after another, beside runs that keep the Persister busy,
used to wait for a whole group commit each. Committed at once it is as durable when
it returns, holds the event loop for no more than ``AT_ONCE_SECONDS`` a turn, waits
on its own thread for a batch in flight on SQLite's, never waits on the event loop
for another connection's write lock, and keeps what submits promise: one run a key,
the conflict refused.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, closing, contextmanager
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from leaseward import (
    Agent,
    App,
    IdempotencyKeyConflict,
    ProviderReply,
    ProviderRequest,
    Role,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.actors.persister import AT_ONCE_SECONDS
from leaseward.storage.executor import WouldWait
from leaseward.storage.sqlite import SQLiteExecutor, SQLiteOptions
from tests.integration.support import until

pytestmark = pytest.mark.anyio

BUSY = "busy"
QUICK = "quick"
IDLE_POLL_SECONDS = 60.0


class Steps:
    """How many write calls the busy runs made."""

    def __init__(self) -> None:
        self.count = 0


def make_app(steps: Steps) -> App:
    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def record(ctx: ToolContext, key: str) -> str:
        steps.count += 1
        return key

    def busy(request: ProviderRequest) -> ProviderReply:
        turn = sum(1 for message in request.messages if message.role is Role.ASSISTANT)
        return ProviderReply(tool_calls=(ToolCall("record", {"key": f"k{turn}"}, f"c{turn}"),))

    return App(
        [
            Agent(BUSY, ScriptedProvider(busy), tools=[record], max_steps=10**6),
            Agent(QUICK, ScriptedProvider([ProviderReply(text="done")])),
        ]
    )


def path_of(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def stored(url: str, run_id: str) -> bool:
    """Whether another connection finds the run: committed, not only in this process."""
    with closing(sqlite3.connect(path_of(url))) as other:
        return other.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None


@contextmanager
def write_lock_held(url: str) -> Iterator[None]:
    """SQLite's write lock, held by a connection of its own, as another process would."""
    with closing(sqlite3.connect(path_of(url), isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")


async def test_a_submit_with_the_writer_free_is_stored_when_it_returns(db_url: str) -> None:
    async with Runtime.open(
        db_url, make_app(Steps()), poll_interval_seconds=IDLE_POLL_SECONDS
    ) as rt:
        persister = rt.supervisor.persister
        for n in range(10):
            run_id = await rt.submit(QUICK, {"n": n})
            assert stored(db_url, run_id)
        # The woken Supervisor's claims may hold the writer now and then; not every time.
        assert persister.stats.at_once >= 1


async def test_submits_at_once_leave_the_event_loop_to_the_runs_between_turns(
    db_url: str,
) -> None:
    steps = Steps()
    async with (
        Runtime.open(db_url, make_app(steps), concurrency=10) as rt,
        anyio.create_task_group() as tasks,
    ):
        await rt.submit_many(BUSY, [{"n": n} for n in range(10)])
        await until(lambda: steps.count >= 20, 10)
        turns = 0

        async def turning() -> None:
            nonlocal turns
            while True:
                turns += 1
                await anyio.lowlevel.checkpoint()

        tasks.start_soon(turning)
        persister = rt.supervisor.persister
        # Seconds spent in submits made at once, by the loop's turn they were made in.
        held: dict[int, float] = {}
        steps_before, started = steps.count, time.perf_counter()
        while time.perf_counter() - started < 0.5:
            at_once, turn, began = persister.stats.at_once, turns, time.perf_counter()
            await rt.submit(QUICK, {"turn": turn})
            if persister.stats.at_once > at_once and turns == turn:
                held[turn] = held.get(turn, 0.0) + time.perf_counter() - began
        tasks.cancel_scope.cancel()

    assert held, "no submit was committed at once"
    # Within a turn, submits at once stop once they have held the loop AT_ONCE_SECONDS;
    # the one that crosses it, and the bookkeeping around each, come on top, and two
    # turns of the Persister's count may fall between two of this task's. Held for
    # the whole loop, it would be the loop's half second.
    assert max(held.values()) < 10 * AT_ONCE_SECONDS
    assert steps.count > steps_before, "the runs took no step while the loop submitted"


async def test_another_connections_write_lock_is_waited_for_off_the_event_loop(
    db_url: str,
) -> None:
    async with Runtime.open(
        db_url, make_app(Steps()), poll_interval_seconds=IDLE_POLL_SECONDS
    ) as rt:
        persister = rt.supervisor.persister
        submitted: list[str] = []

        async def submit() -> None:
            submitted.append(await rt.submit(QUICK, {"n": 1}))

        async with anyio.create_task_group() as tasks:
            with write_lock_held(db_url):
                tasks.start_soon(submit)
                # The loop goes on while the submit waits, on the connection's thread:
                # held by a busy timeout (5 s) on the loop, this would time out.
                with anyio.fail_after(4):
                    for _ in range(10):
                        await anyio.sleep(0.01)
                assert submitted == []
            # The lock is let go: the submit, in the Persister's batch, goes through.
        assert persister.stats.at_once == 0
        assert stored(db_url, submitted[0])


async def test_a_key_submitted_at_once_is_one_run_and_its_conflict_is_refused(
    db_url: str,
) -> None:
    async with Runtime.open(
        db_url, make_app(Steps()), poll_interval_seconds=IDLE_POLL_SECONDS, concurrency=1
    ) as rt:
        persister = rt.supervisor.persister
        first = await rt.submit(QUICK, {"order": 42}, idempotency_key="order-42")
        again = await rt.submit(QUICK, {"order": 42}, idempotency_key="order-42")
        with pytest.raises(IdempotencyKeyConflict):
            await rt.submit(QUICK, {"order": 43}, idempotency_key="order-42")
        assert again == first
        assert [run.id for run in await rt.runs()] == [first]
        assert persister.stats.at_once >= 1


async def test_postgresql_submits_join_a_batch(pg_url: str) -> None:
    async with Runtime.open(pg_url, make_app(Steps())) as rt:
        run_id = await rt.submit(QUICK, {"n": 1})
        assert (await rt.get(run_id)).agent == QUICK
        assert rt.supervisor.persister.stats.at_once == 0


class Notes:
    """A SQLite executor with a table of notes, to write in transactions at once."""

    def __init__(self, executor: SQLiteExecutor) -> None:
        self.executor = executor

    async def add(self, text: str) -> None:
        await self.executor.execute("INSERT INTO notes VALUES (:text)", {"text": text})

    async def texts(self) -> list[str]:
        rows = await self.executor.fetch_all("SELECT text FROM notes ORDER BY rowid")
        return [row["text"] for row in rows]


@asynccontextmanager
async def notes_in(options: SQLiteOptions) -> AsyncIterator[Notes]:
    executor = await SQLiteExecutor.connect(options)
    try:
        await executor.run_transaction(
            lambda: executor.execute("CREATE TABLE notes (text TEXT NOT NULL)")
        )
        yield Notes(executor)
    finally:
        await executor.aclose()


async def test_a_transaction_at_once_waits_for_nothing_and_rolls_back_what_fails(
    tmp_path: Path,
) -> None:
    # A busy timeout that nobody would wait out: a transaction at once must not wait.
    path = tmp_path / "plain.db"
    async with notes_in(SQLiteOptions(str(path), busy_timeout_ms=60_000)) as notes:
        executor = notes.executor

        async def add_then_fail() -> None:
            await notes.add("rolled back")
            raise RuntimeError("the work failed")

        executor.run_transaction_at_once(lambda: notes.add("kept"))
        with pytest.raises(RuntimeError, match="the work failed"):
            executor.run_transaction_at_once(add_then_fail)
        # Another connection's write lock: refused at once, not waited for.
        with write_lock_held(f"sqlite:///{path}"):
            began = time.perf_counter()
            with pytest.raises(WouldWait):
                executor.run_transaction_at_once(lambda: notes.add("while locked"))
            assert time.perf_counter() - began < 30.0
        # The busy timeout is the connection's again.
        timeout = await executor.fetch_one("PRAGMA busy_timeout")
        assert timeout is not None and timeout["timeout"] == 60_000
        assert await notes.texts() == ["kept"]


async def test_a_transaction_at_once_waits_on_its_thread_for_the_one_handed_to_the_connection(
    tmp_path: Path,
) -> None:
    """A batch handed whole to the connection's thread has ended there before the task
    that handed it hears of it: a transaction at once waits for that end, and no more."""
    async with notes_in(SQLiteOptions(str(tmp_path / "handed.db"))) as notes:
        executor = notes.executor

        async def slow_batch() -> None:
            # Long enough on the thread for the transaction at once to find it there.
            await executor.fetch_all(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)"
                " SELECT count(*) FROM n"
            )
            await notes.add("handed")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(executor.run_transaction, slow_batch)
            # The batch is on the thread, its task waiting for the answer.
            await anyio.lowlevel.checkpoint()
            with pytest.raises(WouldWait):
                executor.run_transaction_at_once(lambda: notes.add("no wait"), wait_seconds=0.0)
            executor.run_transaction_at_once(lambda: notes.add("at once"), wait_seconds=30.0)
        assert await notes.texts() == ["handed", "at once"]
        # A transaction() block holds the connection between its statements: never used,
        # however long the caller would wait.
        entered, leave = anyio.Event(), anyio.Event()

        async def hold() -> None:
            async with executor.transaction():
                await notes.add("in a block")
                entered.set()
                await leave.wait()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hold)
            await entered.wait()
            with pytest.raises(WouldWait):
                executor.run_transaction_at_once(
                    lambda: notes.add("beside a block"), wait_seconds=1.0
                )
            leave.set()
        assert await notes.texts() == ["handed", "at once", "in a block"]
