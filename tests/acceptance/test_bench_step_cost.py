"""bench/step_cost.py refuses sizes it cannot measure in one line, not a traceback.

It compares no figure with a time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flags", [["--runs", "0"], ["--turns", "0"], ["--top", "-1"]])
def test_bad_sizes_get_one_clear_error(flags: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "step_cost.py"), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2
    assert "--runs, --turns and --repetitions must be at least 1, --top at least 0" in done.stderr
    assert "Traceback" not in done.stderr
