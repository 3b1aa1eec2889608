"""Two worker processes on one store (each dialect) share the queue and never both hold a run."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from leaseward import Client, RunState
from tests.stores import created

# Real worker processes killed and waited for: make test-fast skips these.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def store_url(store_url: str) -> str:
    """The conftest store, created: these tests open a Client first, which creates none."""
    return created(store_url)


ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("pool_worker.py")
RUNS = 60


async def test_two_processes_share_the_work_and_each_write_runs_once(
    store_url: str, tmp_path: Path
) -> None:
    calls_file = tmp_path / "calls.txt"
    async with Client.open(store_url) as client:
        ids = [await client.submit("payer", i) for i in range(RUNS)]

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "POOL_WORKER_BARRIER": f"{barrier}:2",
        # Long enough that one worker alone needs over a second for the queue: the
        # other is claiming by then, however slowly it opened its store.
        "POOL_WORKER_CHARGE_SECONDS": "0.2",
    }
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), store_url, name, str(calls_file)],
            env=env,
            stderr=subprocess.PIPE,
        )
        for name in ("w1", "w2")
    ]
    try:
        for worker in workers:
            _, err = worker.communicate(timeout=60)
            assert worker.returncode == 0, err.decode()
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()

    lines = [line.split() for line in calls_file.read_text().splitlines()]
    executions = Counter(run_id for run_id, _, _ in lines)
    assert sorted(executions) == sorted(ids)
    assert set(executions.values()) == {1}, "a non-idempotent write ran twice"
    assert {worker for _, worker, _ in lines} == {"w1", "w2"}
    async with Client.open(store_url) as client:
        runs = [await client.get(run_id) for run_id in ids]
    assert all(r.state is RunState.COMPLETED and r.epoch == 1 for r in runs)
