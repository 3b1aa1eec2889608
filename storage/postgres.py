"""The PostgreSQL executor: an asyncpg pool, one connection per transaction or read.

Each ``transaction()`` or ``reading()`` takes a connection and binds it to the
calling task (a context variable) for the length of the block, so concurrent
tasks never share a connection and a statement inside the block goes where its
transaction is. A statement outside any block borrows a connection for itself.
A dedicated connection LISTENs for notifications.

A connection given back cleanly is kept by the executor for the next block
instead of going back to the pool, unless a task waits for the pool: asyncpg's
acquire with a timeout and its release each start a task of their own, which
cost a one-row claim 40% of its CPU in the worker. A block that raised gives its
connection back to the pool, which rolls back what is left and closes a broken one.
A connection unused for IDLE_CLOSE_SECONDS is closed, kept or in the pool, all but
one, as asyncpg closes its pool's.

Every driver error (asyncpg's, and the OSError of a lost socket) becomes a
``StoreError`` here, or a ``ConfigurationError`` when the URL itself is wrong
(no such database, role or password). A lost connection is dropped by the pool
and replaced on the next acquire; a lost listener is re-established with backoff.

A session the server ends (a terminated backend, a restart) says goodbye in one last
message before its socket closes. asyncpg, reading that message on an idle connection,
takes the connection for busy until it reads the close, and refuses the next statement
before sending anything of it ("cannot switch to state 11; another operation (2) is in
progress", 2 being its state of discarding input): one statement, on a session already
over, not two at once. Outside a transaction, such a statement goes to another connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, TypeAlias, TypeVar, cast
from urllib.parse import parse_qsl, urlsplit

import anyio
import asyncpg
import attrs
from asyncpg.pool import PoolConnectionProxy
from asyncpg.transaction import Transaction

from leaseward.runtime.errors import (
    CommitOutcomeUnknown,
    ConfigurationError,
    StoreError,
    StoreNotFound,
)
from leaseward.runtime.logs import get_logger
from leaseward.storage.executor import Params, Row, WouldWait
from leaseward.storage.home_loop import HomeLoop
from leaseward.storage.url import DEFAULT_POOL_SIZE, PostgresOptions

__all__ = [
    "ACQUIRE_TIMEOUT_SECONDS",
    "APPLICATION_NAME",
    "LISTEN_BACKOFF_MAX_SECONDS",
    "LISTEN_BACKOFF_MIN_SECONDS",
    "PostgresExecutor",
    "translate_params",
]

ACQUIRE_TIMEOUT_SECONDS = 30.0
CLOSE_TIMEOUT_SECONDS = 5.0
IDLE_CLOSE_SECONDS = 300.0
"""How long a connection may go unused before it is closed (a later block opens
another): a worker that goes quiet holds no more than it needs on the server."""
MAX_QUERIES = 50_000
"""Statements a connection runs before the pool closes it and opens another (asyncpg's
own default): what a long-lived session gathers on the server is let go now and then."""
BLOCKS_BETWEEN_POOL_CHECKS = 1_000
"""Blocks a kept connection serves before it goes back to the pool once, which closes
it there if it ran MAX_QUERIES statements: kept, it would never meet that check."""
LISTEN_BACKOFF_MIN_SECONDS = 0.5
LISTEN_BACKOFF_MAX_SECONDS = 30.0
# Statements that do nothing, timed one after another as the store opens: the least of
# them is the round trip, the others having met a busy moment of either end.
ROUND_TRIPS_TIMED = 10
APPLICATION_NAME = "leaseward"

log = get_logger("leaseward.store")

T = TypeVar("T")

Connection: TypeAlias = "PoolConnectionProxy[asyncpg.Record]"
# A statement's connection: a pooled one, or one being readied as the pool opens it.
Session: TypeAlias = "Connection | asyncpg.Connection[asyncpg.Record]"

# Driver errors, translated at this boundary. OSError covers refused and reset
# sockets, TimeoutError a connect or command that ran out of time.
_DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)
# Errors that say the statement's data is unacceptable (SQLSTATE classes 22 and 23;
# asyncpg also raises DataError for an argument it cannot encode, such as text with
# a lone surrogate or an integer out of range): the same statement fails the same way
# every time, unlike a lost connection or a lock timeout.
_DATA_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.DataError,
    asyncpg.IntegrityConstraintViolationError,
)
# Errors that say the server session is gone (a restart, a terminated backend): the
# pool's other idle connections most likely went with it.
_SESSION_LOST: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
)
# Errors after which a statement that went out may have committed or not: the session
# ended, or the command timed out and asyncpg cancelled it, perhaps too late.
_SENT_AND_LOST: tuple[type[BaseException], ...] = (*_SESSION_LOST, TimeoutError)
# How asyncpg words a statement it refused before sending any of it, the session having
# ended: a state its protocol cannot leave for the statement's (see the module's notes),
# or a connection it already knows to be lost or closed (checked before any I/O).
_REFUSED_UNSENT = ("cannot switch to state", "not connected")
_CLOSED_UNSENT = ("connection is closed", "cannot perform operation: connection is closed")
# The URL's form is wrong, as the driver reads it before it reaches any server.
_CONFIGURATION_ERRORS: tuple[type[BaseException], ...] = (asyncpg.ClientConfigurationError,)
# The server answered, and refused: no such database is there (as a SQLite file that
# does not exist), or it refuses this login (as a file this user may not open). They
# are the store's answers, not mistakes in the command's form.
_NO_DATABASE: tuple[type[BaseException], ...] = (asyncpg.InvalidCatalogNameError,)
_LOGIN_REFUSED: tuple[type[BaseException], ...] = (asyncpg.InvalidAuthorizationSpecificationError,)
# What the server says of a setting it was sent as a session opened: the URL's
# options that are neither leaseward's nor the driver's go to the server as settings,
# so a misspelt option of leaseward's ends up here.
_SETTING_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.UndefinedObjectError,
    asyncpg.InvalidParameterValueError,
    asyncpg.CantChangeRuntimeParamError,
)

# The connection each executor has bound in this context, by executor id, with the
# task that bound it. Never mutated: binding makes a new mapping, and the block
# resets it on exit. A task started inside a block inherits a copy of the context,
# so the binding also names its task: a child task never takes its parent's
# connection (it would interleave statements with the parent's transaction).
_BOUND: ContextVar[Mapping[int, tuple[int, _Block]]] = ContextVar(
    "leaseward_pg_bound", default=MappingProxyType({})
)

# A quoted string, a quoted name, a comment, a cast (::), or a :name parameter.
_TOKENS = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|::|:([A-Za-z_]\w*)""")


