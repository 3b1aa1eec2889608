"""Fault injection at the executor: the real store, its real group commit and its real
per-request fallback, over an executor that fails, delays or loses the answer to the
statements a test picks.

A test opens a store through ``faulty_store`` and tells the executor what to do to
which statements (``inject``). A statement is picked by its named query and what
its parameters carry (the journal records of a tool, say); a fault runs before it
(fails it, delays it, marks its transaction's answer as lost) or after it, with its
answer in hand.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio
import attrs

from leaseward.runtime.clock import Clock
from leaseward.runtime.errors import CommitOutcomeUnknown, StoreError
from leaseward.runtime.lifecycle import StepKind, StepStatus
from leaseward.storage import SQLStore, open_store
from leaseward.storage.executor import Executor, Params, Row, WouldWait
from leaseward.storage.queries import load_queries

__all__ = [
    "Action",
    "FaultyExecutor",
    "Injection",
    "Picks",
    "Statement",
    "StepRecord",
    "Transaction",
    "crash",
    "delay",
    "fail",
    "faulty_store",
    "hold",
    "lose_answer",
    "query",
    "records_tool",
    "settles_tool",
]

_Callback = Callable[[], Awaitable[None]]
T = TypeVar("T")

# The positions insert_steps reads its rows' fields from (see the journal's item writer).
_RUN_ID, _SEQ, _KIND, _TOOL, _STATUS = 0, 1, 3, 4, 7


@attrs.frozen
class StepRecord:
    """One journal record a statement writes: a new step, or the outcome of an intent."""

    run_id: str
    seq: int
    kind: StepKind
    tool: str | None
    status: StepStatus
    settles: bool


class Transaction:
    """One transaction of the faulty executor, as its faults see it."""

    def __init__(self, *, alone: bool = False) -> None:
        self.alone = alone
        """One statement the server commits by itself (``write_alone``)."""
        self.statements: list[Statement] = []
        self.lost_answer: StoreError | None = None
        self._after_commit: list[_Callback] = []
        self._when_over: list[_Callback] = []

    def after_commit(self, action: _Callback) -> None:
        """Run ``action`` once the transaction committed, before its caller hears of it."""
        self._after_commit.append(action)

    def when_over(self, action: _Callback) -> None:
        """Run ``action`` when the transaction ends, committed or not."""
        self._when_over.append(action)

    async def committed(self) -> None:
        for action in self._after_commit:
            await action()
        if self.lost_answer is not None:
            raise self.lost_answer

    async def over(self) -> None:
        for action in self._when_over:
            await action()


@attrs.define
class Statement:
    """A statement on its way to the database: its query's name ("" for SQL that is not
    one of the dialect's named queries), its parameters, and its answer once it ran."""

    name: str
    sql: str
    params: Params
    transaction: Transaction | None
    intents: Mapping[tuple[str, int], str | None]
    answer: Sequence[Row] | None = None
    each: Sequence[Params] = ()
    """The rows of a statement run once for each (``execute_each``)."""

    def rows(self, parameter: str) -> list[Any]:
        """The rows of a set parameter (JSON text, in every dialect), or the rows of a
        statement run once for each."""
        if self.each:
            return list(self.each)
        value = self.params.get(parameter)
        return json.loads(value) if isinstance(value, str) else []

    def steps(self) -> list[StepRecord]:
        """The journal records this statement writes; an outcome names the tool of the
        intent it settles, as far as this executor saw that intent written."""
        if self.name == "write_journal":
            # New rows as insert_steps has them, outcomes as settle_steps has them.
            return [
                *attrs.evolve(self, name="insert_steps").steps(),
                *attrs.evolve(
                    self, name="settle_steps", params={"steps": self.params["outcomes"]}
                ).steps(),
            ]
        if self.name in ("insert_steps", "insert_step_set"):
            return [
                StepRecord(
                    row[_RUN_ID],
                    row[_SEQ],
                    StepKind(row[_KIND]),
                    row[_TOOL],
                    StepStatus(row[_STATUS]),
                    settles=False,
                )
                for row in self.rows("steps")
            ]
        if self.name == "insert_step":
            return [
                StepRecord(
                    row["run_id"],
                    row["seq"],
                    StepKind(row["kind"]),
                    row["tool"],
                    StepStatus(row["status"]),
                    settles=False,
                )
                for row in self.each
            ]
        if self.name in ("settle_steps", "settle_step", "settle_step_set"):
            return [
                StepRecord(
                    row["run_id"],
                    row["seq"],
                    StepKind.TOOL,
                    self.intents.get((row["run_id"], row["seq"])),
                    StepStatus(row["status"]),
                    settles=True,
                )
                for row in self.rows("steps")
            ]
        return []


