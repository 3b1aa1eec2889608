"""A run SIGKILLed in one worker process and resumed in another is one trace, on both
stores: two attempts, and no step traced twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.traced_worker import HUNG_FILE
from tests.integration.tracing_support import read_spans

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().with_name("traced_worker.py")
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def start(store_url: str, marker_dir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), store_url, str(marker_dir), *args],
        env=ENV,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def test_a_killed_and_resumed_run_is_one_trace_of_two_attempts(
    store_url: str, tmp_path: Path
) -> None:
    killed = start(store_url, tmp_path, "submit")
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / HUNG_FILE).exists():
            assert killed.poll() is None, "the worker exited before it hung"
            assert time.monotonic() < deadline, "the worker never reached its second turn"
            time.sleep(0.02)
        os.kill(killed.pid, signal.SIGKILL)
        assert killed.wait(timeout=10) == -signal.SIGKILL
        assert killed.stdout is not None
        [run_id] = [
            line.removeprefix("run_id=")
            for line in killed.stdout.read().splitlines()
            if line.startswith("run_id=")
        ]
    finally:
        if killed.poll() is None:
            killed.kill()
        killed.wait()
        if killed.stdout is not None:
            killed.stdout.close()

    resumed = subprocess.run(
        [sys.executable, str(WORKER), store_url, str(tmp_path), "resume", run_id],
        env=ENV,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip().endswith("state=completed")

    killed_file = tmp_path / f"spans-{killed.pid}.jsonl"
    first = read_spans([killed_file])
    second = read_spans(path for path in tmp_path.glob("spans-*.jsonl") if path != killed_file)
    submit = [span for span in first if span["name"] == "submit"]
    assert len(submit) == 1
    trace_id = submit[0]["context"]["trace_id"]
    run_spans = [span for span in first + second if span["name"] != "submit"]
    assert {span["context"]["trace_id"] for span in run_spans} == {trace_id}

    # The killed attempt never ended, so its own span was never exported; the steps it
    # finished were, as its children. The resumed attempt is a second one.
    [attempt] = [span for span in second if span["name"] == "invoke_agent crossing"]
    assert attempt["parent_id"] == submit[0]["context"]["span_id"]
    assert attempt["attributes"]["leaseward.run.epoch"] == 2
    assert attempt["attributes"]["leaseward.run.resumed"] is True
    # The first turn and the lookup's outcome.
    assert attempt["attributes"]["leaseward.run.journaled_steps"] == 2
    killed_attempt = {span["parent_id"] for span in first if span["name"] != "submit"}
    assert len(killed_attempt) == 1
    assert killed_attempt != {attempt["context"]["span_id"]}

    assert [span["name"] for span in first if span["name"] != "submit"] == [
        "chat m-cross",
        "execute_tool lookup",
    ]
    # The journaled turn and lookup are not traced again: only the second turn is new.
    assert [span["name"] for span in second if span["name"] != "invoke_agent crossing"] == [
        "chat m-cross"
    ]
    assert all(
        span["parent_id"] == attempt["context"]["span_id"] for span in second if span is not attempt
    )