def translate_params(sql: str) -> tuple[str, tuple[str, ...]]:
    """``:name`` parameters to ``$n``, in order of first use; casts, strings and comments kept.

    Returns the new text and the parameter names, ``$1`` first. A name used
    twice is one parameter. Dollar-quoted bodies are not parsed: the named
    queries have none (the migrations, which do, take no parameters).
    """
    names: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return match.group(0)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _TOKENS.sub(replace, sql), tuple(names)


def _not_sent(exc: BaseException | None) -> bool:
    """Whether the driver refused a statement before any of it went out, because the
    server had ended the session: nothing of it ran, so it may go to another connection."""
    if isinstance(exc, asyncpg.InternalClientError):
        return str(exc).startswith(_REFUSED_UNSENT)
    return isinstance(exc, asyncpg.InterfaceError) and str(exc) in _CLOSED_UNSENT


def _describe(exc: BaseException, timed_out: str = "no answer in time") -> str:
    """A driver error in one line; ``timed_out`` says which wait a bare TimeoutError
    ended, since asyncpg's names neither the wait nor the option that bounds it."""
    if isinstance(exc, TimeoutError) and not str(exc).strip():
        return f"postgresql: {timed_out}"
    text = str(exc).strip() or type(exc).__name__
    sqlstate = getattr(exc, "sqlstate", None)
    kind = type(exc).__name__
    if _not_sent(exc):
        # asyncpg's words read as two statements at once on one connection, which they
        # are not: say what happened first.
        return f"postgresql: the session had ended; nothing was sent ({kind}: {text})"
    return f"postgresql: {kind}{f' [{sqlstate}]' if sqlstate else ''}: {text}"


def _connect_waited(options: PostgresOptions) -> str:
    return f"no connection within {options.connect_timeout_seconds:g} s (connect_timeout_seconds)"


