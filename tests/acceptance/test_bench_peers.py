"""bench/peers/compare.py runs end to end in its quick mode, so that the comparison cannot rot.

The run uses what leaseward's own venv has (leaseward read and write, and the raw
SQLite limits; the peers live in a venv of their own), into a temporary results
directory, and the test reads the JSON: its sections are there, and each ratio and
summary figure is the one computed from the measurements beside it. The targets
are checked on figures made up here, through the same function the script uses.
It compares no figure with a time: a benchmark on a shared machine may be slow,
never wrong.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "bench" / "peers"
sys.path.insert(0, str(PEERS))

import scaling  # noqa: E402
import tables  # noqa: E402

TIMEOUT_SECONDS = 300


def run_quick(results: Path) -> tuple[dict[str, Any], str]:
    command = [
        sys.executable,
        str(PEERS / "compare.py"),
        "--quick",
        "--no-pg",
        "--no-scaling",
        "--no-plot",
        "--systems",
        "raw,leaseward-read,leaseward-write",
        "--window",
        "0.5",
        "--leaseward-python",
        sys.executable,
        "--results-dir",
        str(results),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    assert done.returncode == 0, done.stdout + done.stderr
    # A smoke test leaves the committed record of the last full run alone.
    assert not (results / "peers-latest.json").exists()
    [written] = results.glob("peers-2*.json")
    document: dict[str, Any] = json.loads(written.read_text())
    return document, done.stdout


@pytest.mark.slow
def test_quick_run_reports_ratios_computed_from_its_own_measurements(tmp_path: Path) -> None:
    document, printed = run_quick(tmp_path)

    assert document["arguments"]["levels"] == [10]
    assert document["arguments"]["pg"] is False and document["scaling"] == {}
    assert document["not_run"] == {}
    assert document["leaseward"]["commit"]
    measurements = document["measurements"]
    assert [m["system"] for m in measurements] == ["raw", "leaseward-read", "leaseward-write"]
    assert all(m["error"] is None for m in measurements)

    by_system = {m["system"]: m["result"] for m in measurements}
    for name in ("leaseward-read", "leaseward-write"):
        result = by_system[name]
        assert result["completed"] == 10 and result["steps"] == 100
        assert result["rows"] == 10 * 21
        wait = result["wait"]
        assert wait["count"] >= result["rows"] // 2
        assert 0 < wait["p50_ms"] <= wait["p99_ms"] <= wait["max_ms"]
        [entry] = [e for e in document["matrix"] if e["system"] == name]
        assert entry["samples"] == 1
        assert entry["steps_per_second"]["median"] == result["steps_per_second"]
        assert entry["wait_p99_ms"]["median"] == wait["p99_ms"]
        assert 0 <= result["gc_seconds"] <= result["seconds"]
        share = result["gc_seconds"] / result["seconds"]
        assert entry["gc_share"]["median"] == pytest.approx(share)
        assert f"N=10 {share:.1%}" in printed

    raw = document["raw"]
    assert raw["batched"]["rows_per_commit"] == 100 and raw["single"]["rows_per_commit"] == 1
    raw_result = by_system["raw"]
    batched = raw_result["batched"]["rows_per_second"]
    assert raw["batched"]["rows_per_second"]["median"] == batched
    assert 200 < raw["batched"]["row_bytes"] < 1000
    # A run row, into leaseward's own schema: a submit's input, one row a commit.
    assert raw["run_row"]["rows_per_commit"] == 1
    assert raw["run_row"]["rows_per_second"]["median"] == raw_result["run_row"]["rows_per_second"]
    assert 0 < raw["run_row"]["row_bytes"] < 100

    ratios = {(r["ratio"], r["concurrency"]): r for r in document["ratios"]}
    journal = ratios[("leaseward-write journal/raw batched", 10)]
    assert journal["value"] == pytest.approx(
        by_system["leaseward-write"]["rows_per_second"] / batched
    )
    assert journal["target"] is None and journal["holds"] is None  # N=10 has no target
    single = ratios[("leaseward-read journal/raw single", 10)]
    expected = (
        by_system["leaseward-read"]["rows_per_second"] / raw_result["single"]["rows_per_second"]
    )
    assert single["value"] == pytest.approx(expected)
    assert ratios[("leaseward-read/dbos", 10)]["value"] is None  # DBOS was not measured
    assert f"{journal['value']:.0%}" in printed
    assert "durable tool steps/s and rows/s, median (min-max); higher is better" in printed
    assert "good = the repetitions measured of those run" in printed

    # The machine's Python speed, before the one repetition and after it.
    speed = document["machine"]["python_speed"]
    assert len(speed["samples"]) == 2 and all(sample > 0 for sample in speed["samples"])
    assert speed["min"] <= speed["median"] <= speed["max"]
    assert f"{speed['median']:.0f} ns an iteration" in printed


def entry(system: str, level: int, steps: float, rows: float) -> dict[str, Any]:
    return {
        "system": system,
        "concurrency": level,
        "samples": 3,
        "failed": 0,
        "steps_per_second": {"median": steps, "min": steps, "max": steps},
        "rows_per_second": {"median": rows, "min": rows, "max": rows},
        "rows_per_run": 21,
        "seconds": {"median": 1.0, "min": 1.0, "max": 1.0},
    }


def test_targets_hold_only_at_their_levels_and_only_when_met() -> None:
    summary = [
        entry("leaseward-read", 100, 3000.0, 6300.0),
        entry("leaseward-write", 100, 2000.0, 4200.0),
        entry("dbos", 100, 250.0, 325.0),
        entry("langgraph", 100, 150.0, 990.0),
        entry("leaseward-read", 10, 1500.0, 3150.0),
        entry("dbos", 10, 500.0, 650.0),
    ]
    raw = {
        "batched": {"rows_per_second": {"median": 30000.0}},
        "single": {"rows_per_second": {"median": 5000.0}},
    }
    found = {(r["ratio"], r["concurrency"]): r for r in tables.ratios(summary, raw, [10, 100])}

    assert found[("leaseward-read/dbos", 100)]["value"] == pytest.approx(12.0)
    assert found[("leaseward-read/dbos", 100)]["holds"] is True
    assert found[("leaseward-write/dbos", 100)]["value"] == pytest.approx(8.0)
    assert found[("leaseward-write/dbos", 100)]["holds"] is False
    assert found[("leaseward-read/langgraph", 100)]["holds"] is True
    assert found[("leaseward-read journal/raw batched", 100)]["value"] == pytest.approx(0.21)
    assert found[("leaseward-read journal/raw batched", 100)]["holds"] is True
    assert found[("leaseward-write journal/raw batched", 100)]["holds"] is False
    assert found[("leaseward-read/dbos", 10)]["value"] == pytest.approx(3.0)
    assert found[("leaseward-read/dbos", 10)]["holds"] is None
    assert found[("leaseward-write/dbos", 10)]["value"] is None


def test_a_submit_loop_is_given_beside_both_raw_rates(capsys: pytest.CaptureFixture[str]) -> None:
    def loop(system: str, background_runs: int, rate: float) -> dict[str, Any]:
        return {
            "system": system,
            "samples": 3,
            "background_runs": background_runs,
            "submits_per_second": {"median": rate, "min": rate - 100, "max": rate + 100},
            "submit_p50_ms": {"median": 0.4},
            "submit_p99_ms": {"median": 9.0},
        }

    raw = {
        "single": {"rows_per_second": {"median": 8000.0}},
        "run_row": {"rows_per_second": {"median": 4000.0}},
    }

    found = tables.print_loops(
        [loop("submit-loop", 100, 2000.0), loop("submit-loop-idle", 0, 9000.0)], raw
    )

    printed = capsys.readouterr().out
    assert "25.0% of raw one-commit-per-row (8000 rows/s)" in printed
    assert "50.0% of a run row committed alone (4000 rows/s) MISS" in printed
    # Only the loop beside busy runs has a target.
    assert [(f["system"], f["holds"]) for f in found] == [
        ("submit-loop", False),
        ("submit-loop-idle", None),
    ]
    assert found[0]["of_raw_single"] == pytest.approx(0.25)


def test_postgresql_is_marked_against_its_sqlite_figure(capsys: pytest.CaptureFixture[str]) -> None:
    pg = [
        entry("leaseward-read-pg", 100, 3100.0, 6510.0),
        entry("leaseward-write-pg", 100, 1800.0, 3780.0),
        entry("dbos-pg", 100, 200.0, 260.0),
    ]
    sqlite = [
        entry("leaseward-read", 100, 3000.0, 6300.0),
        entry("leaseward-write", 100, 2000.0, 4200.0),
        entry("dbos", 100, 250.0, 325.0),
    ]

    found = {r["ratio"]: r for r in tables.print_pg(pg, sqlite, 100)}

    printed = capsys.readouterr().out
    assert "leaseward-read-pg/leaseward-read (PG/SQLite): 1.03x ok" in printed
    assert "leaseward-write-pg/leaseward-write (PG/SQLite): 0.90x MISS" in printed
    assert found["dbos-pg/dbos"]["holds"] is None
    assert found["leaseward-read-pg/dbos-pg"]["holds"] is None


def test_claims_are_marked_where_more_workers_claim_no_more() -> None:
    def row(workers: int, batch: int, rate: int) -> dict[str, Any]:
        return {"workers": workers, "batch": batch, "runs_per_second": rate}

    rows = [row(4, 1, 2400), row(1, 1, 1400), row(2, 1, 2450), row(1, 32, 22000), row(2, 32, 33000)]

    assert scaling.claim_growth(rows) == {1: [(1, 2, True), (2, 4, False)], 32: [(1, 2, True)]}


def test_claims_results_are_read_with_the_machines_busy_share_and_the_workers_cpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import claims

    def result(workers: int, rate: int, busy: float | None) -> claims.Result:
        return claims.Result(
            workers=workers,
            batch=32,
            runs=rate,
            claimed=rate,
            claims=rate // 32 + workers,
            seconds=1.0,
            per_worker=(rate,),
            double_claims=0,
            busy=busy,
            worker_cpu_seconds=rate * 20e-6,
        )

    measured = [result(1, 19000, 0.71), result(2, 32000, 0.97), result(4, 31000, None)]
    claims.print_results(measured)
    table = capsys.readouterr().out
    assert "worker µs" in table
    assert "   71%      20.0  19000" in table

    # Three rounds, one after another: each row is its median round, with the range.
    rounds = [
        *measured,
        *[result(1, 18000, 0.70), result(2, 30000, 0.96), result(4, 33000, 0.98)],
        *[result(1, 20000, 0.72), result(2, 31000, 0.95), result(4, 34000, 0.99)],
    ]
    written = tmp_path / "claims.json"
    args = claims.build_parser().parse_args(
        ["--batch", "32", "--repeat", "3", "--json", str(written)]
    )
    claims.write_json(written, args, rounds)
    document = json.loads(written.read_text())
    assert len(document["rounds"]) == 9
    rows = scaling.claim_rows(document["measurements"])
    assert [
        (r["workers"], r["runs_per_second"], r["runs_per_second_min"], r["runs_per_second_max"])
        for r in rows
    ] == [(1, 19000, 18000, 20000), (2, 31000, 30000, 32000), (4, 33000, 31000, 34000)]
    assert [(r["busy"], r["vs_one_worker"]) for r in rows] == [
        (0.71, 1.0),
        (0.95, 1.63),
        (0.98, 1.74),
    ]

    chosen, ranges = claims.medians(rounds)
    claims.print_results(chosen, ranges)
    assert "   95%      20.0  30000-32000" in capsys.readouterr().out
    # A double claim in a round that is not the median still shows.
    doubled = [*rounds[:8], attrs.evolve(rounds[8], double_claims=2)]
    assert [r.double_claims for r in claims.medians(doubled)[0]] == [0, 0, 2]

    scaling.print_scaling({"claims": {"error": None, "rows": rows}})
    printed = capsys.readouterr().out
    assert "2 worker(s), batch 32:   31000 runs/s (30000-32000),    970 claims/s" in printed
    assert "machine 95% busy, workers' CPU 20.0 µs a run" in printed
    assert "batch 32: 1 to 2: ok, 2 to 4: ok" in printed

    one_round = tmp_path / "one.json"
    args = claims.build_parser().parse_args(["--batch", "32", "--json", str(one_round)])
    claims.write_json(one_round, args, measured)
    rows = scaling.claim_rows(json.loads(one_round.read_text())["measurements"])
    scaling.print_scaling({"claims": {"error": None, "rows": rows}})
    assert "batch 32: 1 to 2: ok, 2 to 4: MISS (machine 97% busy with 2)" in (
        capsys.readouterr().out
    )


def test_python_speed_summarizes_the_samples_that_were_taken(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = tables.print_python_speed([700.0, None, 500.0, 900.0])
    assert found == {
        "samples": [700.0, None, 500.0, 900.0],
        "median": 700.0,
        "min": 500.0,
        "max": 900.0,
    }
    assert "700 ns an iteration (500-900), 3 samples" in capsys.readouterr().out

    assert tables.print_python_speed([None]) == {"samples": [None]}
    assert "python speed: not measured" in capsys.readouterr().out


def test_every_table_says_which_way_is_better(capsys: pytest.CaptureFixture[str]) -> None:
    timed = {
        **entry("leaseward-read", 100, 3000.0, 6300.0),
        "wait_p50_ms": {"median": 5.0, "min": 4.0, "max": 6.0},
        "wait_p99_ms": {"median": 9.0, "min": 8.0, "max": 10.0},
        "wait_what": "each persist request",
        "gc_share": {"median": 0.01, "min": 0.01, "max": 0.02},
    }
    raw = {
        mode: {
            "rows_per_commit": 1,
            "rows_per_second": {"median": 5000.0, "min": 5000.0, "max": 5000.0},
            "commit_p50_ms": {"median": 0.2},
            "commit_p99_ms": {"median": 0.4},
            "row_bytes": 316.0,
        }
        for mode in tables.RAW_MODES
    }

    tables.print_latency([timed])
    assert "lower is better" in capsys.readouterr().out
    tables.print_collector([timed])
    assert "lower is better" in capsys.readouterr().out
    tables.print_ratios(tables.ratios([timed], raw, [100]), raw)
    printed = capsys.readouterr().out
    assert "with no runtime around it; higher is faster" in printed
    assert "above 1x (or 100%) where leaseward is faster" in printed
    tables.print_pg([entry("leaseward-read-pg", 100, 3100.0, 6510.0)], [timed], 100)
    printed = capsys.readouterr().out
    assert "higher is better" in printed and "above 1x where the first is faster" in printed


def test_a_missing_peers_venv_is_said_once_with_what_makes_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(PEERS / "compare.py"),
            "--quick",
            "--systems",
            "dbos,langgraph",
            "--peers-python",
            str(tmp_path / "missing" / "python"),
            "--results-dir",
            str(tmp_path / "results"),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stdout.count("does not exist") == 1
    assert "make bench-peers creates bench/.venv-peers" in done.stdout
    assert "dbos, langgraph: NOT RUN: see above" in done.stdout
    assert "plot: NOT DRAWN: it needs the peers' interpreter (see above)" in done.stdout


def test_what_is_given_beside_quick_is_measured_as_given(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(PEERS / "compare.py"),
            "--quick",
            "--levels",
            "2",
            "--systems",
            "leaseward-read",
            "--no-plot",
            "--leaseward-python",
            sys.executable,
            "--results-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [written] = tmp_path.glob("peers-2*.json")
    document = json.loads(written.read_text())
    assert document["arguments"]["levels"] == [2]
    assert document["arguments"]["repeat"] == 1
    assert [m["concurrency"] for m in document["measurements"]] == [2]


def test_a_pg_level_below_one_is_refused_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, str(PEERS / "compare.py"), "--pg-level", "0"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "--repeat, --steps and --pg-level must be >= 1, --timeout and --window > 0"
    ]


def test_a_pg_ratio_without_its_sqlite_level_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    pg = [entry("leaseward-read-pg", 100, 3100.0, 6510.0)]
    sqlite = [entry("leaseward-read", 10, 3000.0, 6300.0)]

    found = {r["ratio"]: r for r in tables.print_pg(pg, sqlite, 100)}

    assert found["leaseward-read-pg/leaseward-read"]["value"] is None
    printed = capsys.readouterr().out
    assert (
        "leaseward-read-pg/leaseward-read (PG/SQLite): - (SQLite was not measured at N=100: "
        "add 100 to --levels)"
    ) in printed
