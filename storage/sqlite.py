"""The SQLite executor: a writing and a reading aiosqlite connection, WAL, fsync on commit.

Transactions go to the writing connection, one at a time; ``reading()`` blocks
go to the reading one, so that WAL lets them read the last commit while the
next batch is being written, instead of queueing behind it. A transaction
given whole to ``run_transaction()`` (the Persister's batches) runs on the
writing connection's thread in one trip, where each statement of a
``transaction()`` block is a trip of its own.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import aiosqlite
import anyio
import attrs

from leaseward.runtime.errors import ConfigurationError, StoreError, StoreNotFound
from leaseward.storage.executor import Params, Row, WouldWait
from leaseward.storage.handoffs import quick_handoffs
from leaseward.storage.home_loop import HomeLoop
from leaseward.storage.sqlite_files import OpenedFiles

__all__ = [
    "BUSY_TIMEOUT_MS",
    "DURABLE_SYNCHRONOUS",
    "SYNCHRONOUS_MODES",
    "SQLiteExecutor",
    "SQLiteOptions",
]

BUSY_TIMEOUT_MS = 5000
_WAL_RETRY_SECONDS = 0.01
_ITER_CHUNK_SIZE = 64  # aiosqlite.connect's default
T = TypeVar("T")
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
DURABLE_SYNCHRONOUS = ("FULL", "EXTRA")
"""The modes in which a commit in WAL mode is on disk when it returns: with NORMAL it
survives the process dying, not the machine."""


@attrs.frozen
class SQLiteOptions:
    path: str
    synchronous: str = "FULL"
    busy_timeout_ms: int = BUSY_TIMEOUT_MS


def _bindable(params: Params | None) -> Mapping[str, Any]:
    """SQLite has no arrays: a list or tuple goes in as JSON text, read with json_each."""
    if not params:
        return {}
    if not any(isinstance(value, list | tuple) for value in params.values()):
        return params
    return {
        key: json.dumps(list(value)) if isinstance(value, list | tuple) else value
        for key, value in params.items()
    }


def _open(path: str, read_only: bool, create: bool, timeout: float) -> sqlite3.Connection:
    """The database, opened on a worker thread for aiosqlite's thread to use from then on.

    Read-only, it is opened in the first of these ways that works:

    * ``mode=rw`` with ``query_only``: no change gets in, and where SQLite may
      write its side files (-wal, -shm) it also removes them on close, whereas a
      ``mode=ro`` connection would leave them behind in a writable directory;
    * ``mode=ro``: reads through the side files a writer left in a directory
      where they cannot be created;
    * ``immutable``, only when there is no write-ahead log: then the file alone
      holds every committed change, and this needs no side files at all.
    """
    uri = Path(path).absolute().as_uri()
    if not read_only:
        # mode=rw opens the file only if it is there: one removed since it was checked
        # for is an error, not a new empty database.
        target, is_uri = (path, False) if create else (f"{uri}?mode=rw", True)
        return sqlite3.connect(
            target, uri=is_uri, timeout=timeout, isolation_level=None, check_same_thread=False
        )
    modes = ["mode=rw", "mode=ro"]
    if not Path(f"{path}-wal").exists():
        modes.append("mode=ro&immutable=1")
    first: sqlite3.Error | None = None
    for mode in modes:
        try:
            return _open_reader(f"{uri}?{mode}", timeout)
        except sqlite3.Error as exc:
            first = first or exc
    assert first is not None
    raise first


def _open_reader(uri: str, timeout: float) -> sqlite3.Connection:
    connection = sqlite3.connect(
        uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False
    )
    try:
        connection.execute("PRAGMA query_only = ON")
        # SQLite opens the file at the first read: that is what tells whether this mode works.
        connection.execute("SELECT count(*) FROM sqlite_master").fetchall()
    except BaseException:
        connection.close()
        raise
    return connection


# Errors that say the statement's data is unacceptable, not that the database is
# unwell: the same statement fails the same way every time. Binding raises the
# plain Python ones: text that is not UTF-8 (a lone surrogate), an integer wider
# than 64 bits. sqlite3.DataError is a value too big, IntegrityError a constraint.
_DATA_ERRORS: tuple[type[Exception], ...] = (
    UnicodeEncodeError,
    OverflowError,
    sqlite3.DataError,
    sqlite3.IntegrityError,
)


# Another connection holds the write lock (BUSY), or this one's shared cache does (LOCKED).
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _describe(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return f"sqlite: {text}"


def _located(exc: Exception, path: str) -> str:
    """The error and the file it is about: "database is locked" alone does not say which."""
    where = path if path == ":memory:" else os.path.abspath(path)
    return f"{_describe(exc)} ({where})"


def _connect_error(exc: sqlite3.Error, path: str) -> StoreError:
    code = getattr(exc, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_NOTADB:
        where = os.path.abspath(path)
        return StoreNotFound(
            where,
            f"{where} is not a SQLite database ({_describe(exc)}), so no leaseward store: "
            "give the path of a store, or of a file that does not exist yet",
        )
    directory = os.path.dirname(os.path.abspath(path))
    if code == sqlite3.SQLITE_CANTOPEN and not os.access(directory, os.W_OK):
        # The file may be readable: SQLite still needs its -wal and -shm files beside it.
        return StoreError(
            f"{_located(exc, path)}: the directory {directory!r} is not writable here (a "
            "read-only mount, or its permissions), and SQLite keeps the database's -wal "
            "and -shm files beside it"
        )
    return StoreError(_located(exc, path))


async def _enter_wal(connection: aiosqlite.Connection, timeout: float) -> None:
    """Put the database in WAL mode, waiting up to ``timeout`` for other processes.

    Switching a new file to WAL needs a moment alone with it, and SQLite reports
    "database is locked" at once, without its busy handler, while another process
    creates or migrates the same file: two workers starting together must not
    fail for that. A file already in WAL mode needs no switch.
    """
    deadline = anyio.current_time() + timeout
    while True:
        mode = [row[0] for row in await connection.execute_fetchall("PRAGMA journal_mode")]
        if [str(value).lower() for value in mode] == ["wal"]:
            return
        try:
            # Fetched to the end: an open cursor on this pragma would keep the lock.
            await connection.execute_fetchall("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or anyio.current_time() >= deadline:
                raise
        await anyio.sleep(_WAL_RETRY_SECONDS)


class _Here(threading.local):
    executor: SQLiteExecutor | None = None


# The executor whose run_transaction() this thread is running: its statements run at once.
_HERE = _Here()


def _finish_here(work: Awaitable[T]) -> T:
    """Drive ``work`` to its end without an event loop: it awaits only statements run here."""
    steps = work.__await__()
    try:
        waited = next(steps)
    except StopIteration as done:
        finished: T = done.value
        return finished
    with contextlib.suppress(BaseException):
        steps.close()
    raise RuntimeError(f"a transaction run on the connection's thread awaited {waited!r}")


# The connection each executor's block holds in this context, by executor id.
_BOUND: ContextVar[Mapping[int, aiosqlite.Connection]] = ContextVar(
    "leaseward_sqlite_bound", default=MappingProxyType({})
)


async def _connect(
    options: SQLiteOptions, *, read_only: bool, timeout: float, create: bool = True
) -> tuple[aiosqlite.Connection, sqlite3.Connection]:
    """The connection, and the sqlite3 one it runs on its thread."""
    # The file is opened here, not by aiosqlite.connect: when that fails, aiosqlite's
    # thread answers after the error has gone up, and if the event loop has closed
    # by then it prints a traceback under our one-line error. A connection that is
    # already open cannot fail to connect. Shielded, so that a cancel cannot drop it.
    with anyio.CancelScope(shield=True):
        try:
            raw = await anyio.to_thread.run_sync(_open, options.path, read_only, create, timeout)
        except sqlite3.Error as exc:
            raise _connect_error(exc, options.path) from exc
        connection = await aiosqlite.Connection(lambda: raw, _ITER_CHUNK_SIZE)
    connection.row_factory = sqlite3.Row
    return connection, raw


async def _configure(connection: aiosqlite.Connection, options: SQLiteOptions) -> None:
    # Exact, where the connect timeout in seconds may round a millisecond off.
    await connection.execute_fetchall(f"PRAGMA busy_timeout = {int(options.busy_timeout_ms)}")
    await connection.execute_fetchall(f"PRAGMA synchronous = {options.synchronous}")
    await connection.execute_fetchall("PRAGMA foreign_keys = ON")


class SQLiteExecutor:
    dialect = "sqlite"
    # A transaction already runs on the connection's thread in one trip.
    writes_alone = False
    round_trip_seconds: float | None = None

    def __init__(
        self,
        connection: aiosqlite.Connection,
        raw: sqlite3.Connection,
        options: SQLiteOptions,
        reader: aiosqlite.Connection | None = None,
        files: OpenedFiles | None = None,
    ) -> None:
        self._connection = connection
        self._raw = raw
        """What ``connection`` runs on its thread, for a transaction run there in one trip."""
        self._reader = reader or connection
        self._options = options
        # One connection serves one statement sequence at a time: a transaction or
        # a read must not interleave with another task's statements.
        # Taken without a turn of the event loop when free: the Persister's batch then
        # reaches the connection's thread before the runs its last batch answered
        # take their steps, and commits while they do.
        self._lock = anyio.Lock(fast_acquire=True)
        self._read_lock = self._lock if reader is None else anyio.Lock()
        self._savepoints = 0
        # A transaction given whole to the connection's thread: while one is, the lock's
        # holder awaits nothing but its end, and the connection is free once it ended.
        self._handed_over = False
        self._thread_done = threading.Event()
        self._closed = False
        self._home = HomeLoop(options.path)
        # None where nothing is written, or no file holds it (":memory:").
        self._files = files

    @classmethod
    async def connect(
        cls, options: SQLiteOptions, *, read_only: bool = False, create: bool = True
    ) -> SQLiteExecutor:
        """Open the database, creating the file unless ``create`` is False. ``read_only``
        opens an existing one and refuses every change; it works where this process may
        only read (the file, its directory, or both)."""
        if options.synchronous not in SYNCHRONOUS_MODES:
            raise ConfigurationError(
                f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, "
                f"not {options.synchronous!r}"
            )
        if options.path != ":memory:":
            parent = (await (await anyio.Path(options.path).expanduser()).resolve()).parent
            if not await parent.is_dir():
                raise StoreError(f"sqlite: the directory {str(parent)!r} does not exist")
        timeout = options.busy_timeout_ms / 1000
        connection, raw = await _connect(
            options, read_only=read_only, timeout=timeout, create=create
        )
        reader: aiosqlite.Connection | None = None
        files: OpenedFiles | None = None
        try:
            await _configure(connection, options)
            if not read_only:
                await _enter_wal(connection, timeout)
                if options.path != ":memory:":
                    # Opened once the file is in WAL mode: a reader of a WAL file
                    # never waits for a writer, nor a writer for it.
                    reader, _ = await _connect(options, read_only=True, timeout=timeout)
                    await _configure(reader, options)
                    [(mode,)] = await connection.execute_fetchall("PRAGMA journal_mode")
                    files = OpenedFiles(options.path, logged=str(mode).lower() == "wal")
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                for opened in (connection, reader):
                    if opened is not None:
                        await opened.close()
            if isinstance(exc, sqlite3.Error):
                raise _connect_error(exc, options.path) from exc
            raise
        return cls(connection, raw, options, reader, files)

    @contextmanager
    def _bound_to(self, connection: aiosqlite.Connection) -> Iterator[None]:
        token = _BOUND.set({**_BOUND.get(), id(self): connection})
        try:
            yield
        finally:
            _BOUND.reset(token)

    def _check_open(self) -> None:
        # A closed connection fails each statement with a driver error of its own (a
        # ValueError from aiosqlite, a ProgrammingError from sqlite3) that says no store.
        if self._closed:
            raise StoreError(f"sqlite: the store {self._options.path} is closed")
        if self._files is not None and self._files.lost is not None:
            raise StoreError(self._files.lost)
        self._home.check()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        self._check_open()
        async with self._lock:
            with self._bound_to(self._connection):
                # IMMEDIATE takes the write lock up front, so two processes queue on
                # the busy timeout instead of deadlocking on a read-to-write upgrade.
                try:
                    await self._run("BEGIN IMMEDIATE")
                except BaseException:
                    # Cancelled while the connection's thread ran BEGIN: it may have begun.
                    with anyio.CancelScope(shield=True):
                        await self._rollback()
                    raise
                try:
                    yield
                    self._check_files()
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await self._rollback()
                    raise
                try:
                    await self._run("COMMIT")
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await self._rollback()
                    raise

    async def run_transaction(self, work: Callable[[], Awaitable[T]]) -> T:
        """``work()`` as one transaction, run on the connection's thread in one trip.

        Each statement of a ``transaction()`` block is a trip to that thread and back,
        and back means waiting for a turn of a busy event loop: a group commit's
        batch spent most of its time so. Here the statements run back to back,
        with SQLite's write lock held, as the Persister's batches need.
        """
        self._check_open()
        run_there: Callable[[Callable[[], T]], Awaitable[T]] = self._connection._execute
        async with self._lock:
            self._thread_done.clear()
            self._handed_over = True
            try:
                # Once on the thread the transaction commits or rolls back whatever the
                # caller does: a cancel must not leave the caller without the outcome.
                with anyio.CancelScope(shield=True), quick_handoffs():
                    done = await run_there(functools.partial(self._handed_here, work))
            finally:
                self._handed_over = False
        return done

    def _handed_here(self, work: Callable[[], Awaitable[T]]) -> T:
        try:
            return self._transaction_here(work)
        finally:
            self._thread_done.set()

    async def rehearse(self, work: Callable[[], Awaitable[None]], *, connections: int) -> None:
        """Nothing to do: SQLite prepares a statement in microseconds, in the process."""

    async def write_alone(self, sql: str, params: Params | None = None) -> Sequence[Row]:
        return await self.run_transaction(lambda: self.fetch_all(sql, params))

    def run_transaction_at_once(
        self, work: Callable[[], Awaitable[T]], *, wait_seconds: float = 0.0
    ) -> T:
        """``work()`` as one transaction on the calling thread, while the connection is
        free and no other connection holds SQLite's write lock; else ``WouldWait``.

        The writing connection is used here, outside its thread, only when nothing else
        can use it meanwhile: its lock is free, or its holder handed a transaction whole
        to the thread and that transaction has ended, the holder yet to hear of it (it
        will hear only once the caller lets the event loop go on). That end is waited
        for, on this thread, up to ``wait_seconds``.
        """
        if _HERE.executor is not None:
            raise WouldWait
        self._check_open()
        if self._lock.locked():
            if not self._handed_over or not self._thread_done.wait(wait_seconds):
                raise WouldWait
            return self._transaction_here(work, wait_for_lock=False)
        try:
            self._lock.acquire_nowait()
        except anyio.WouldBlock:
            raise WouldWait from None
        try:
            return self._transaction_here(work, wait_for_lock=False)
        finally:
            self._lock.release()

    def _begin_at_once(self) -> None:
        """BEGIN IMMEDIATE without the busy timeout: a thread that may not wait is
        told that another connection writes, instead of waiting for it to end."""
        raw = self._raw
        try:
            raw.execute("PRAGMA busy_timeout = 0")
            try:
                raw.execute("BEGIN IMMEDIATE")
            finally:
                raw.execute(f"PRAGMA busy_timeout = {int(self._options.busy_timeout_ms)}")
        except sqlite3.Error as exc:
            if raw.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    raw.execute("ROLLBACK")
            if getattr(exc, "sqlite_errorcode", None) in _BUSY:
                raise WouldWait from exc
            raise StoreError(_located(exc, self._options.path)) from exc

    def _transaction_here(
        self, work: Callable[[], Awaitable[T]], *, wait_for_lock: bool = True
    ) -> T:
        """On the connection's thread, or a caller's with the connection to itself:
        BEGIN, ``work`` driven to its end, COMMIT."""
        _HERE.executor = self
        try:
            # IMMEDIATE takes the write lock up front (see transaction()).
            if wait_for_lock:
                self._run_here("BEGIN IMMEDIATE")
            else:
                self._begin_at_once()
            try:
                done = _finish_here(work())
                self._check_files()
                self._run_here("COMMIT")
            except BaseException:
                # SQLite may already have rolled back on its own (disk full, I/O error).
                with contextlib.suppress(sqlite3.Error):
                    self._raw.execute("ROLLBACK")
                raise
            return done
        finally:
            _HERE.executor = None

    def _check_files(self) -> None:
        """Before a COMMIT: the names still lead to the files written (see OpenedFiles)."""
        if self._files is not None:
            self._files.check()

    def _run_here(self, sql: str, params: Params | None = None) -> list[Any]:
        try:
            return list(self._raw.execute(sql, _bindable(params)).fetchall())
        except _DATA_ERRORS as exc:
            raise StoreError(_describe(exc), data_error=True) from exc
        except sqlite3.Error as exc:
            raise StoreError(_located(exc, self._options.path)) from exc

    def _run_each_here(self, sql: str, rows: Sequence[Params]) -> int:
        try:
            return int(self._raw.executemany(sql, rows).rowcount)
        except _DATA_ERRORS as exc:
            raise StoreError(_describe(exc), data_error=True) from exc
        except sqlite3.Error as exc:
            raise StoreError(_located(exc, self._options.path)) from exc

    async def _rollback(self) -> None:
        # SQLite may already have rolled back on its own (disk full, I/O error).
        with contextlib.suppress(sqlite3.Error):
            await self._connection.execute("ROLLBACK")

    @asynccontextmanager
    async def savepoint(self, name: str) -> AsyncIterator[None]:
        self._savepoints += 1
        label = f"{name}_{self._savepoints}"
        await self._run(f"SAVEPOINT {label}")
        try:
            yield
        except BaseException:
            await self._run(f"ROLLBACK TO {label}")
            await self._run(f"RELEASE {label}")
            raise
        await self._run(f"RELEASE {label}")

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[None]:
        self._check_open()
        async with self._read_lock:
            with self._bound_to(self._reader):
                yield

    async def _run(self, sql: str, params: Params | None = None) -> list[Any]:
        if _HERE.executor is self:
            return self._run_here(sql, params)
        self._check_open()
        connection = _BOUND.get().get(id(self), self._connection)
        # execute_fetchall is one trip to the connection's thread; a cursor costs
        # two more (fetch, close), and the Persister's batches are made of these.
        try:
            return list(await connection.execute_fetchall(sql, _bindable(params)))
        except _DATA_ERRORS as exc:
            raise StoreError(_describe(exc), data_error=True) from exc
        except sqlite3.Error as exc:
            raise StoreError(_located(exc, self._options.path)) from exc

    async def execute(self, sql: str, params: Params | None = None) -> None:
        await self._run(sql, params)

    async def fetch_all(self, sql: str, params: Params | None = None) -> Sequence[Row]:
        return await self._run(sql, params)

    async def fetch_one(self, sql: str, params: Params | None = None) -> Row | None:
        rows = await self._run(sql, params)
        return rows[0] if rows else None

    async def execute_counted(self, sql: str, params: Params | None = None) -> int:
        return await self.execute_each(sql, [params or {}])

    async def execute_each(self, sql: str, rows: Sequence[Params]) -> int:
        """``executemany``: SQLite binds a batch's journal rows so in little more than
        half the time it takes to read them from one JSON parameter, which each ``->>``
        parses again."""
        if _HERE.executor is self:
            return self._run_each_here(sql, rows)
        # A write: on the writing connection's thread, whose sqlite3 connection _raw is.
        run_there: Callable[[Callable[[], int]], Awaitable[int]] = self._connection._execute
        return await run_there(functools.partial(self._run_each_here, sql, rows))

    async def notify(self, channel: str) -> None:
        """Nothing to do: SQLite has no notifications; other processes poll."""

    async def wait_for_notification(self, channel: str, timeout: float) -> None:
        await anyio.sleep(timeout)

    async def aclose(self) -> None:
        self._closed = True
        try:
            if self._reader is not self._connection:
                await self._reader.close()
            await self._connection.close()
        except sqlite3.Error as exc:
            raise StoreError(_located(exc, self._options.path)) from exc
