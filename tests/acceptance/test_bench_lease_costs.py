"""bench/lease_costs.py runs end to end in its quickest mode, so that the benchmark cannot rot.

The script runs with ``--quick`` cut down to tiny sizes (a few hundred runs of history,
fifty parked runs, one lease) into a temporary results directory, on SQLite, and its
history once more on the test's PostgreSQL server; the tests read the JSON and check
that the sections are there and that their counts add up. They compare no figure with
a time: a benchmark on a shared machine may be slow, never wrong.
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
SCRIPT = ROOT / "bench" / "lease_costs.py"
TIMEOUT_SECONDS = 120
OPERATIONS = {"claim_32", "claim_1", "reap_100", "reap_0"}
PLANNED = {"claim", "reap scan", "reap journal read", "reap write", "lease renewal"}


def run_tiny(results: Path, *more: str) -> tuple[dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEWARD_")}
    env["PYTHONPATH"] = str(ROOT)
    command = [
        sys.executable,
        str(SCRIPT),
        "--quick",
        "--finished",
        "200,600",
        "--queued",
        "300",
        "--parked",
        "50",
        "--leases",
        "2",
        "--results-dir",
        str(results),
        *more,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    # A quick run leaves the committed lease-costs-latest.json to the last full run.
    assert not (results / "lease-costs-latest.json").exists()
    [written] = results.glob("lease-costs-2*.json")
    document: dict[str, Any] = json.loads(written.read_text())
    return document, done.stderr


def test_quick_run_writes_both_sections_with_counts_that_add_up(tmp_path: Path) -> None:
    document, progress = run_tiny(tmp_path)

    assert document["benchmark"] == "lease-costs"
    assert document["quick"] is True and document["store_server"] is None
    assert document["environment"]["revision"]
    assert len(list(tmp_path.glob("lease-costs-2*.json"))) == 1
    # One progress line per unit: 3 history sizes, the fleet's baseline and one cell.
    ticks = [line for line in progress.splitlines() if line.startswith("[")]
    assert len(ticks) == 5 and ticks[-1].startswith("[5/5]")

    history = document["history"]
    assert history["settings"]["stores"] == ["sqlite"]
    points = [(p["store"], p["series"], p["size"]) for p in history["points"]]
    assert points == [
        ("sqlite", "finished", 200),
        ("sqlite", "finished", 600),
        ("sqlite", "queued", 300),
    ]
    samples = history["settings"]["claim_samples"]
    for point in history["points"]:
        operations = point["operations"]
        assert set(operations) == OPERATIONS == set(point["ratio_to_first"])
        assert operations["claim_32"]["runs_claimed"] == 32 * samples
        assert operations["claim_1"]["runs_claimed"] == samples
        expired = history["settings"]["expired_per_reap_pass"]
        assert (
            operations["reap_100"]["runs_reaped"] == expired * history["settings"]["reap_samples"]
        )
        assert len(operations["claim_1"]["samples_ms"]) == samples
        assert set(point["plans"]) == PLANNED
        assert all(point["plans"][label] for label in PLANNED)
        assert point["generic_plans"] is None and point["generic_full_scans"] == {}
    first = history["points"][0]
    assert first["ratio_to_first"] == dict.fromkeys(OPERATIONS, 1.0)
    # The partial indexes keep SQLite's claim and reap scan off the whole table.
    assert history["full_scans"] == [] == history["generic_full_scans_at_largest_size"]
    assert any("runs_claimable" in line for line in first["plans"]["claim"])
    assert any("runs_leased" in line for line in first["plans"]["reap scan"])

    fleet = document["fleet"]
    baseline, cell = fleet["cells"]
    assert (baseline["store"], baseline["parked"]) == ("sqlite", 0)
    assert (cell["store"], cell["parked"], cell["lease_seconds"]) == ("sqlite", 50, 2.0)
    assert cell["all_parked"] and cell["parked_at_end"] == 50
    assert cell["concurrency"] == 50 + fleet["settings"]["short_loops"]
    assert cell["expected_renewal_rows_per_second"] == 75.0
    # Nothing is in a call without parked runs, so the keeper has nothing to renew.
    assert baseline["keeper"]["renewals"] == 0
    for c in (baseline, cell):
        assert {"renewal_batches", "renewals", "renewals_failed", "guard_cancels"} <= set(
            c["keeper"]
        )
        assert c["short_runs_completed"] > 0
        assert c["persister"]["batches"] > 0
        assert set(c["loop_lag_ms"]) == {"p50", "p99", "max"}


def test_history_on_postgresql_plans_every_statement_for_values_and_for_any(
    tmp_path: Path, pg_server: Any
) -> None:
    # The script makes and drops its own databases on the server.
    pg_server.settle()
    document, _ = run_tiny(tmp_path, "--sections", "history", "--pg-url", pg_server.admin_url)

    history = document["history"]
    assert history["failures"] == []
    assert history["settings"]["stores"] == ["sqlite", "postgresql"]
    points = [p for p in history["points"] if p["store"] == "postgresql"]
    assert [(p["series"], p["size"]) for p in points] == [
        ("finished", 200),
        ("finished", 600),
        ("queued", 300),
    ]
    for point in points:
        assert set(point["plans"]) == PLANNED == set(point["generic_plans"])
        assert all(point["plans"][label] and point["generic_plans"][label] for label in PLANNED)
        assert point["operations"]["claim_32"]["runs_claimed"] == (
            32 * history["settings"]["claim_samples"]
        )
