"""The executor protocol: the thin layer that only runs queries, one per dialect."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

__all__ = ["Executor", "Params", "Row", "WouldWait"]

Params = Mapping[str, Any]
Row = Mapping[str, Any]
T = TypeVar("T")


class WouldWait(Exception):
    """``run_transaction_at_once`` could not begin without waiting, and did nothing."""


class Executor(Protocol):
    """Runs SQL. Raises only ``StoreError``: driver errors are translated at this boundary.

    The error's ``data_error`` says whether the statement's data was refused (text
    the driver cannot encode, a number out of range, a constraint), which no
    retry fixes, rather than the database being unwell (locks, I/O, network).

    Parameters are named (``:name``) in every dialect. A list or tuple value is
    bound as the dialect needs it: an array in PostgreSQL, JSON text in SQLite
    (which reads it with ``json_each``). Each task has its own transaction or
    read: what a task runs inside ``transaction()`` or ``reading()`` goes to the
    connection that block holds, and never interleaves with another task's.
    """

    dialect: str
    writes_alone: bool
    """Whether ``write_alone`` saves something over a transaction of one statement:
    the round trips of BEGIN and COMMIT to a server. Where it does, the journal writes
    a batch of steps and renewals in one statement."""
    round_trip_seconds: float | None
    """The least time a statement that does nothing took to come back from the server,
    measured by ``rehearse``; None before, where it failed, or where the database is
    in the process (SQLite)."""

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """One write transaction on one connection for its whole length; rolls back on error.

        Row locks and fenced updates keep concurrent transactions correct; a
        dialect may also serialize them (SQLite holds its write lock throughout).
        """
        ...

    async def run_transaction(self, work: Callable[[], Awaitable[T]]) -> T:
        """``work()`` as one ``transaction()``, returning what it returns.

        ``work`` must await nothing but this executor's statements: a dialect may run
        it all where its connection lives, in one trip (SQLite, on its thread), and
        then a cancel waits for the transaction to end rather than leave its outcome
        unknown.
        """
        ...

    def run_transaction_at_once(
        self, work: Callable[[], Awaitable[T]], *, wait_seconds: float = 0.0
    ) -> T:
        """``work()`` as one transaction, carried out before this returns, on the calling
        thread, without a turn of the event loop.

        Raises ``WouldWait``, having done nothing, where that cannot begin at once: the
        connection is in use (a dialect may wait up to ``wait_seconds``, holding the
        calling thread, for a transaction it runs elsewhere to end), another connection
        holds the database's write lock, or the dialect's driver only awaits
        (PostgreSQL). ``work`` awaits nothing but this executor's statements, as for
        ``run_transaction``.
        """
        ...

    async def rehearse(self, work: Callable[[], Awaitable[None]], *, connections: int) -> None:
        """Run ``work`` now on ``connections`` connections, and from then on on every
        connection opened, each time in a transaction that is rolled back.

        For a server that plans statements and loads its catalogs per connection
        (PostgreSQL): a worker's first batches then find them ready, instead of
        waiting for each connection to open and plan. ``work`` runs statements that
        change nothing, and whatever they did is rolled back; a failure is logged, not
        raised. A dialect with nothing to gain (SQLite) does nothing. A server's
        dialect measures ``round_trip_seconds`` too.
        """
        ...

    async def write_alone(self, sql: str, params: Params | None = None) -> Sequence[Row]:
        """Run one statement as a transaction of its own; what it returns, fetched.

        Outside any ``transaction()``. A dialect whose server commits a lone
        statement by itself sends it in one round trip. When the connection is lost
        once the statement went out, it may have committed: that raises
        ``CommitOutcomeUnknown``, as a lost COMMIT does.
        """
        ...

    def savepoint(self, name: str) -> AbstractAsyncContextManager[None]:
        """Inside a transaction: a part that rolls back alone when its block raises."""
        ...

    def reading(self) -> AbstractAsyncContextManager[None]:
        """Exclusive use of the connection for a sequence of reads outside a transaction."""
        ...

    async def execute(self, sql: str, params: Params | None = None) -> None:
        """Run a statement. To learn what it changed, give it RETURNING and fetch."""
        ...

    async def fetch_all(self, sql: str, params: Params | None = None) -> Sequence[Row]: ...

    async def execute_counted(self, sql: str, params: Params | None = None) -> int:
        """Run a statement; returns how many rows it changed (a set statement that returns
        no rows, where each row returned would cost the dialect a trip of its own)."""
        ...

    async def execute_each(self, sql: str, rows: Sequence[Params]) -> int:
        """Run ``sql`` once for each of ``rows``; returns how many rows it changed in all.

        For a dialect that binds rows one by one faster than it reads a set of them
        from one parameter: its queries then give the one-row form of a set statement.
        """
        ...

    async def fetch_one(self, sql: str, params: Params | None = None) -> Row | None: ...

    async def notify(self, channel: str) -> None:
        """Tell listeners on ``channel`` (other processes too, where the dialect can).

        Inside a transaction the notice goes out when it commits, and not at all
        if it rolls back. Best effort: a dialect without notifications does nothing.
        """
        ...

    async def wait_for_notification(self, channel: str, timeout: float) -> None:
        """Return when a notice on ``channel`` arrives, or after ``timeout`` seconds.

        A notice that arrived since the last wait returns at once. Never raises a
        store fault: a lost listening connection is re-established with backoff,
        and until then this just waits out the timeout (polling is the fallback).
        """
        ...

    async def aclose(self) -> None: ...