Picks = Callable[[Statement], bool]
Action = Callable[[Statement], Awaitable[None]]


@attrs.define(eq=False)
class Injection:
    """A fault on the statements ``picks`` chooses, for ``times`` of them (all if None)."""

    picks: Picks
    before: Action | None
    after: Action | None
    times: int | None
    fired: int = 0

    def takes(self, statement: Statement) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        if not self.picks(statement):
            return False
        self.fired += 1
        return True


class FaultyExecutor:
    """The real executor, with faults injected at the statements they pick."""

    def __init__(self, inner: Executor, *, writes_alone: bool = False) -> None:
        self.inner = inner
        self.dialect = inner.dialect
        # Most faults here pick a transaction's statements (the fence, the inserts):
        # batches are written in transactions unless a test asks for one statement.
        self.writes_alone = writes_alone and inner.writes_alone
        # Never measured: this executor does not rehearse.
        self.round_trip_seconds: float | None = None
        queries = load_queries(inner.dialect)
        self._names = {queries[name]: name for name in queries}
        self._injections: list[Injection] = []
        self._transaction: ContextVar[Transaction | None] = ContextVar(
            f"faulty-transaction-{id(self)}", default=None
        )
        # Which tool each intent this executor wrote was for: an outcome's statement
        # names only the step it settles.
        self._intents: dict[tuple[str, int], str | None] = {}

    def inject(
        self,
        picks: Picks,
        before: Action | None = None,
        *,
        after: Action | None = None,
        times: int | None = None,
    ) -> Injection:
        injection = Injection(picks, before, after, times)
        self._injections.append(injection)
        return injection

    def remove(self, injection: Injection) -> None:
        self._injections.remove(injection)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        current = Transaction()
        token = self._transaction.set(current)
        try:
            async with self.inner.transaction():
                yield
            await current.committed()
        finally:
            self._transaction.reset(token)
            with anyio.CancelScope(shield=True):
                await current.over()

    async def run_transaction(self, work: Callable[[], Awaitable[T]]) -> T:
        # As a transaction() block, so that the faults still fall on single statements.
        async with self.transaction():
            return await work()

    def run_transaction_at_once(
        self, work: Callable[[], Awaitable[T]], *, wait_seconds: float = 0.0
    ) -> T:
        # Never: the faults fall on statements that are awaited one by one.
        raise WouldWait

    async def rehearse(self, work: Callable[[], Awaitable[None]], *, connections: int) -> None:
        """Nothing: a rehearsal's statements would meet the faults a test set for its own."""

    async def write_alone(self, sql: str, params: Params | None = None) -> Sequence[Row]:
        # A transaction of one statement: faults fall on it as on any other statement.
        current = Transaction(alone=True)
        token = self._transaction.set(current)
        try:
            rows = await self._statement(sql, params, lambda: self.inner.write_alone(sql, params))
            await current.committed()
        finally:
            self._transaction.reset(token)
            with anyio.CancelScope(shield=True):
                await current.over()
        return rows

    def savepoint(self, name: str) -> Any:
        return self.inner.savepoint(name)

    def reading(self) -> Any:
        return self.inner.reading()

    async def execute(self, sql: str, params: Params | None = None) -> None:
        async def run() -> Sequence[Row]:
            await self.inner.execute(sql, params)
            return []

        await self._statement(sql, params, run)

    async def fetch_all(self, sql: str, params: Params | None = None) -> Sequence[Row]:
        return await self._statement(sql, params, lambda: self.inner.fetch_all(sql, params))

    async def fetch_one(self, sql: str, params: Params | None = None) -> Row | None:
        async def run() -> Sequence[Row]:
            row = await self.inner.fetch_one(sql, params)
            return [] if row is None else [row]

        rows = await self._statement(sql, params, run)
        return rows[0] if rows else None

    async def execute_counted(self, sql: str, params: Params | None = None) -> int:
        changed = 0

        async def run() -> Sequence[Row]:
            nonlocal changed
            changed = await self.inner.execute_counted(sql, params)
            return []

        await self._statement(sql, params, run)
        return changed

    async def execute_each(self, sql: str, rows: Sequence[Params]) -> int:
        changed = 0

        async def run() -> Sequence[Row]:
            nonlocal changed
            changed = await self.inner.execute_each(sql, rows)
            return []

        await self._statement(sql, {}, run, each=rows)
        return changed

    async def notify(self, channel: str) -> None:
        await self.inner.notify(channel)

    async def wait_for_notification(self, channel: str, timeout: float) -> None:
        await self.inner.wait_for_notification(channel, timeout)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def _statement(
        self,
        sql: str,
        params: Params | None,
        run: Callable[[], Awaitable[Sequence[Row]]],
        *,
        each: Sequence[Params] = (),
    ) -> Sequence[Row]:
        transaction = self._transaction.get()
        statement = Statement(
            self._names.get(sql, ""), sql, params or {}, transaction, self._intents, each=each
        )
        fired = [injection for injection in self._injections if injection.takes(statement)]
        for injection in fired:
            if injection.before is not None:
                await injection.before(statement)
        statement.answer = await run()
        if transaction is not None:
            transaction.statements.append(statement)
        for step in statement.steps():
            if step.kind is StepKind.TOOL and step.status is StepStatus.STARTED:
                self._intents[(step.run_id, step.seq)] = step.tool
        for injection in fired:
            if injection.after is not None:
                await injection.after(statement)
        return statement.answer


