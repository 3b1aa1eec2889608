"""Retention: deleting finished runs in batches, and forgetting old idempotency keys."""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from leaseward.runtime.errors import InvalidInput, StoreError
from leaseward.runtime.lifecycle import RunState
from leaseward.runtime.retention import ForgetKeysResult, PurgedRun, PurgeResult
from leaseward.storage.concern import StoreConcern
from leaseward.storage.rows import purged_from_row

__all__ = ["PURGE_BATCH_RUNS", "Retention"]

PURGE_BATCH_RUNS = 500
"""Runs a purge deletes (or idempotency keys it forgets) per transaction: each batch
holds its locks only briefly."""


def _batches(count: int, batch_size: int) -> int:
    """How many batches the loop that deletes ``count`` rows, ``batch_size`` at a
    time, counts: each one that deleted something (not the empty one that may end it)."""
    return -(-count // batch_size)


async def _yield_to_writers(batch_started: float) -> None:
    """Wait as long as the batch took, with its lock released: SQLite's waiters (the
    daemon's Persister among them) get in between batches instead of timing out."""
    await anyio.sleep(anyio.current_time() - batch_started)


class Retention(StoreConcern):
    """Purges and key forgetting, each batch its own short transaction."""

    async def purge_finished(
        self,
        states: Sequence[RunState],
        older_than_seconds: float,
        *,
        dry_run: bool = False,
        batch_runs: int = PURGE_BATCH_RUNS,
    ) -> PurgeResult:
        unfinished = [state.value for state in states if not state.terminal]
        if unfinished:
            raise InvalidInput(
                f"only finished runs can be purged, not {', '.join(unfinished)} ones"
            )
        if not older_than_seconds > 0 or batch_runs < 1:
            raise InvalidInput("a purge needs a positive age and batch size")
        # Fixed once: runs that finish while the purge goes on never qualify, so it ends.
        cutoff = await self._cutoff(older_than_seconds)
        if dry_run:
            return await self._count_purgeable(states, cutoff, batch_runs)
        runs = steps = batches = 0
        for state in states:
            while True:
                started = anyio.current_time()
                picked, gone_runs, gone_steps = await self._purge_batch(state, cutoff, batch_runs)
                if picked:
                    runs, steps, batches = runs + gone_runs, steps + gone_steps, batches + 1
                if picked < batch_runs:
                    break
                await _yield_to_writers(started)
        return PurgeResult(
            runs=runs,
            steps=steps,
            batches=batches,
            finished_before=cutoff,
            dry_run=False,
            states=tuple(states),
        )

    async def _cutoff(self, older_than_seconds: float) -> float:
        """The store's "now" less ``older_than_seconds``."""
        async with self._executor.reading():
            row = await self._executor.fetch_one(
                self._queries["purge_cutoff"],
                {"older_than_seconds": older_than_seconds, "now": self._now()},
            )
        if row is None:
            raise StoreError("the store returned no time for the cutoff")
        return float(row["cutoff"])

    async def _purge_batch(
        self, state: RunState, cutoff: float, batch_runs: int
    ) -> tuple[int, int, int]:
        """One transaction: (runs picked, runs deleted, journal rows deleted)."""
        q = self._queries
        async with self._executor.transaction():
            picked = await self._executor.fetch_all(
                q["purge_pick"], {"state": state.value, "cutoff": cutoff, "limit": batch_runs}
            )
            if not picked:
                return 0, 0, 0
            ids = [r["id"] for r in picked]
            steps = await self._executor.fetch_all(q["purge_steps"], {"ids": ids})
            await self._executor.execute(q["purge_approvals"], {"ids": ids})
            await self._executor.execute(
                q["purge_keys"], {"ids": ids, "state": state.value, "now": self._now()}
            )
            runs = await self._executor.fetch_all(
                q["purge_runs"], {"ids": ids, "state": state.value}
            )
        return len(ids), len(runs), len(steps)

    async def _count_purgeable(
        self, states: Sequence[RunState], cutoff: float, batch_runs: int
    ) -> PurgeResult:
        runs = steps = batches = 0
        async with self._executor.reading():
            for state in states:
                row = await self._executor.fetch_one(
                    self._queries["purge_count"], {"state": state.value, "cutoff": cutoff}
                )
                if row is None:
                    raise StoreError("the store returned no count for the purge")
                runs += int(row["runs"])
                steps += int(row["steps"])
                batches += _batches(int(row["runs"]), batch_runs)
        return PurgeResult(
            runs=runs,
            steps=steps,
            batches=batches,
            finished_before=cutoff,
            dry_run=True,
            states=tuple(states),
        )

    async def purged_run(self, run_id: str) -> PurgedRun | None:
        async with self._executor.reading():
            key = await self._executor.fetch_one(self._queries["purged_key"], {"run_id": run_id})
        return None if key is None else purged_from_row(key)

    async def keyed_run_id(self, idempotency_key: str) -> str | None:
        async with self._executor.reading():
            key = await self._executor.fetch_one(
                self._queries["get_key"], {"idempotency_key": idempotency_key}
            )
        return None if key is None else str(key["run_id"])

    async def forget_keys(
        self,
        older_than_seconds: float,
        *,
        dry_run: bool = False,
        batch_keys: int = PURGE_BATCH_RUNS,
        after_purge: PurgeResult | None = None,
    ) -> ForgetKeysResult:
        if not older_than_seconds > 0 or batch_keys < 1:
            raise InvalidInput("forgetting keys needs a positive age and batch size")
        cutoff = await self._cutoff(older_than_seconds)
        q = self._queries
        if dry_run:
            query = "forget_count"
            params: dict[str, object] = {"cutoff": cutoff}
            if after_purge is not None and after_purge.dry_run and after_purge.states:
                # The purge counted before would have made the keys of its runs purged ones.
                query = "forget_count_after_purge"
                params = {
                    "cutoff": cutoff,
                    "states": [state.value for state in after_purge.states],
                    "purge_cutoff": after_purge.finished_before,
                }
            async with self._executor.reading():
                row = await self._executor.fetch_one(q[query], params)
            if row is None:
                raise StoreError("the store returned no count of keys to forget")
            keys = int(row["keys"])
            return ForgetKeysResult(
                keys=keys,
                batches=_batches(keys, batch_keys),
                created_before=cutoff,
                dry_run=True,
            )
        keys = batches = 0
        while True:
            started = anyio.current_time()
            async with self._executor.transaction():
                gone = await self._executor.fetch_all(
                    q["forget_keys"], {"cutoff": cutoff, "limit": batch_keys}
                )
            if gone:
                keys, batches = keys + len(gone), batches + 1
            if len(gone) < batch_keys:
                break
            await _yield_to_writers(started)
        return ForgetKeysResult(keys=keys, batches=batches, created_before=cutoff, dry_run=False)
