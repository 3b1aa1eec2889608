"""Stores: the protocol, its SQL implementation, and opening one from a URL."""

from __future__ import annotations

from storage.connect import open_store
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
