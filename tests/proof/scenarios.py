"""One crash-point scenario: a worker process killed (or frozen) at a point, another taking over.

:func:`crash_at` submits one run of an effect's agent, starts ``proof_worker.py``
with the crash point armed, waits for the marker the point writes, then lets a
runtime in this process (the same agents, nothing armed) take the run over and
finish it. With ``action="stop"`` the frozen worker is continued afterwards and
must change nothing: no call of its starts (ledger) and the journal and run are
exactly as the rescuer left them. The invariants are counted at the end.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs

from leaseward import Client, Reason, RunState, Runtime
from leaseward.storage import open_store
from tests.proof.invariants import ProcessLife, count, read_journal
from tests.proof.proof_app import build_app, order, read_lines
from tests.proof.proof_worker import DEADLINE_MARGIN_SECONDS, LEASE_SECONDS, POLICY

WORKER = Path(__file__).resolve().with_name("proof_worker.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
POLL_SECONDS = 0.02
MARKER_TIMEOUT_SECONDS = 30.0
RESCUE_TIMEOUT_SECONDS = 30.0
GHOST_LEASE_SECONDS = 0.2
# A worker frozen inside a write transaction of its own (a heartbeat, a renewal) holds
# SQLite's one write lock, so nobody can take its run over: that is a lock, not a lease,
# question. Such a freeze is thrown away and the scenario begun again on a new store.
FREEZE_ATTEMPTS = 5


@attrs.frozen
class Outcome:
    state: RunState
    reason: Reason | None
    calls: list[int]
    """The pid of each execution of the run's tool, in order."""
    victim: int
    tally: dict[str, int]
    zombie_calls: int = 0
    """Executions the frozen worker started after it was continued."""
    zombie_changes: bool = False
    """Whether the run or its journal changed after the frozen worker was continued."""


def worker_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEWARD_TEST_CRASH")}
    # The worker runs the source tree under test.
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


def start_worker(
    url: str, directory: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), url, str(directory / "ledger.jsonl"), *args],
        env=env if env is not None else worker_env(),
        cwd=WORKER.parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(directory / "worker.err").open("ab"),
    )


def _marker_time(marker: Path, pid: int) -> float | None:
    return next((line["t"] for line in read_lines(marker) if line["pid"] == pid), None)


async def _wait_marker(proc: subprocess.Popen[bytes], marker: Path, directory: Path) -> float:
    deadline = time.monotonic() + MARKER_TIMEOUT_SECONDS
    while (hit := _marker_time(marker, proc.pid)) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            log = (directory / "worker.err").read_text(errors="replace")[-3000:]
            raise AssertionError(f"the worker never reached its point ({proc.poll()}):\n{log}")
        await anyio.sleep(POLL_SECONDS)
    return hit


async def _exit_of(proc: subprocess.Popen[bytes]) -> None:
    with anyio.fail_after(RESCUE_TIMEOUT_SECONDS):
        await anyio.to_thread.run_sync(proc.wait, abandon_on_cancel=True)


async def _rescue(url: str, directory: Path, run_id: str) -> None:
    async with Runtime.open(
        url,
        build_app(directory / "ledger.jsonl"),
        lease_seconds=LEASE_SECONDS,
        reap_interval_seconds=0.05,
        poll_interval_seconds=POLL_SECONDS,
        deadline_margin_seconds=DEADLINE_MARGIN_SECONDS,
        recovery=POLICY,
        worker_id="rescuer",
    ) as rt:
        await rt.wait(run_id, timeout=RESCUE_TIMEOUT_SECONDS)


async def _snapshot(url: str, run_id: str) -> tuple[Any, ...]:
    store = await open_store(url)
    try:
        return (await store.get_run(run_id), tuple(await store.list_steps(run_id)))
    finally:
        await store.aclose()


class _FrozenHoldingTheWriteLock(Exception):
    pass


def _write_locked(url: str) -> bool:
    connection = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=0.2)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.rollback()
        return False
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            return True
        raise
    finally:
        connection.close()


async def crash_at(point: str, effect: str, url: str, directory: Path, action: str) -> Outcome:
    """Run the scenario; ``action`` is "kill" (SIGKILL) or "stop" (SIGSTOP, later SIGCONT)."""
    for attempt in range(1, FREEZE_ATTEMPTS + 1):
        try:
            return await _crash_at(point, effect, url, directory, action)
        except _FrozenHoldingTheWriteLock:
            directory = directory / f"frozen-again-{attempt}"
            url = f"sqlite:///{directory / 'store.db'}"
    raise AssertionError(f"the worker froze inside a transaction {FREEZE_ATTEMPTS} times")


async def _crash_at(point: str, effect: str, url: str, directory: Path, action: str) -> Outcome:
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / "marker.jsonl"
    # Created as a worker creates it: the client that submits creates none.
    await (await open_store(url)).aclose()
    async with Client.open(url) as client:
        run_id = await client.submit(effect, order(effect))
        if point == "reap":
            # Someone else's dead attempt, for the victim's reaper to find.
            await client.store.claim_runs("ghost", 1, GHOST_LEASE_SECONDS, [effect])
    env = worker_env(
        LEASEWARD_TEST_CRASH_POINT=point,
        LEASEWARD_TEST_CRASH_MARKER=str(marker),
        LEASEWARD_TEST_CRASH_ACTION=action,
    )
    flags = ("--concurrency", "1", "--exit-after-point")
    proc = start_worker(url, directory, *flags, env=env)
    life = ProcessLife()
    try:
        hit = await _wait_marker(proc, marker, directory)
        if (
            action == "stop"
            and url.startswith("sqlite:")
            and await anyio.to_thread.run_sync(_write_locked, url)
        ):
            raise _FrozenHoldingTheWriteLock()
        if action == "kill":
            life.died = hit
            await _exit_of(proc)
            assert proc.returncode == -signal.SIGKILL, proc.returncode
        await _rescue(url, directory, run_id)
        zombie_calls, zombie_changes = 0, False
        if action == "stop":
            before = await _snapshot(url, run_id)
            continued = time.time()
            life.pauses.append((hit, continued))
            proc.send_signal(signal.SIGCONT)
            await _exit_of(proc)
            assert proc.returncode == 0, proc.returncode
            life.died = time.time()
            zombie_changes = await _snapshot(url, run_id) != before
            zombie_calls = sum(
                1
                for line in read_lines(directory / "ledger.jsonl")
                if line["ev"] == "start" and line["pid"] == proc.pid and line["t"] >= continued
            )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ledger = read_lines(directory / "ledger.jsonl")
    journal = await read_journal(url, [run_id])
    run = journal.runs[run_id]
    assert run is not None
    tally = count(ledger, journal, {proc.pid: life}, now=time.time())
    calls = [line["pid"] for line in ledger if line["ev"] == "start"]
    return Outcome(run.state, run.reason, calls, proc.pid, tally, zombie_calls, zombie_changes)
