"""Opening a store from its URL."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from leaseward.runtime.clock import Clock, SystemClock
from leaseward.runtime.errors import ConfigurationError, SchemaMismatch, StoreNotFound
from leaseward.runtime.logs import get_logger
from leaseward.storage.executor import Executor
from leaseward.storage.migrations import MIGRATIONS
from leaseward.storage.sqlite import DURABLE_SYNCHRONOUS, SQLiteExecutor, SQLiteOptions
from leaseward.storage.store import SQLStore
from leaseward.storage.url import DEFAULT_POOL_SIZE, StoreURL, parse_store_url

__all__ = ["open_store", "refuse_newer_schema"]

log = get_logger("leaseward.store")


async def open_store(
    url: str,
    *,
    clock: Clock | None = None,
    migrate: bool = True,
    must_exist: bool = False,
    read_only: bool = False,
    pool_size: int | None = None,
    wrap_executor: Callable[[Executor], Executor] | None = None,
) -> SQLStore:
    """Connect to the store a URL names; by default create or upgrade its schema.

    With ``must_exist`` the store must be there already: a SQLite file that does not
    exist, or holds no leaseward schema (another program's database, an empty file,
    no database at all), and a PostgreSQL database without the schema raise
    StoreNotFound, and nothing is created or changed, so a mistyped path in a client
    changes nothing. A PostgreSQL database is never created by connecting: one that
    does not exist raises StoreNotFound, with or without ``must_exist``. Otherwise a
    store that had no schema is created, and logged (``store.created``, at INFO, with
    its location).
    With ``must_exist`` and not ``migrate``, as a client opens a store, the schema must
    be the one this leaseward knows: an older one is an error that says to run
    ``leaseward migrate``, not upgraded under the workers of the version before.
    ``read_only`` is for looking only: the database must exist with the schema
    this leaseward knows (an older or newer one is an error, never migrated), and
    every change is refused. It works where this process may only read.
    ``pool_size`` is how many connections a PostgreSQL store may hold, unless the
    URL says (``?pool_size=N``); a SQLite store has one.
    ``wrap_executor`` is given the executor the URL opened and returns the one the
    store runs every statement through, migrations included: a wrapper that watches
    or alters statements (as fault injection does) sees exactly what the store sends.
    """
    parsed = parse_store_url(url)
    if pool_size is not None and (
        isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1
    ):
        raise ConfigurationError(f"pool_size must be a positive integer, not {pool_size!r}")
    must_exist = must_exist or read_only
    if must_exist and parsed.sqlite is not None:
        # Looked at without writing: opening it for writing would switch another
        # program's database to WAL and leave side files beside it.
        await _check_sqlite_store(parsed.sqlite, parsed.location)
    executor = await _connect(
        parsed, must_exist=must_exist, pool_size=pool_size, read_only=read_only
    )
    if wrap_executor is not None:
        executor = wrap_executor(executor)
    store = SQLStore(executor, clock or SystemClock())
    try:
        if read_only:
            await _check_schema(store, parsed)
            return store
        present = await store.schema_present()
        # Connecting never creates a PostgreSQL database, but migrating would fill
        # whatever database the URL names (postgres, say) with leaseward's tables.
        if must_exist and not present:
            raise StoreNotFound(parsed.location)
        if must_exist and not migrate:
            await _check_schema(store, parsed)
        if migrate:
            await refuse_newer_schema(store, parsed.location)
            await store.migrate()
            if not present:
                log.info("store.created", store=parsed.location)
            await _warn_if_commits_can_be_lost(executor, parsed)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await store.aclose()
        raise
    return store


async def refuse_newer_schema(store: SQLStore, location: str) -> None:
    """SchemaMismatch, before anything is changed, if the store's schema is newer than
    this leaseward knows: no migration can help, and the error names the store as a
    client's does."""
    version = await store.schema_version()
    newest = MIGRATIONS[-1].version
    if version > newest:
        raise SchemaMismatch(location, version, newest)


_LOST_COMMITS = (
    "a power loss or an operating system crash can lose the last commits, and a write "
    "whose intent was lost runs again"
)


async def _warn_if_commits_can_be_lost(executor: Executor, parsed: StoreURL) -> None:
    """For a worker: a store set to return from a commit before it is on disk undoes the
    promise that a write's intent is durable before the write starts, so say so once."""
    if parsed.sqlite is not None:
        if parsed.sqlite.synchronous not in DURABLE_SYNCHRONOUS:
            log.warning(
                "store.durability_relaxed",
                store=parsed.location,
                synchronous=parsed.sqlite.synchronous,
                consequence=_LOST_COMMITS,
            )
        return
    row = await executor.fetch_one(
        "SELECT current_setting('fsync') AS fsync,"
        " current_setting('synchronous_commit') AS synchronous_commit"
    )
    assert row is not None, "a SELECT without FROM returns one row"
    # local, remote_write and remote_apply all flush the server's own WAL first.
    if row["fsync"] == "off" or row["synchronous_commit"] == "off":
        log.warning(
            "store.durability_relaxed",
            store=parsed.location,
            fsync=row["fsync"],
            synchronous_commit=row["synchronous_commit"],
            consequence=_LOST_COMMITS,
        )


async def _check_sqlite_store(options: SQLiteOptions, location: str) -> None:
    if not await anyio.Path(options.path).is_file():
        raise StoreNotFound(location)
    reader = await SQLiteExecutor.connect(options, read_only=True)
    try:
        present = await SQLStore(reader, SystemClock()).schema_present()
    finally:
        with anyio.CancelScope(shield=True):
            await reader.aclose()
    if not present:
        raise StoreNotFound(location)


async def _check_schema(store: SQLStore, parsed: StoreURL) -> None:
    version = await store.schema_version()
    newest = MIGRATIONS[-1].version
    if version == 0:
        raise StoreNotFound(parsed.location)
    if version != newest:
        raise SchemaMismatch(parsed.location, version, newest)


async def _connect(
    parsed: StoreURL, *, must_exist: bool, pool_size: int | None, read_only: bool
) -> Executor:
    if parsed.postgresql is not None:
        try:
            from leaseward.storage.postgres import PostgresExecutor
        except ModuleNotFoundError as exc:
            if exc.name is None or not exc.name.startswith("asyncpg"):
                raise
            raise ConfigurationError(
                "PostgreSQL stores need asyncpg: install leaseward[postgres]"
            ) from exc
        return await PostgresExecutor.connect(
            parsed.postgresql, pool_size=pool_size or DEFAULT_POOL_SIZE, read_only=read_only
        )
    assert parsed.sqlite is not None
    return await SQLiteExecutor.connect(parsed.sqlite, read_only=read_only, create=not must_exist)
