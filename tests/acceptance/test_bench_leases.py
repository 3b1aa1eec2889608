"""bench/leases.py runs end to end in its quickest mode, so that the benchmark cannot rot.

The script is run as ``make bench-leases`` would run it, with ``--quick`` cut down to one
run per cell, into a temporary results directory; the test reads the JSON and checks
that every section is there and that its counts add up. It compares no figure with a
time: a benchmark on a shared machine may be slow, never wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "leases.py"
TIMEOUT_SECONDS = 600


def run_quick(results: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEWARD_")}
    # The workers the script starts run the source tree under test.
    env["PYTHONPATH"] = str(ROOT)
    command = [
        sys.executable,
        str(SCRIPT),
        "--quick",
        "--no-pg",
        "--ks",
        "1",
        "--ratios",
        "0.5,5",
        "--runs-per-ratio",
        "1",
        # Calls of 0.3 s and 3 s instead of 1 s and 10 s: the live part's shape is what
        # is checked here, and its calls were most of the test's minute.
        "--live-lease",
        "0.6",
        "--live-reap",
        "0.3",
        "--results-dir",
        str(results),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PostgreSQL: skipped (--no-pg)" in done.stdout
    # A quick run leaves the committed leases-latest.json and plots to the last full run.
    assert not (results / "leases-latest.json").exists()
    [written] = results.glob("leases-2*.json")
    document: dict[str, Any] = json.loads(written.read_text())
    return document


def test_quick_run_writes_every_section_with_counts_that_add_up(tmp_path: Path) -> None:
    document = run_quick(tmp_path)

    assert document["benchmark"] == "leases"
    assert document["failures"] == []
    assert document["environment"]["revision"]
    assert document["postgresql"] is None and document["many_workers"] is None

    [cell] = document["detection"]
    assert (cell["store"], cell["runs"], cell["workers"]) == ("sqlite", 1, 2)
    assert cell["bound_seconds"] == cell["lease_seconds"] + cell["reap_interval_seconds"]
    [run] = cell["runs_measured"]
    assert cell["not_rerun"] == 0
    # The order of events, not their timing: reaped, then claimed again, then rerun.
    assert 0 < run["reaped"] <= run["claimed"] <= run["rerun"]
    assert cell["over_target"] <= cell["over_bound"] <= 1

    scenarios = {(r["policy"], r["scenario"]) for r in document["live"]}
    assert scenarios == {
        ("leaseward", "calls"),
        ("step-boundary", "calls"),
        ("leaseward", "paused"),
        ("leaseward", "blocked"),
    }
    for result in document["live"]:
        ratios = [row["ratio"] for row in result["per_ratio"]]
        assert ratios == ([0.5, 5.0] if result["scenario"] == "calls" else [5.0])
        for row in result["per_ratio"]:
            assert row["runs"] == 1
            assert sum(row["final_states"].values()) == 1
        assert result["live_reaps"] == sum(row["live_reaps"] for row in result["per_ratio"])
        assert {"live", "watcher"} == set(result["worker_stats"])
    # The comparison policy is what it says: its live worker's keeper renews nothing, and
    # a call of five leases (3 s, its lease 0.6 s) is reaped while it runs, where
    # leaseward's keeper renews the leases of the calls in flight. (Whether leaseward's
    # 0.6 s leases are never reaped on a loaded machine is the benchmark's figure, not
    # this test's.)
    by_policy = {r["policy"]: r for r in document["live"] if r["scenario"] == "calls"}
    boundary, guarded = by_policy["step-boundary"], by_policy["leaseward"]
    assert boundary["worker_stats"]["live"]["keeper"]["renewals"] == 0
    [long_call] = [row for row in boundary["per_ratio"] if row["ratio"] == 5.0]
    assert long_call["live_reaps"] >= 1
    assert guarded["worker_stats"]["live"]["keeper"]["renewals"] > 0

    stamp = document["started_utc"]
    for plot in (f"leases-detection-{stamp}.png", f"leases-live-{stamp}.png"):
        assert (tmp_path / plot).stat().st_size > 0
    assert not list(tmp_path.glob("leases-live.png"))
    assert len(list(tmp_path.glob("leases-2*.json"))) == 1


@pytest.mark.parametrize("flag", ["--live-lease", "--runs-per-ratio", "--many-reap"])
def test_a_size_below_one_is_refused_before_anything_runs(flag: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", flag, "0", "--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(f"{flag} must be greater than 0")
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