async def faulty_store(
    url: str, *, clock: Clock | None = None, writes_alone: bool = False
) -> tuple[SQLStore, FaultyExecutor]:
    """The store the URL names, opened as production opens it, over a faulty executor
    (which writes batches in one statement only with ``writes_alone``, where the
    dialect does)."""
    opened: list[FaultyExecutor] = []

    def wrap(executor: Executor) -> Executor:
        opened.append(FaultyExecutor(executor, writes_alone=writes_alone))
        return opened[-1]

    store = await open_store(url, clock=clock, wrap_executor=wrap)
    return store, opened[0]


# -- what picks a statement -----------------------------------------------------------------


def query(*names: str) -> Picks:
    """Statements of these named queries."""
    return lambda statement: statement.name in names


def records_tool(name: str, status: StepStatus | None = None) -> Picks:
    """Statements that write a record of tool ``name`` (with ``status``, if given)."""
    return lambda statement: any(
        step.kind is StepKind.TOOL
        and step.tool == name
        and (status is None or step.status is status)
        for step in statement.steps()
    )


def settles_tool(name: str) -> Picks:
    """Statements that record the outcome of a started call of tool ``name``."""
    return lambda statement: any(step.settles and step.tool == name for step in statement.steps())


# -- what a fault does ----------------------------------------------------------------------


def fail(message: str = "injected: disk I/O error", *, data_error: bool = False) -> Action:
    """The statement fails as the database's fault (or, ``data_error``, as data it refuses)."""

    async def action(statement: Statement) -> None:
        raise StoreError(message, data_error=data_error)

    return action


def crash() -> Action:
    """The driver raises what no store error covers: a bug below the store."""

    async def action(statement: Statement) -> None:
        raise RuntimeError("injected crash inside the store driver")

    return action


def lose_answer(error: StoreError | None = None) -> Action:
    """The statement's transaction commits, and its caller hears ``error`` instead
    (by default: that the outcome of the commit is unknown)."""

    async def action(statement: Statement) -> None:
        assert statement.transaction is not None, f"{statement.name} runs outside a transaction"
        statement.transaction.lost_answer = error or CommitOutcomeUnknown(
            "injected: the answer to the COMMIT was lost"
        )

    return action


def delay(seconds: float) -> Action:
    async def action(statement: Statement) -> None:
        await anyio.sleep(seconds)

    return action


def hold(lock: anyio.Lock) -> Action:
    """Take ``lock`` before the statement and keep it until its transaction is over."""

    async def action(statement: Statement) -> None:
        assert statement.transaction is not None, f"{statement.name} runs outside a transaction"
        await lock.acquire()
        statement.transaction.when_over(_released(lock))

    return action


def _released(lock: anyio.Lock) -> _Callback:
    async def release() -> None:
        lock.release()

    return release
