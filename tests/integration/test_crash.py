"""A real worker process SIGKILLed mid-step, and the run recovered by another (G1-G3, G8).

Each test starts ``crash_worker.py`` on the test's SQLite file, waits for the
marker line it writes where it hangs, kills it with SIGKILL, then opens runtimes
in this process on the same file: one that reaps the dead lease, and one with
the same agent definitions (whose tools now return) that resumes the run. Tool
executions and provider turns are counted across both processes from the marker
files, each line carrying the pid that wrote it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from leaseward import (
    App,
    Reason,
    RunInfo,
    RunMode,
    RunState,
    Runtime,
    StepInfo,
    StepKind,
    StepStatus,
)
from leaseward.client import new_run_id
from leaseward.runtime.commits import Stored
from leaseward.runtime.runs import NewRun
from leaseward.storage import BatchItem, open_store
from tests.integration.crash_worker import (
    AGENT,
    CALL_ID,
    CALLS_FILE,
    LOG_FILE,
    PROVIDER_FILE,
    build_app,
    first_reply,
    read_lines,
)
from tests.integration.support import provider_step

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).resolve().with_name("crash_worker.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER_POLL_SECONDS = 0.02
MARKER_TIMEOUT_SECONDS = 20.0
WAIT_SECONDS = 15.0
IDLE_REAP_SECONDS = 3600.0
# A reap interval must be shorter than the lease: an idle reaper needs a long lease.
IDLE_LEASE_SECONDS = 2 * IDLE_REAP_SECONDS

Marker = Callable[[Path, int], bool]


def tool_started(marker_dir: Path, pid: int) -> bool:
    return any(line["pid"] == pid for line in read_lines(marker_dir / CALLS_FILE))


def second_turn_asked(marker_dir: Path, pid: int) -> bool:
    return any(
        line["pid"] == pid and line["turn"] == 1 for line in read_lines(marker_dir / PROVIDER_FILE)
    )


def _worker_log(marker_dir: Path) -> str:
    path = marker_dir / LOG_FILE
    return path.read_text(encoding="utf-8")[-4000:] if path.exists() else "(no log)"


def kill_worker_when(
    db_url: str, scenario: str, marker_dir: Path, marker: Marker
) -> tuple[str, int]:
    """Run the worker until ``marker`` holds, SIGKILL it; the run id and the worker's pid."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), db_url, scenario, str(marker_dir)],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + MARKER_TIMEOUT_SECONDS
        while not marker(marker_dir, proc.pid):
            if proc.poll() is not None:
                pytest.fail(f"the worker exited with {proc.returncode}:\n{_worker_log(marker_dir)}")
            if time.monotonic() > deadline:
                pytest.fail(f"no marker from the worker:\n{_worker_log(marker_dir)}")
            time.sleep(MARKER_POLL_SECONDS)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert proc.stdout is not None
        printed = [ln for ln in proc.stdout.read().splitlines() if ln.startswith("run_id=")]
        assert len(printed) == 1, printed
        return printed[0].removeprefix("run_id="), proc.pid
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


async def recover(
    db_url: str, scenario: str, marker_dir: Path, run_id: str
) -> tuple[RunInfo, list[StepInfo]]:
    """Other workers, on the same file and agents, reap the killed lease and finish the run.

    One runtime has no agents and only reaps, every 50 ms; the other has the
    scenario's agents and claims the requeued run, its own reaper idle after the
    pass at start-up (when the killed lease has not expired yet). A single
    runtime doing both would hit the stale-reap bug that
    ``test_worker_that_reaps_and_reclaims_a_run_keeps_its_new_attempt`` shows.
    """
    app = build_app(scenario, marker_dir, crash=False)
    async with (
        Runtime.open(db_url, App([]), reap_interval_seconds=0.05, worker_id="reaper:1"),
        Runtime.open(
            db_url,
            app,
            poll_interval_seconds=0.02,
            lease_seconds=IDLE_LEASE_SECONDS,
            reap_interval_seconds=IDLE_REAP_SECONDS,
        ) as rt,
    ):
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
        journal = await rt.steps(run_id)
    return run, journal