def _application_name(dsn: str) -> str:
    """The URL's application_name, else leaseward's: how the server lists our sessions."""
    return dict(parse_qsl(urlsplit(dsn).query)).get("application_name") or APPLICATION_NAME


def _adapt(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


async def _keep_session(connection: asyncpg.Connection[asyncpg.Record]) -> None:
    """Nothing to reset when a connection goes back to the pool: leaseward leaves no
    session state on one (no SET, no session locks; it listens on a connection of its
    own). asyncpg's default reset is a round trip at the end of every transaction,
    one in five of a batch's. asyncpg still rolls back a transaction left open."""


def _terminate(connection: Session) -> None:
    """End ``connection``'s session at once, without the goodbye a close waits for; its
    place in the pool goes back to the pool (nothing, where the pool took it already)."""
    with contextlib.suppress(asyncpg.InterfaceError):
        connection.terminate()


def _open_and_idle(connection: Connection) -> bool:
    """Whether ``connection`` is open, with no transaction left on it, and still ours: the
    pool takes back one whose session ended on the server side."""
    try:
        return not connection.is_closed() and not connection.is_in_transaction()
    except asyncpg.InterfaceError:
        return False


@attrs.define(slots=True)
class _Kept:
    """A connection given back cleanly, waiting for the next block."""

    connection: Connection
    unused: asyncio.TimerHandle
    """Closes it if nobody takes it for IDLE_CLOSE_SECONDS."""
    blocks: int
    """Blocks it served since it last left the pool."""


@attrs.define(slots=True, eq=False)
class _Block:
    """A connection bound to a task for a block, with what giving it back needs."""

    connection: Session
    blocks: int = 0
    """Blocks it served since it last left the pool."""
    generation: int = 0
    """The executor's generation when it was taken (see _expire_connections)."""
    tradable: bool = False
    """Whether a statement refused unsent (``_not_sent``) goes to another connection: in
    a block of statements each on its own, never in a transaction, whose statements must
    all reach one session, nor on a connection being readied, which nothing replaces."""


class PostgresExecutor:
    dialect = "postgresql"
    writes_alone = True

    def __init__(self, pool: asyncpg.Pool[asyncpg.Record], options: PostgresOptions) -> None:
        self._pool = pool
        self._options = options
        self._translated: dict[str, tuple[str, tuple[str, ...]]] = {}
        # Listening: one connection outside the pool, one event per channel. An
        # event stays set until a waiter consumes it, so a notice that arrives
        # between two waits is not lost.
        self._listener: asyncpg.Connection[asyncpg.Record] | None = None
        self._listened: set[str] = set()
        self._events: dict[str, anyio.Event] = {}
        self._listen_lock = anyio.Lock()
        self._listen_backoff = LISTEN_BACKOFF_MIN_SECONDS
        self._listen_retry_at = 0.0
        self._listener_lost = False
        self._closed = False
        self._home = HomeLoop(options.display)
        self._rehearsal: Callable[[], Awaitable[None]] | None = None
        self.round_trip_seconds: float | None = None
        # Connections given back cleanly, the last first, each with the timer that closes
        # it unused; those of an older generation (before a lost session expired them
        # all) go back to the pool instead.
        self._kept: list[_Kept] = []
        self._generation = 0
        # Tasks waiting for the pool: a connection given back then goes to them.
        self._acquiring = 0
        # Connections held now whose BEGIN failed (by id): asyncpg keeps such a transaction
        # as the connection's own, so that the next one on it would be a savepoint inside
        # nothing and its commit would commit nothing. Only the pool's reset clears it.
        self._spoiled: set[int] = set()

    @classmethod
    async def connect(
        cls,
        options: PostgresOptions,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        read_only: bool = False,
    ) -> PostgresExecutor:
        """A pool on the database; ``read_only`` makes the server refuse every change."""
        size = options.pool_size or pool_size
        settings = {"application_name": _application_name(options.dsn)}
        if read_only:
            settings["default_transaction_read_only"] = "on"
        # The pool is made before the executor it belongs to, which readies the
        # connections the pool opens once it has a rehearsal (see rehearse()).
        owner: list[PostgresExecutor] = []

        async def opened(connection: asyncpg.Connection[asyncpg.Record]) -> None:
            if owner:
                await owner[0]._opened(connection)

        try:
            pool = await asyncpg.create_pool(
                options.dsn,
                min_size=1,
                max_size=size,
                timeout=options.connect_timeout_seconds,
                command_timeout=options.command_timeout_seconds,
                server_settings=settings,
                reset=_keep_session,
                init=opened,
                max_queries=MAX_QUERIES,
                max_inactive_connection_lifetime=IDLE_CLOSE_SECONDS,
            )
        except _CONFIGURATION_ERRORS as exc:
            raise ConfigurationError(
                f"the PostgreSQL store {options.display} cannot be used: {_describe(exc)}"
            ) from exc
        except _NO_DATABASE as exc:
            raise StoreNotFound(
                options.display,
                f"no leaseward store at {options.display}: {_describe(exc)}; create the "
                "database (createdb), then a daemon or `leaseward migrate` creates the store",
            ) from exc
        except _LOGIN_REFUSED as exc:
            raise StoreError(
                f"the PostgreSQL store {options.display} cannot be used: {_describe(exc)}"
            ) from exc
        except _SETTING_ERRORS as exc:
            raise ConfigurationError(
                f"the PostgreSQL store {options.display} cannot be used: {_describe(exc)}; "
                "a URL option that is not leaseward's (pool_size, connect_timeout_seconds "
                "and command_timeout_seconds) or the driver's (sslmode, ...) is sent to "
                "the server as a setting"
            ) from exc
        except _DRIVER_ERRORS as exc:
            waited = _connect_waited(options)
            raise StoreError(f"{_describe(exc, waited)} ({options.display})") from exc
        executor = cls(pool, options)
        owner.append(executor)
        return executor

    @property
    def _answer_waited(self) -> str:
        return (
            f"no answer within {self._options.command_timeout_seconds:g} s "
            "(command_timeout_seconds)"
        )

    @property
    def _acquire_waited(self) -> str:
        # A pool acquire may open a connection: either bound may have run out.
        return (
            f"{_connect_waited(self._options)}, or none free within {ACQUIRE_TIMEOUT_SECONDS:g} s"
        )

    def _describe(self, exc: BaseException) -> str:
        return _describe(exc, self._answer_waited)

    # -- connections --------------------------------------------------------------------

    def _bound(self) -> Session | None:
        block = self._bound_block()
        return None if block is None else block.connection

    def _bound_block(self) -> _Block | None:
        bound = _BOUND.get().get(id(self))
        # asyncio's own task, not anyio's description of it: asyncpg runs on asyncio
        # alone, and anyio builds a TaskInfo at every look-up.
        if bound is None or bound[0] != id(asyncio.current_task()):
            return None
        return bound[1]

    async def _call(
        self, operation: Callable[..., Awaitable[T]], *args: Any, waited: str | None = None
    ) -> T:
        # The call itself is inside: a pool proxy whose connection was lost raises
        # before it returns an awaitable.
        try:
            return await operation(*args)
        except _DRIVER_ERRORS as exc:
            if isinstance(exc, _SESSION_LOST):
                # Replaced at their next acquire, instead of each failing one write
                # when it is next used: every write of a worker shares one Persister.
                await self._expire_connections()
            raise StoreError(
                _describe(exc, waited or self._answer_waited),
                data_error=isinstance(exc, _DATA_ERRORS),
            ) from exc

    @asynccontextmanager
    async def _hold(self, *, tradable: bool = True) -> AsyncIterator[_Block]:
        """A connection, kept or the pool's, bound to this task for the block; statements
        refused unsent may trade it for another if ``tradable`` (see ``_Block.tradable``)."""
        if self._closed:
            raise StoreError(f"postgresql: the store {self._options.display} is closed")
        self._home.check()
        connection, blocks = await self._take()
        block = _Block(connection, blocks, self._generation, tradable=tradable)
        given_back_cleanly = False
        try:
            with self._bound_to(block):
                yield block
            given_back_cleanly = True
        finally:
            await self._give_back(block, cleanly=given_back_cleanly)

    async def _give_back(self, block: _Block, *, cleanly: bool) -> None:
        # Only _hold's blocks are given back, and it binds the pool's connections alone.
        connection = cast(Connection, block.connection)
        spoiled = id(connection) in self._spoiled
        self._spoiled.discard(id(connection))
        if (
            cleanly
            and not spoiled
            and block.generation == self._generation
            and not self._closed
            and not self._acquiring
            and block.blocks < BLOCKS_BETWEEN_POOL_CHECKS
            and _open_and_idle(connection)
        ):
            unused = asyncio.get_running_loop().call_later(
                IDLE_CLOSE_SECONDS, self._close_unused, connection
            )
            self._kept.append(_Kept(connection, unused, block.blocks + 1))
        else:
            await self._release(connection)

    async def _trade(self, block: _Block) -> None:
        """Give ``block`` another connection for one whose session ended unseen. Given
        back first: with a pool of one, taking another first would wait for itself."""
        await self._release(cast(Connection, block.connection))
        block.connection, block.blocks = await self._take()
        block.generation = self._generation

    async def _on_block(self, block: _Block, statement: Callable[[Session], Awaitable[T]]) -> T:
        """``statement`` on the block's connection; on another once, if the first refused
        it unsent and the block may trade."""
        try:
            return await self._call(statement, block.connection)
        except StoreError as exc:
            if not (block.tradable and _not_sent(exc.__cause__)):
                raise
        await self._trade(block)
        return await self._call(statement, block.connection)

    async def _take(self) -> tuple[Connection, int]:
        """A kept connection that is still open, else one the pool gives within its time;
        with the blocks it served since it last left the pool."""
        while self._kept:
            kept = self._kept.pop()
            kept.unused.cancel()
            if _open_and_idle(kept.connection):
                return kept.connection, kept.blocks
            await self._release(kept.connection)
        self._acquiring += 1
        try:
            connection = await self._call(
                lambda: self._pool.acquire(timeout=ACQUIRE_TIMEOUT_SECONDS),
                waited=self._acquire_waited,
            )
        finally:
            self._acquiring -= 1
        return connection, 0

    async def _release(self, connection: Connection) -> None:
        with anyio.CancelScope(shield=True), contextlib.suppress(*_DRIVER_ERRORS):
            # A broken connection is closed by the pool and replaced on a later acquire.
            await self._pool.release(connection, timeout=CLOSE_TIMEOUT_SECONDS)

    def _drop_kept(self) -> list[Connection]:
        """The kept connections, none kept any more and their idle timers cancelled."""
        kept, self._kept = self._kept, []
        for each in kept:
            each.unused.cancel()
        return [each.connection for each in kept]

    async def _release_kept(self) -> None:
        for connection in self._drop_kept():
            await self._release(connection)

    def _close_unused(self, connection: Connection) -> None:
        """Close a kept connection nobody took for IDLE_CLOSE_SECONDS, unless it is the
        last one open: what asyncpg does with its pool's idle ones."""
        position = next(
            (index for index, kept in enumerate(self._kept) if kept.connection is connection),
            None,
        )
        if position is None or self._pool.get_size() <= self._pool.get_min_size():
            return
        del self._kept[position]
        _terminate(connection)

    async def _expire_connections(self) -> None:
        """Every connection opened so far is replaced: those in use once they are given
        back, the pool's when next asked for, the kept ones at once. A kept one is idle,
        and ended without the goodbye a close waits for: the server that lost a session
        may not answer it, and the statement that found the loss would wait to fail."""
        self._generation += 1
        await self._pool.expire_connections()
        for connection in self._drop_kept():
            _terminate(connection)

    @contextmanager
    def _bound_to(self, block: _Block) -> Iterator[None]:
        """``block``'s connection is this task's for the block: its statements go there."""
        token = _BOUND.set({**_BOUND.get(), id(self): (id(asyncio.current_task()), block)})
        try:
            yield
        finally:
            _BOUND.reset(token)

    async def rehearse(self, work: Callable[[], Awaitable[None]], *, connections: int) -> None:
        """Open up to ``connections`` connections now and rehearse ``work`` on each; every
        connection the pool opens later (a lost one replaced, an idle one closed and
        opened again) rehearses it as it opens.

        A fresh connection's first batch waited for the connection to open, for
        asyncpg to prepare each statement, for the server to load its catalogs and
        plan the journal's function: 9-12 ms where a ready one took 4 ms.
        """
        try:
            # All held at once, so that the pool opens as many as are asked for.
            async with contextlib.AsyncExitStack() as held:
                borrowed = [
                    (await held.enter_async_context(self._hold())).connection
                    for _ in range(min(connections, self._pool.get_max_size()))
                ]
                if borrowed:
                    self.round_trip_seconds = await self._round_trip(borrowed[0])
                    # How many batches the worker keeps on the server follows from it.
                    log.info(
                        "store.round_trip_measured",
                        milliseconds=round(self.round_trip_seconds * 1000, 3),
                    )
                for connection in borrowed:
                    await self._rehearse_on(connection, work)
        except StoreError as exc:
            log.warning("store.rehearsal_failed", error=exc.message)
        self._rehearsal = work

    async def _round_trip(self, connection: Session) -> float:
        least = math.inf
        for _ in range(ROUND_TRIPS_TIMED):
            started = time.perf_counter()
            await self._call(connection.execute, "SELECT 1")
            least = min(least, time.perf_counter() - started)
        return least

    async def _opened(self, connection: asyncpg.Connection[asyncpg.Record]) -> None:
        if self._rehearsal is not None:
            await self._rehearse_on(connection, self._rehearsal)

    async def _rehearse_on(self, connection: Session, work: Callable[[], Awaitable[None]]) -> None:
        # As long as one statement may take, for all of them: a server that does not
        # answer must not hold a connection's first user for a timeout a statement.
        bound = self._options.command_timeout_seconds
        failed: str | None = None
        try:
            with self._bound_to(_Block(connection)), anyio.move_on_after(bound) as bounded:
                # BEGIN as a statement, not asyncpg's transaction (see _spoiled): a
                # rehearsal's failure is swallowed, and the connection goes on to serve.
                await self._call(connection.execute, "BEGIN")
                try:
                    await work()
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._call(connection.execute, "ROLLBACK")
            if bounded.cancelled_caught:
                failed = f"not done within {bound:g} s"
        except StoreError as exc:
            failed = exc.message
        if failed is not None:
            # Only a head start is lost: the statements are planned at their first use.
            log.warning("store.rehearsal_failed", error=failed)
            await self._roll_back_or_close(connection)

    async def _roll_back_or_close(self, connection: Session) -> None:
        """End whatever a cut-off statement may have left open on ``connection`` (a BEGIN
        whose answer came late), so that its next statement does not run inside it and
        go uncommitted; a connection that cannot is closed, and replaced when next asked."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT_SECONDS):
            try:
                await connection.execute("ROLLBACK")
                return
            except _DRIVER_ERRORS:
                pass
        _terminate(connection)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        if self._bound() is not None:
            raise StoreError("postgresql: a transaction is already open here; use savepoint()")
        async with self._begun() as transaction:
            try:
                yield
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._rollback(transaction)
                raise
            try:
                await transaction.commit()
            except BaseException as exc:
                with anyio.CancelScope(shield=True):
                    await self._rollback(transaction)
                if isinstance(exc, _DRIVER_ERRORS):
                    # The COMMIT may have reached the server and applied before the
                    # connection went (a terminated backend even answers with an
                    # error after committing): only a read of the database can tell.
                    raise CommitOutcomeUnknown(self._describe(exc)) from exc
                raise

    async def run_transaction(self, work: Callable[[], Awaitable[T]]) -> T:
        async with self.transaction():
            return await work()

    def run_transaction_at_once(
        self, work: Callable[[], Awaitable[T]], *, wait_seconds: float = 0.0
    ) -> T:
        """Never: every statement is a round trip to the server, which asyncpg awaits."""
        raise WouldWait

    @asynccontextmanager
    async def _begun(self) -> AsyncIterator[Transaction]:
        """A transaction begun on a pooled connection bound to this task.

        A connection whose server session ended (a restart, a terminated backend)
        stays in the pool until it is used: when BEGIN finds one, nothing has been
        sent yet, so a second connection is tried before the caller is failed.
        """
        for attempt in range(2):
            async with self._hold(tradable=False) as block:
                try:
                    transaction = await self._call(self._begin, block.connection)
                except StoreError as exc:
                    if attempt or not isinstance(exc.__cause__, _SESSION_LOST):
                        raise
                    continue
                yield transaction
                return

    async def _begin(self, connection: Session) -> Transaction:
        transaction = connection.transaction()
        try:
            await transaction.start()
        except BaseException:
            self._spoiled.add(id(connection))
            raise
        return transaction

    async def _rollback(self, transaction: Transaction) -> None:
        # The connection may be gone, or the transaction already ended: nothing to undo.
        with contextlib.suppress(*_DRIVER_ERRORS), anyio.move_on_after(CLOSE_TIMEOUT_SECONDS):
            await transaction.rollback()

    @asynccontextmanager
    async def savepoint(self, name: str) -> AsyncIterator[None]:
        connection = self._bound()
        if connection is None:
            raise StoreError(f"postgresql: savepoint {name!r} outside a transaction")
        # asyncpg nests: a transaction inside one is a SAVEPOINT.
        savepoint = await self._call(self._begin, connection)
        try:
            yield
        except BaseException:
            await self._call(savepoint.rollback)
            raise
        await self._call(savepoint.commit)

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[None]:
        if self._bound() is not None:
            yield
            return
        async with self._hold():
            yield

    # -- statements ---------------------------------------------------------------------

    def _prepare(self, sql: str, params: Params | None) -> tuple[str, list[Any]]:
        translated = self._translated.get(sql)
        if translated is None:
            translated = self._translated[sql] = translate_params(sql)
        text, names = translated
        given = params or {}
        missing = [name for name in names if name not in given]
        if missing:
            raise StoreError(f"postgresql: the query needs parameters {', '.join(missing)}")
        return text, [_adapt(given[name]) for name in names]

    async def _fetch(self, sql: str, params: Params | None) -> list[Row]:
        text, args = self._prepare(sql, params)
        records = await self._run(lambda session: session.fetch(text, *args))
        return [dict(record.items()) for record in records]

    async def _run(self, statement: Callable[[Session], Awaitable[T]]) -> T:
        """``statement`` on this task's connection, or on one borrowed for it alone."""
        block = self._bound_block()
        if block is not None:
            return await self._on_block(block, statement)
        async with self._hold() as borrowed:
            return await self._on_block(borrowed, statement)

    async def write_alone(self, sql: str, params: Params | None = None) -> Sequence[Row]:
        if self._bound() is not None:
            raise StoreError("postgresql: write_alone inside a transaction")
        text, args = self._prepare(sql, params)
        # Shielded: a statement cut off once sent may commit anyway, and the caller
        # would be left with an outcome nobody knows; command_timeout bounds it.
        with anyio.CancelScope(shield=True):
            async with self._hold() as block:
                try:
                    records = await self._fetch_alone(block, text, args)
                except _DRIVER_ERRORS as exc:
                    if isinstance(exc, _SESSION_LOST):
                        await self._expire_connections()
                    if isinstance(exc, _SENT_AND_LOST) and not _not_sent(exc):
                        raise CommitOutcomeUnknown(self._describe(exc)) from exc
                    # The server answered with an error, and the statement's transaction
                    # rolled back; or nothing of it was sent.
                    raise StoreError(
                        self._describe(exc), data_error=isinstance(exc, _DATA_ERRORS)
                    ) from exc
        return [dict(record.items()) for record in records]

    async def _fetch_alone(self, block: _Block, text: str, args: list[Any]) -> list[asyncpg.Record]:
        """``write_alone``'s statement, on another connection once if the first refused it
        unsent: nothing of it ran, so it is known not to have committed."""
        try:
            return await block.connection.fetch(text, *args)
        except _DRIVER_ERRORS as exc:
            if not _not_sent(exc):
                raise
            await self._expire_connections()
        await self._trade(block)
        return await block.connection.fetch(text, *args)

    async def _execute_one(self, text: str, args: list[Any]) -> str:
        # A function of its own: a lambda made in execute_each's loop would not bind
        # that row's text and arguments.
        return await self._run(lambda session: session.execute(text, *args))

    async def execute(self, sql: str, params: Params | None = None) -> None:
        await self._fetch(sql, params)

    async def fetch_all(self, sql: str, params: Params | None = None) -> Sequence[Row]:
        return await self._fetch(sql, params)

    async def fetch_one(self, sql: str, params: Params | None = None) -> Row | None:
        rows = await self._fetch(sql, params)
        return rows[0] if rows else None

    async def execute_counted(self, sql: str, params: Params | None = None) -> int:
        return await self.execute_each(sql, [params or {}])

    async def execute_each(self, sql: str, rows: Sequence[Params]) -> int:
        """Statement by statement: PostgreSQL's queries read sets from one parameter,
        in one round trip, and give no one-row forms for the hot path."""
        changed = 0
        for row in rows:
            status = await self._execute_one(*self._prepare(sql, row))
            # A command tag such as "INSERT 0 1" or "UPDATE 3" ends with the row count.
            last = str(status).rsplit(" ", 1)[-1]
            changed += int(last) if last.isdigit() else 0
        return changed

    # -- notifications ------------------------------------------------------------------

    async def notify(self, channel: str) -> None:
        # Inside a transaction NOTIFY is sent at COMMIT; the server drops duplicates.
        await self.execute("SELECT pg_notify(:channel, '')", {"channel": channel})

    async def wait_for_notification(self, channel: str, timeout: float) -> None:
        deadline = anyio.current_time() + timeout
        event = self._events.get(channel)
        if event is None:
            event = self._events[channel] = anyio.Event()
        if not await self._listening(channel):
            await anyio.sleep(max(0.0, deadline - anyio.current_time()))
            return
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            await event.wait()
        if event.is_set() and self._events.get(channel) is event:
            self._events[channel] = anyio.Event()

    async def _listening(self, channel: str) -> bool:
        """Whether a listening connection is up (connecting it if the backoff allows)."""
        async with self._listen_lock:
            listener = self._listener
            if listener is not None and not listener.is_closed():
                if channel in self._listened:
                    return True
                try:
                    await listener.add_listener(channel, self._notified)
                except _DRIVER_ERRORS as exc:
                    log.warning("store.listen_failed", error=self._describe(exc))
                    return False
                self._listened.add(channel)
                return True
            if self._closed or anyio.current_time() < self._listen_retry_at:
                return False
            try:
                # Shielded: a connect cut off halfway leaves asyncpg's protocol
                # failing in a callback; connect_timeout_seconds bounds the wait.
                with anyio.CancelScope(shield=True):
                    await self._listen()
            except BaseException as exc:
                self._listen_retry_at = anyio.current_time() + self._listen_backoff
                self._listen_backoff = min(self._listen_backoff * 2, LISTEN_BACKOFF_MAX_SECONDS)
                if isinstance(exc, Exception):
                    log.warning(
                        "store.listen_failed",
                        error=_describe(exc, _connect_waited(self._options)),
                        retry_in_seconds=round(self._listen_retry_at - anyio.current_time(), 3),
                    )
                    return False
                raise
            self._listen_backoff = LISTEN_BACKOFF_MIN_SECONDS
            if self._listener_lost:
                # Notices sent while nobody listened are gone: look for work once.
                self._listener_lost = False
                log.info("store.listen_restored")
                for event in self._events.values():
                    event.set()
            return True

    async def _listen(self) -> None:
        name = _application_name(self._options.dsn)
        listener = await asyncpg.connect(
            self._options.dsn,
            timeout=self._options.connect_timeout_seconds,
            command_timeout=self._options.command_timeout_seconds,
            server_settings={"application_name": f"{name}-listen"},
        )
        try:
            for channel in self._events:
                await listener.add_listener(channel, self._notified)
            listener.add_termination_listener(self._lost)
        except BaseException:
            listener.terminate()
            raise
        self._listener = listener
        self._listened = set(self._events)

    def _notified(self, connection: object, pid: int, channel: str, payload: object) -> None:
        event = self._events.get(channel)
        if event is not None:
            event.set()

    def _lost(self, connection: object) -> None:
        if connection is not self._listener:
            return
        self._listener = None
        if self._closed:
            return
        self._listener_lost = True
        log.warning("store.listen_lost")
        # Wake the waiters: they re-establish the listener, or fall back to polling.
        for event in self._events.values():
            event.set()

    async def aclose(self) -> None:
        self._closed = True
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(*_DRIVER_ERRORS):
                await listener.close(timeout=CLOSE_TIMEOUT_SECONDS)
        # The pool's close waits for every connection to come back, the kept ones too.
        await self._release_kept()
        with anyio.move_on_after(CLOSE_TIMEOUT_SECONDS) as scope:
            try:
                await self._pool.close()
            except _DRIVER_ERRORS as exc:
                self._pool.terminate()
                raise StoreError(self._describe(exc)) from exc
        if scope.cancelled_caught:
            self._pool.terminate()
