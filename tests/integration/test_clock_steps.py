"""Wall-clock steps on a worker's host or the database's never reap a lease whose holder
keeps renewing it, and never hide a dead worker (G7, G14).

A step is what NTP, a VM resume or a manual fix does to the wall clock: it jumps,
while the monotonic clock goes on. On SQLite the store reads the wall clock of
the process it runs in (the clock given to ``Runtime.open``); on PostgreSQL it
reads the database host's, which these tests step by redefining the store's
clock functions in the test's own database over the server's real clock plus
an offset the test sets.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from leaseward import App, RunState, Runtime, ToolContext, ToolEffect
from leaseward.actors import LeaseReaper
from leaseward.runtime.clock import ManualClock
from leaseward.runtime.commits import Stored
from leaseward.runtime.lifecycle import RecoveryPolicy
from leaseward.storage import BatchItem, open_store
from tests.integration.crash_worker import read_lines
from tests.integration.paused_worker import CALLS_FILE, LEASE_SECONDS, build_app
from tests.integration.support import Calls, capture_logs, events, one_call_agent
from tests.integration.test_store_conformance import new_run

pytestmark = pytest.mark.anyio

STEP_SECONDS = 60.0
REAP_INTERVAL_SECONDS = 0.05
WORKER = Path(__file__).resolve().with_name("paused_worker.py")
REPO_ROOT = Path(__file__).resolve().parents[2]

STEPPED_CLOCK_SQL = (
    "CREATE TABLE leaseward_test_clock_step (seconds double precision NOT NULL)",
    "INSERT INTO leaseward_test_clock_step (seconds) VALUES (0)",
    "CREATE OR REPLACE FUNCTION leaseward_now() RETURNS double precision LANGUAGE sql STABLE "
    "AS $$ SELECT EXTRACT(EPOCH FROM now())::double precision"
    " + (SELECT seconds FROM leaseward_test_clock_step) $$",
    "CREATE OR REPLACE FUNCTION leaseward_clock() RETURNS double precision LANGUAGE sql VOLATILE "
    "AS $$ SELECT EXTRACT(EPOCH FROM clock_timestamp())::double precision"
    " + (SELECT seconds FROM leaseward_test_clock_step) $$",
)


class SteppedClock:
    """The system clocks, with the wall clock stepped by the test; monotonic untouched."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic()


class Clocks:
    """The clocks a step can hit: each process's own (SQLite reads them) and the
    database host's (PostgreSQL reads only that one)."""

    def __init__(self, connection: Any) -> None:
        self.holder = SteppedClock()
        self.reaper = SteppedClock()
        self._connection = connection

    async def step(self, seconds: float, *, on: SteppedClock) -> None:
        """Step ``on`` (SQLite) or the database host's clock (PostgreSQL) by ``seconds``."""
        if self._connection is None:
            on.offset += seconds
            return
        await self._connection.execute(
            "UPDATE leaseward_test_clock_step SET seconds = seconds + $1", seconds
        )


@pytest.fixture
async def clocks(anyio_backend: str, store_url: str) -> AsyncIterator[Clocks]:
    if not store_url.startswith("postgresql"):
        yield Clocks(None)
        return
    import asyncpg

    connection = await asyncpg.connect(store_url)
    try:
        for statement in STEPPED_CLOCK_SQL:
            await connection.execute(statement)
        yield Clocks(connection)
    finally:
        await connection.close()


@pytest.mark.parametrize("direction", [1, -1], ids=["ahead", "back"])
async def test_a_clock_step_mid_call_does_not_reap_the_renewing_holder(
    store_url: str, clocks: Clocks, direction: int
) -> None:
    """A 3 s charge under a 1.5 s lease, another worker reaping every 50 ms; one minute
    into the future on the reaper's side ("ahead") or into the past on the holder's
    ("back"), then set right 0.8 s later: the charge is neither reaped nor run twice."""
    calls = Calls()
    entered = anyio.Event()

    async def charge(ctx: ToolContext) -> None:
        entered.set()
        await anyio.sleep(3.0)

    agent = one_call_agent(
        "payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, timeout_seconds=30.0, body=charge
    )
    stepped = clocks.reaper if direction > 0 else clocks.holder
    with capture_logs() as logs:
        async with (
            Runtime.open(
                store_url,
                App([agent]),
                lease_seconds=1.5,
                reap_interval_seconds=1.0,
                poll_interval_seconds=0.02,
                worker_id="holder",
                clock=clocks.holder,
            ) as holder,
            Runtime.open(
                store_url,
                App([]),
                reap_interval_seconds=REAP_INTERVAL_SECONDS,
                worker_id="reaper",
                clock=clocks.reaper,
            ) as reaper,
        ):
            run_id = await holder.submit("payer", None)
            await entered.wait()
            # Past the first renewal, so the lease the step meets is a renewal's.
            await anyio.sleep(0.6)
            await clocks.step(direction * STEP_SECONDS, on=stepped)
            await anyio.sleep(0.8)
            await clocks.step(-direction * STEP_SECONDS, on=stepped)
            run = await holder.wait(run_id, timeout=30)
            reaped = reaper.supervisor.metrics.leases_reaped._value.get()
            cut_off = holder.supervisor.keeper.stats.guard_cancels

    assert "lease.reaped" not in events(logs)
    assert (reaped, cut_off) == (0, 0)
    assert (run.state, run.epoch, run.requeues) == (RunState.COMPLETED, 1, 0)
    assert len(calls) == 1


