"""bench/step_layers.py runs end to end at a tiny size, so that the benchmark cannot rot.

Its layers drive the run machine and the RunActor by hand: a change to either that the
script no longer follows fails here, not on the next person to measure. It compares no
figure with a time: a benchmark on a shared machine may be slow, never wrong.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "step_layers.py"
TIMEOUT_SECONDS = 120
LAYERS = ("machine", "actor", "actor, answers next turn", "runtime")


def test_a_tiny_run_prints_every_layer_for_reads_and_writes() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEWARD_")}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, str(SCRIPT), "--runs", "3", "--turns", "2", "--repetitions", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    reps = [line for line in done.stdout.splitlines() if line.lstrip().startswith("rep ")]
    assert len(reps) == 2
    for layer in LAYERS:
        [row] = [line for line in done.stdout.splitlines() if line.startswith(f"{layer} ")]
        # The layer's name, then min, added and median for reads and for writes.
        figures = re.findall(r"[-+]?\d+\.\d", row[len(layer) :])
        assert len(figures) == 6, row
        assert all(float(figures[i]) > 0 for i in (0, 2, 3, 5)), row


def test_bad_sizes_get_one_clear_error() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "0"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2
    assert "--runs, --turns and --repetitions must be at least 1" in done.stderr
    assert "Traceback" not in done.stderr
