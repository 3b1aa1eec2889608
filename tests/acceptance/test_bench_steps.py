"""bench/steps.py at its smallest says which way each figure is better.

It compares no figure with a time.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_tiny_run_says_which_way_is_better(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "steps.py"),
            "--concurrency",
            "1",
            "--variants",
            "read",
            "--min-seconds",
            "0",
            "--results-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Better is more rows/s, a group/single above 1x" in done.stdout
    assert "and a lower p50 and p99" in done.stdout
    assert len(list(tmp_path.glob("steps-2*.json"))) == 1
