"""Opening a store from its URL."""

from __future__ import annotations

import anyio

from runtime.clock import Clock, SystemClock
from runtime.errors import StoreError
from storage.sql_store import SQLStore
from storage.sqlite import SQLiteExecutor
from storage.url import parse_store_url

__all__ = ["open_store"]


async def open_store(
    url: str, *, clock: Clock | None = None, migrate: bool = True, must_exist: bool = False
) -> SQLStore:
    """Connect to the store a URL names; by default create or upgrade its schema.

    With ``must_exist`` a database that is not there yet is an error instead of
    being created, so a mistyped path in an operator command changes nothing.
    """
    parsed = parse_store_url(url)
    assert parsed.sqlite is not None
    if must_exist and not await anyio.Path(parsed.sqlite.path).exists():
        raise StoreError(
            f"no database at {parsed.sqlite.path!r}; create it with `leaseward migrate`"
        )
    executor = await SQLiteExecutor.connect(parsed.sqlite)
    store = SQLStore(executor, clock or SystemClock())
    if migrate:
        try:
            await store.migrate()
        except BaseException:
            await store.aclose()
            raise
    return store
