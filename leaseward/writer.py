"""Where a Client's new runs and cancels are written, and who is told of queued work."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from leaseward.actors.supervisor import Supervisor
from leaseward.runtime.errors import ConfigurationError, LeasewardError, RuntimeClosed
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.storage.protocol import CancelOutcome, Store, WriteBatch

__all__ = ["RunWriter", "StoreWriter", "SupervisorWriter"]


class RunWriter(Protocol):
    async def create_runs(
        self, runs: Sequence[NewRun]
    ) -> tuple[RunRecord | LeasewardError, ...]: ...

    async def cancel_run(self, run_id: str) -> CancelOutcome: ...

    def queued(self) -> None:
        """A run became claimable."""


class StoreWriter:
    """Writes straight to the store, for a process that executes no runs."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def create_runs(self, runs: Sequence[NewRun]) -> tuple[RunRecord | LeasewardError, ...]:
        return (await self._store.commit(WriteBatch(new_runs=tuple(runs)))).new_runs

    async def cancel_run(self, run_id: str) -> CancelOutcome:
        return await self._store.request_cancel(run_id)

    def queued(self) -> None:
        """Nobody here claims runs: workers elsewhere find it when they next poll."""


class SupervisorWriter:
    """Writes through a Runtime's Persister, so that its writes share one group commit,
    and wakes its Supervisor to claim what was queued without waiting for a poll."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self._loop = asyncio.get_running_loop()
        self.closed = False

    def check_loop(self) -> None:
        """Raise ConfigurationError when called from another event loop than the one the
        Runtime runs on: its actors would answer there a future of this loop, which
        asyncio does not allow, and its waiters would wait on that loop's events."""
        if asyncio.get_running_loop() is not self._loop:
            raise ConfigurationError(
                "this Runtime runs on the event loop that opened it, not on this one: "
                "from another thread, hand it the call with "
                "asyncio.run_coroutine_threadsafe(rt.submit(...), its_loop)"
            )

    def check_open(self) -> None:
        """Raise RuntimeClosed once the Runtime was left: its Persister stops, and a
        request sent to it then would wait for an answer forever."""
        self.check_loop()
        if self.closed:
            raise RuntimeClosed(
                "this Runtime is closed: its `async with Runtime.open(...)` block was left, "
                "and it writes nothing more; call it inside the block, or queue runs "
                "through a Client"
            )

    async def create_runs(self, runs: Sequence[NewRun]) -> tuple[RunRecord | LeasewardError, ...]:
        self.check_open()
        return await self._supervisor.persister.submit(runs)

    async def cancel_run(self, run_id: str) -> CancelOutcome:
        self.check_open()
        return await self._supervisor.persister.cancel(run_id)

    def queued(self) -> None:
        self._supervisor.wake()
