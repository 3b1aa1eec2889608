"""The executor protocol: the thin layer that only runs queries, one per dialect."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

__all__ = ["Executor", "Params", "Row"]

Params = Mapping[str, Any]
Row = Mapping[str, Any]


class Executor(Protocol):
    """Runs SQL. Raises only ``StoreError``: driver errors are translated at this boundary."""

    dialect: str

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """One write transaction, exclusive for its whole length; rolls back on error."""
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

    async def fetch_one(self, sql: str, params: Params | None = None) -> Row | None: ...

    async def aclose(self) -> None: ...
