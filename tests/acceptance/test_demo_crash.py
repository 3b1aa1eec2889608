"""`make demo-crash` works: the script kills a daemon mid-charge and tells what happened."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.acceptance.acceptance_support import ROOT, base_env

pytestmark = pytest.mark.slow

DEMO = ROOT / "examples" / "demo_crash.py"
DEMO_TIMEOUT_SECONDS = 120.0


def test_demo_crash_charges_once_and_completes_after_resolve() -> None:
    done = subprocess.run(
        [sys.executable, str(DEMO)],
        env=base_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The narration wraps its lines: read it as one paragraph.
    told = " ".join(done.stdout.split())
    for sentence in (
        "daemon 1 was killed with SIGKILL",
        "The run is dead_lettered, reason interrupted_write",
        "The charge ledger holds exactly one charge",
        "--applied",
        "the run is completed with the result 'order A-1 is paid'",
        "The card was charged once.",
    ):
        assert sentence in told, done.stdout
