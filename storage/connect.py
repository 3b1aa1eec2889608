"""Opening a store from its URL."""

from __future__ import annotations

import anyio

from leaseward.runtime.clock import Clock, SystemClock
from leaseward.runtime.errors import ConfigurationError, StoreError
from leaseward.storage.executor import Executor
from leaseward.storage.migrations import MIGRATIONS
from leaseward.storage.sql_store import SQLStore
from leaseward.storage.sqlite import SQLiteExecutor
from leaseward.storage.url import DEFAULT_POOL_SIZE, StoreURL, parse_store_url

__all__ = ["open_store"]


async def open_store(
    url: str,
    *,
    clock: Clock | None = None,
    migrate: bool = True,
    must_exist: bool = False,
    read_only: bool = False,
    pool_size: int | None = None,
) -> SQLStore:
    """Connect to the store a URL names; by default create or upgrade its schema.

    With ``must_exist`` a database that is not there yet is an error instead of
    being created, so a mistyped path in an operator command changes nothing. A
    PostgreSQL database is never created by connecting (a wrong name is a
    ConfigurationError); with ``must_exist`` one without leaseward's schema is an
    error too, instead of being migrated.
    ``read_only`` is for looking only: the database must exist with the schema
    this leaseward knows (an older or newer one is an error, never migrated), and
    every change is refused. It works where this process may only read.
    ``pool_size`` is how many connections a PostgreSQL store may hold, unless the
    URL says (``?pool_size=N``); a SQLite store has one.
    """
    parsed = parse_store_url(url)
    if pool_size is not None and (
        isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1
    ):
        raise ConfigurationError(f"pool_size must be a positive integer, not {pool_size!r}")
    executor = await _connect(
        parsed, must_exist=must_exist or read_only, pool_size=pool_size, read_only=read_only
    )
    store = SQLStore(executor, clock or SystemClock())
    try:
        if read_only:
            await _check_schema(store, parsed)
            return store
        # Connecting never creates a PostgreSQL database, but migrating would fill
        # whatever database the URL names (postgres, say) with leaseward's tables.
        if must_exist and parsed.postgresql is not None and not await store.schema_present():
            raise StoreError(_no_schema(parsed))
        if migrate:
            await store.migrate()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await store.aclose()
        raise
    return store


def _where(parsed: StoreURL) -> str:
    if parsed.postgresql is not None:
        return parsed.postgresql.display
    assert parsed.sqlite is not None
    return repr(parsed.sqlite.path)


def _no_schema(parsed: StoreURL) -> str:
    return f"no leaseward schema in {_where(parsed)}; create it with `leaseward migrate`"


async def _check_schema(store: SQLStore, parsed: StoreURL) -> None:
    version = await store.schema_version()
    newest = MIGRATIONS[-1].version
    if version == 0:
        raise StoreError(_no_schema(parsed))
    if version < newest:
        raise StoreError(
            f"the schema in {_where(parsed)} is at version {version}, older than this "
            f"leaseward's ({newest}); bring it up to date with `leaseward migrate`"
        )
    if version > newest:
        raise StoreError(
            f"the schema in {_where(parsed)} is at version {version}, newer than this "
            f"leaseward knows ({newest}); upgrade leaseward"
        )


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
    if must_exist and not await anyio.Path(parsed.sqlite.path).exists():
        raise StoreError(
            f"no database at {parsed.sqlite.path!r}; create it with `leaseward migrate`"
        )
    return await SQLiteExecutor.connect(parsed.sqlite, read_only=read_only)
