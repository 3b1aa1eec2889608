"""Stores: the protocol, its SQL implementation, and opening one from a URL."""

from __future__ import annotations

from runtime.clock import Clock, SystemClock
from storage.protocol import BatchItem, BatchOutcome, CancelOutcome, ExpiredRun, Store
from storage.sql_store import SQLStore
from storage.sqlite import SQLiteExecutor, SQLiteOptions
from storage.url import StoreURL, parse_store_url

__all__ = [
    "BatchItem",
    "BatchOutcome",
    "CancelOutcome",
    "ExpiredRun",
    "SQLStore",
    "SQLiteExecutor",
    "SQLiteOptions",
    "Store",
    "StoreURL",
    "open_store",
    "parse_store_url",
]


async def open_store(url: str, *, clock: Clock | None = None, migrate: bool = True) -> SQLStore:
    """Connect to the store a URL names; by default create or upgrade its schema."""
    parsed = parse_store_url(url)
    assert parsed.sqlite is not None
    executor = await SQLiteExecutor.connect(parsed.sqlite)
    store = SQLStore(executor, clock or SystemClock())
    if migrate:
        try:
            await store.migrate()
        except BaseException:
            await store.aclose()
            raise
    return store
