"""bench/step_instructions.py counts a step's instructions end to end at a tiny size, so
that the benchmark cannot rot, and refuses what it cannot do with one clear error.

It compares no count with a figure: what a step costs is for the benchmark to print.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "step_instructions.py"
TIMEOUT_SECONDS = 600
REQUIRED_VARIABLE = "LEASEWARD_TEST_VALGRIND_REQUIRED"
MISSING_VALGRIND = "valgrind is not installed (apt-get install -y valgrind; make test does it)"


def run(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LEASEWARD_")}
    base["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *flags],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        env={**base, **(env or {})},
    )


def need_valgrind() -> None:
    """Skip, saying why, where valgrind is missing; fail when REQUIRED_VARIABLE is set,
    as ``.ci/run`` sets it."""
    if shutil.which("valgrind") is None:
        if os.environ.get(REQUIRED_VARIABLE):
            pytest.fail(f"{REQUIRED_VARIABLE} is set, but {MISSING_VALGRIND}")
        pytest.skip(MISSING_VALGRIND)


@pytest.mark.slow
def test_a_tiny_run_counts_the_instructions_of_a_step() -> None:
    need_valgrind()
    done = run("--runs", "4", "--turns", "2", "--repetitions", "1", "--kinds", "write")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    counts = {}
    for layer in ("machine", "actor"):
        [row] = [line for line in done.stdout.splitlines() if line.startswith(f"{layer} ")]
        count, added = (
            int(f.replace(",", "")) for f in re.findall(r"[-+]?[\d,]+", row[len(layer) :])
        )
        counts[layer] = (count, added)
    # A step of Python is hundreds of thousands of instructions, never none. (At this
    # size one collection of the whole heap more in one process than in the other could
    # outweigh a step, so the layers are not compared here.)
    assert counts["machine"][0] > 10_000
    assert counts["actor"][0] > 10_000
    assert counts["machine"][1] == counts["machine"][0]
    assert counts["actor"][1] == counts["actor"][0] - counts["machine"][0]
    assert "of every thread of the process" in done.stdout


def test_without_valgrind_it_says_so_once(tmp_path: Path) -> None:
    done = run("--layers", "machine", env={"PATH": str(tmp_path)})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "step_instructions.py: valgrind is not installed (Debian: apt-get install valgrind)"
    ]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_an_unknown_layer_gets_one_clear_error() -> None:
    done = run("--layers", "runtime")
    assert done.returncode == 2
    assert "choose from machine, actor" in done.stderr
    assert "Traceback" not in done.stderr