def _spawn_worker(store_url: str, marker_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), store_url, str(marker_dir), "3600"],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


async def _lease_owner(rt: Runtime, run_id: str) -> str | None:
    record = await rt.store.get_run(run_id)
    return None if record is None else record.lease_owner


async def _until(check: Any, timeout: float = 20.0) -> None:
    """Poll a file another process writes: nothing in this process can signal it."""
    with anyio.fail_after(timeout):
        while not check():  # noqa: ASYNC110
            await anyio.sleep(0.02)


@pytest.mark.parametrize("direction", [1, -1], ids=["ahead", "back"])
@pytest.mark.slow
async def test_a_killed_worker_is_reaped_within_the_bound_whatever_the_clock_did(
    store_url: str, clocks: Clocks, tmp_path: Path, direction: int
) -> None:
    """SIGKILL a real worker process inside a long lookup, and step the surviving
    worker's clock (or the database's) a minute either way: its runs are still
    reaped within lease_seconds + reap_interval_seconds of the kill."""
    worker = _spawn_worker(store_url, tmp_path)
    try:
        await _until(lambda: any(c["pid"] == worker.pid for c in read_lines(tmp_path / CALLS_FILE)))
        assert worker.stdout is not None
        run_id = worker.stdout.readline().strip().removeprefix("run_id=")
        worker_id = f"paused-worker:{worker.pid}"
        async with Runtime.open(
            store_url,
            build_app(tmp_path, lookup_seconds=0.0),
            reap_interval_seconds=REAP_INTERVAL_SECONDS,
            poll_interval_seconds=0.02,
            worker_id="taker",
            clock=clocks.reaper,
        ) as rt:
            # Long enough for the taker's reaper to have watched the lease renewed.
            await anyio.sleep(LEASE_SECONDS)
            os.kill(worker.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            await clocks.step(direction * STEP_SECONDS, on=clocks.reaper)
            with anyio.fail_after(30):
                while await _lease_owner(rt, run_id) == worker_id:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            reaped_after = time.monotonic() - killed_at
            run = await rt.wait(run_id, timeout=30)
    finally:
        worker.kill()
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()

    # The documented bound, and scheduling on a loaded machine.
    assert reaped_after < LEASE_SECONDS + REAP_INTERVAL_SECONDS + 1.5, reaped_after
    assert (run.state, run.epoch) == (RunState.COMPLETED, 2)


async def test_the_steps_reach_the_store(store_url: str, clocks: Clocks) -> None:
    """The steps above do reach the store's clock: a run created after one is dated by
    it (otherwise the tests above would prove nothing)."""
    await clocks.step(STEP_SECONDS, on=clocks.reaper)
    store = await open_store(store_url, clock=clocks.reaper)
    try:
        run = await store.create_run(new_run())
    finally:
        await store.aclose()
    assert run.created_at > time.time() + STEP_SECONDS / 2


async def test_a_reaper_reaps_only_a_lease_it_watched_unrenewed_for_the_seconds_granted(
    store_url: str,
) -> None:
    """On the reaper's own monotonic clock: a fresh reaper reaps nothing; each renewal
    starts the wait again; a lease left alone for its 5 s is reaped, at 5 s, not before."""
    clock = ManualClock()
    store = await open_store(store_url)
    try:
        reaper = LeaseReaper(store, interval_seconds=1.0, policy=RecoveryPolicy(), clock=clock)
        await store.create_run(new_run())
        (run,) = await store.claim_runs("w1", 1, 5.0, ["a"])
        assert await reaper.reap_once() == ()
        clock.advance(4.9)
        assert await reaper.reap_once() == ()
        (renewed,) = await store.commit_batch([BatchItem(run.id, run.epoch, lease_seconds=5.0)])
        assert isinstance(renewed, Stored)
        clock.advance(0.2)
        assert await reaper.reap_once() == ()
        clock.advance(4.9)
        assert await reaper.reap_once() == ()
        clock.advance(0.1)
        reaped = await reaper.reap_once()
        after = await store.get_run(run.id)
    finally:
        await store.aclose()
    assert [(r.run_id, r.epoch) for r in reaped] == [(run.id, 1)]
    assert after is not None and (after.state, after.requeues) == (RunState.QUEUED, 1)


async def test_a_reaper_wakes_when_a_lease_it_watches_comes_due_not_at_its_next_tick(
    store_url: str,
) -> None:
    """A dead claim with a 0.3 s lease and a reaper whose timer ticks every 30 s: the run
    is reaped a lease after the reaper first saw it, not a tick later."""
    store = await open_store(store_url)
    try:
        await store.create_run(new_run())
        (run,) = await store.claim_runs("ghost", 1, 0.3, ["a"])
        claimed_at = time.monotonic()
    finally:
        await store.aclose()
    async with Runtime.open(
        store_url, App([]), lease_seconds=60.0, reap_interval_seconds=30.0
    ) as rt:
        with anyio.fail_after(10):
            while (await rt.get(run.id)).state is RunState.RUNNING:  # noqa: ASYNC110
                await anyio.sleep(0.01)
    # Never before the lease the claim granted, and far sooner than the next tick.
    assert 0.3 <= time.monotonic() - claimed_at < 10.0
