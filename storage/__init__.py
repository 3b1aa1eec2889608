"""Stores: the protocol, its SQL implementation, and opening one from a URL.

The PostgreSQL executor lives in ``storage.postgres``, imported only when a
``postgresql://`` URL is opened (asyncpg is the optional ``postgres`` extra).
"""

from __future__ import annotations

from leaseward.storage.connect import open_store
from leaseward.storage.protocol import (
    BatchItem,
    CancelOutcome,
    ClaimRequest,
    ExpiredRequest,
    ExpiredRun,
    LeaseMark,
    Reap,
    Store,
    WriteBatch,
    WriteResults,
    unwrap,
)
from leaseward.storage.sqlite import SQLiteExecutor, SQLiteOptions
from leaseward.storage.store import (
    MOST_CONCURRENT_BATCHES,
    PURGE_BATCH_RUNS,
    SIDE_BY_SIDE_ROUND_TRIP_SECONDS,
    WORK_CHANNEL,
    SQLStore,
)
from leaseward.storage.url import PostgresOptions, StoreURL, parse_store_url, pool_size_for

__all__ = [
    "MOST_CONCURRENT_BATCHES",
    "PURGE_BATCH_RUNS",
    "SIDE_BY_SIDE_ROUND_TRIP_SECONDS",
    "WORK_CHANNEL",
    "BatchItem",
    "CancelOutcome",
    "ClaimRequest",
    "ExpiredRequest",
    "ExpiredRun",
    "LeaseMark",
    "PostgresOptions",
    "Reap",
    "SQLStore",
    "SQLiteExecutor",
    "SQLiteOptions",
    "Store",
    "StoreURL",
    "WriteBatch",
    "WriteResults",
    "open_store",
    "parse_store_url",
    "pool_size_for",
    "unwrap",
]
