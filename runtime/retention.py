"""What purging finished runs and forgetting idempotency keys deleted, or would delete."""

from __future__ import annotations

import attrs

from leaseward.runtime.lifecycle import Reason, RunState

__all__ = [
    "ForgetKeysResult",
    "PurgeResult",
    "PurgedRun",
]


@attrs.frozen
class PurgeResult:
    """What a purge deleted, or with ``dry_run`` would delete."""

    runs: int
    steps: int
    batches: int
    finished_before: float
    """The cutoff, on the store's clock: runs that finished before it qualified."""
    dry_run: bool
    states: tuple[RunState, ...] = ()
    """The states whose runs qualified."""


@attrs.frozen
class PurgedRun:
    """What a purge keeps of a run submitted with an idempotency key: the key, which
    still names the run, and how the run ended. Its input, result and journal are gone."""

    run_id: str
    agent: str
    idempotency_key: str
    state: RunState
    reason: Reason | None
    finished_at: float | None
    purged_at: float
    """On the store's clock."""


@attrs.frozen
class ForgetKeysResult:
    """What forgetting idempotency keys deleted, or with ``dry_run`` would delete."""

    keys: int
    batches: int
    created_before: float
    """The cutoff, on the store's clock: keys first used before it qualified."""
    dry_run: bool
