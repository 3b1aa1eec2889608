"""Every crash point on the write path, for every effect: the worker is SIGKILLed exactly
there, another takes over, and the tools' ledger is checked against the journal.

The three effects of a point run at once, each on its own store, so that the
sweep costs about one lease expiry per point.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from leaseward import Reason, RunState
from leaseward.storage.crash_points import POINTS
from tests.proof.invariants import NAMES
from tests.proof.scenarios import Outcome, crash_at

# Real worker processes killed and waited for: make test-fast skips these.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

EFFECTS = ("read_only", "idempotent", "non_idempotent")
# Where a killed non-idempotent write is dead-lettered: from its durable intent
# until its outcome is durable. Before the call starts it is too, since nobody
# can tell afterwards whether it had started.
UNKNOWN_WRITE = {"after_intent", "in_call", "after_call", "outcome_commit"}
# Where the victim's own process had started the tool before it died.
CALLED = {"in_call", "after_call", "outcome_commit", "before_reply", "settle"}


def expected(point: str, effect: str) -> tuple[RunState, Reason]:
    if effect == "non_idempotent" and point in UNKNOWN_WRITE:
        return RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE
    return RunState.COMPLETED, Reason.COMPLETED


def expected_calls(point: str, effect: str, outcome: Outcome) -> list[int]:
    """Who executes the tool: the victim, the rescuer (this process), or both, in order."""
    victim = [outcome.victim] if point in CALLED else []
    state, _ = expected(point, effect)
    if state is RunState.DEAD_LETTERED:
        return victim
    reruns = point in {"in_call", "after_call", "outcome_commit"}
    return [*victim, os.getpid()] if (reruns or not victim) else victim


async def sweep(point: str, urls: dict[str, str], tmp_path: Path, action: str) -> None:
    outcomes: dict[str, Outcome] = {}

    async def one(effect: str) -> None:
        outcomes[effect] = await crash_at(point, effect, urls[effect], tmp_path / effect, action)

    async with anyio.create_task_group() as group:
        for effect in urls:
            group.start_soon(one, effect)
    for effect, outcome in outcomes.items():
        where = f"{action} at {point}, {effect}"
        assert (outcome.state, outcome.reason) == expected(point, effect), where
        assert outcome.tally == dict.fromkeys(NAMES, 0), where
        assert outcome.calls == expected_calls(point, effect, outcome), where
        assert outcome.zombie_calls == 0, where
        assert not outcome.zombie_changes, where


def sqlite_urls(tmp_path: Path) -> dict[str, str]:
    return {effect: f"sqlite:///{tmp_path / f'{effect}.db'}" for effect in EFFECTS}


@pytest.mark.parametrize("point", POINTS)
async def test_killed_at_point(point: str, tmp_path: Path) -> None:
    await sweep(point, sqlite_urls(tmp_path), tmp_path, "kill")


@pytest.mark.parametrize("point", ["in_call", "before_reply"])
async def test_killed_at_point_on_postgresql(point: str, tmp_path: Path, pg_server: Any) -> None:
    names = {effect: pg_server.create_database() for effect in EFFECTS}
    try:
        urls = {effect: pg_server.url_for(name) for effect, name in names.items()}
        await sweep(point, urls, tmp_path, "kill")
    finally:
        for name in names.values():
            pg_server.drop(name)