def calls_of(marker_dir: Path, run_id: str) -> list[dict[str, Any]]:
    lines = read_lines(marker_dir / CALLS_FILE)
    assert {line["run_id"] for line in lines} <= {run_id}
    return lines


def turns_of(marker_dir: Path, run_id: str) -> list[tuple[int, int]]:
    """(turn, pid) of every provider request, in the order they were asked."""
    lines = read_lines(marker_dir / PROVIDER_FILE)
    assert {line["run_id"] for line in lines} <= {run_id}
    return [(line["turn"], line["pid"]) for line in lines]


def rows(journal: list[StepInfo]) -> list[tuple[int, int, StepKind, str | None, StepStatus]]:
    return [(s.seq, s.epoch, s.kind, s.call_id, s.status) for s in journal]


PROVIDER, TOOL = StepKind.PROVIDER, StepKind.TOOL
STARTED, SUCCEEDED = StepStatus.STARTED, StepStatus.SUCCEEDED


async def test_killed_mid_non_idempotent_write_is_dead_lettered_and_not_rerun(
    db_url: str, tmp_path: Path
) -> None:
    run_id, worker = kill_worker_when(db_url, "non_idempotent", tmp_path, tool_started)
    run, journal = await recover(db_url, "non_idempotent", tmp_path, run_id)

    assert (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
    assert run.result is None
    calls = calls_of(tmp_path, run_id)
    assert [(c["pid"], c["epoch"], c["call_id"]) for c in calls] == [(worker, 1, CALL_ID)]
    # The intent stays in the journal, unsettled: an operator decides whether it applied.
    assert rows(journal) == [(0, 1, PROVIDER, None, SUCCEEDED), (1, 1, TOOL, CALL_ID, STARTED)]
    [intent] = [s for s in journal if s.kind is TOOL]
    assert (intent.tool, intent.idempotency_key) == ("charge", calls[0]["idempotency_key"])
    assert turns_of(tmp_path, run_id) == [(0, worker)]


async def test_killed_mid_idempotent_write_is_rerun_with_the_same_key(
    db_url: str, tmp_path: Path
) -> None:
    run_id, worker = kill_worker_when(db_url, "idempotent", tmp_path, tool_started)
    run, journal = await recover(db_url, "idempotent", tmp_path, run_id)

    assert (run.state, run.reason, run.result) == (RunState.COMPLETED, Reason.COMPLETED, "done")
    assert run.requeues == 1
    first, second = calls_of(tmp_path, run_id)
    assert (first["pid"], second["pid"]) == (worker, os.getpid())
    assert first["call_id"] == second["call_id"] == CALL_ID
    assert first["idempotency_key"] == second["idempotency_key"]
    assert (first["epoch"], second["epoch"]) == (1, 2)
    assert rows(journal) == [
        (0, 1, PROVIDER, None, SUCCEEDED),
        (1, 1, TOOL, CALL_ID, STARTED),
        (2, 2, TOOL, CALL_ID, SUCCEEDED),
        (3, 2, PROVIDER, None, SUCCEEDED),
    ]
    keys = {s.idempotency_key for s in journal if s.kind is TOOL}
    assert keys == {first["idempotency_key"]}
    # The recorded first turn is not asked again.
    assert turns_of(tmp_path, run_id) == [(0, worker), (1, os.getpid())]


async def test_killed_mid_read_reruns_the_read_and_the_turn_that_waited_for_it(
    db_url: str, tmp_path: Path
) -> None:
    run_id, worker = kill_worker_when(db_url, "read_only", tmp_path, tool_started)
    run, journal = await recover(db_url, "read_only", tmp_path, run_id)

    assert (run.state, run.reason, run.result) == (RunState.COMPLETED, Reason.COMPLETED, "done")
    assert run.requeues == 1
    calls = calls_of(tmp_path, run_id)
    assert [(c["pid"], c["epoch"]) for c in calls] == [(worker, 1), (os.getpid(), 2)]
    assert len({c["idempotency_key"] for c in calls}) == 1
    # The turn rides with the read's result (G5): killed before that commit, it is
    # lost with the read and asked again, once.
    assert turns_of(tmp_path, run_id) == [(0, worker), (0, os.getpid()), (1, os.getpid())]
    # A read needs no intent: the turn and the outcome, recorded by the second attempt.
    assert rows(journal) == [
        (0, 2, PROVIDER, None, SUCCEEDED),
        (1, 2, TOOL, CALL_ID, SUCCEEDED),
        (2, 2, PROVIDER, None, SUCCEEDED),
    ]


async def test_killed_after_a_read_reruns_neither_the_read_nor_its_turn(
    db_url: str, tmp_path: Path
) -> None:
    run_id, worker = kill_worker_when(db_url, "after_read", tmp_path, second_turn_asked)
    run, journal = await recover(db_url, "after_read", tmp_path, run_id)

    assert (run.state, run.reason, run.result) == (RunState.COMPLETED, Reason.COMPLETED, "done")
    assert run.requeues == 1
    calls = calls_of(tmp_path, run_id)
    assert [(c["pid"], c["epoch"]) for c in calls] == [(worker, 1)]
    # The first turn went in with the read's result; only the cut-off second is asked again.
    assert turns_of(tmp_path, run_id) == [(0, worker), (1, worker), (1, os.getpid())]
    assert rows(journal) == [
        (0, 1, PROVIDER, None, SUCCEEDED),
        (1, 1, TOOL, CALL_ID, SUCCEEDED),
        (2, 2, PROVIDER, None, SUCCEEDED),
    ]


async def test_killed_after_a_completed_write_resumes_without_repeating_it(
    db_url: str, tmp_path: Path
) -> None:
    run_id, worker = kill_worker_when(db_url, "after_tool", tmp_path, second_turn_asked)
    run, journal = await recover(db_url, "after_tool", tmp_path, run_id)

    assert (run.state, run.reason, run.result) == (RunState.COMPLETED, Reason.COMPLETED, "done")
    assert run.requeues == 1
    calls = calls_of(tmp_path, run_id)
    assert [(c["pid"], c["epoch"]) for c in calls] == [(worker, 1)]
    # The second turn was cut off unrecorded, so it is asked again; the first is not.
    assert turns_of(tmp_path, run_id) == [(0, worker), (1, worker), (1, os.getpid())]
    assert rows(journal) == [
        (0, 1, PROVIDER, None, SUCCEEDED),
        (1, 1, TOOL, CALL_ID, SUCCEEDED),
        (2, 2, PROVIDER, None, SUCCEEDED),
    ]
    [write] = [s for s in journal if s.kind is TOOL]
    assert write.tool == "charge"


async def test_worker_that_reaps_and_reclaims_a_run_keeps_its_new_attempt(
    db_url: str, tmp_path: Path
) -> None:
    store = await open_store(db_url)
    new = NewRun(id=new_run_id(), agent=AGENT, mode=RunMode.QUEUED, input_json='{"order":1}')
    run_id = (await store.create_run(new)).id
    # A dead worker's attempt: the first turn recorded, the lease about to expire.
    [claimed] = await store.claim_runs("ghost:1", 1, 0.3, [AGENT])
    step = provider_step(0, first_reply("non_idempotent"))
    [outcome] = await store.commit_batch(
        [BatchItem(run_id, claimed.epoch, steps=(step,), lease_seconds=0.3)]
    )
    assert isinstance(outcome, Stored)
    app = build_app("non_idempotent", tmp_path, crash=False, tool_seconds=1.0)
    async with Runtime.open(
        store, app, poll_interval_seconds=0.02, reap_interval_seconds=0.05
    ) as rt:
        # Deliver the reaper's report a little late: the claim loop re-claims the
        # requeued run first, as it does whenever it polls during the reap.
        reaper = rt.supervisor.reaper
        forward = reaper._on_reaped
        assert forward is not None

        async def late(reaped: Any) -> None:
            await anyio.sleep(0.3)
            await forward(reaped)

        reaper._on_reaped = late
        run = await rt.wait(run_id, timeout=WAIT_SECONDS)
    await store.aclose()

    # The new attempt is healthy and must finish: a report about epoch 1 must not
    # cancel it mid-write (that would dead-letter it as interrupted_write).
    assert (run.state, run.epoch, run.requeues) == (RunState.COMPLETED, 2, 1), (
        run.state,
        run.reason,
        run.epoch,
    )
