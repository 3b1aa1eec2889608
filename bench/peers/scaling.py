"""Scaling with worker processes and memory per parked run, from the benchmarks that measure them.

``bench/claims.py --workers 1,2,4 --repeat 3`` (claim throughput on PostgreSQL with
1, 2 and 4 worker processes, the median of three rounds) and ``bench/memory.py
--quick`` (RSS per run parked in a long tool call) are run as they are, as
subprocesses with leaseward's interpreter; compare.py prints their summary figures
beside its own. claims.py writes JSON to ``--json`` and memory.py to
``--results-dir``, both in a temporary directory here. A call that fails yields why,
and the report goes on. Standard library only.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from systems import REPO, last_line

__all__ = ["CLAIM_ROUNDS", "claim_growth", "claim_rows", "claims", "memory", "print_scaling"]

CLAIM_ROUNDS = 3
"""Rounds of claims.py's measurements, each row the median: as the matrix's repetitions,
since two worker counts on two shared cores differ by less than one measurement moves."""


def run(
    argv: list[str], timeout: float
) -> tuple[subprocess.CompletedProcess[str] | None, str | None, float]:
    started = time.perf_counter()
    try:
        done = subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}", time.perf_counter() - started
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        return done, f"exit {done.returncode}: {last_line(done.stderr or done.stdout)}", seconds
    return done, None, seconds


def claims(python: Path, pg_url: str, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="leaseward-peers-claims-") as tmp:
        results = Path(tmp) / "claims.json"
        argv = [
            str(python),
            "bench/claims.py",
            "--workers",
            "1,2,4",
            "--repeat",
            str(CLAIM_ROUNDS),
            "--store",
            pg_url,
        ]
        _, error, seconds = run([*argv, "--json", str(results)], timeout)
        measurements: list[dict[str, Any]] = []
        if error is None:
            try:
                measurements = json.loads(results.read_text())["measurements"]
            except (OSError, ValueError, KeyError) as exc:
                error = f"could not read its results: {exc}"
    if error is None and not measurements:
        error = "it measured nothing"
    rows = claim_rows(measurements)
    return {"command": " ".join(argv[1:]), "seconds": seconds, "error": error, "rows": rows}


def claim_rows(measurements: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """claims.py's measurements (its ``--json``: each the median of its rounds) as the
    report shows them."""
    return [
        {
            "workers": m["workers"],
            "batch": m["batch"],
            "runs": m["runs"],
            "claimed": m["claimed"],
            "claims": m["claims"],
            "seconds": round(m["seconds"], 3),
            "runs_per_second": round(m["runs_per_second"]),
            "runs_per_second_min": round(m["runs_per_second_min"]),
            "runs_per_second_max": round(m["runs_per_second_max"]),
            "claims_per_second": round(m["claims_per_second"]),
            "vs_one_worker": round(m["vs_one_worker"], 2),
            "double": m["double_claims"],
            "busy": None if m["busy"] is None else round(m["busy"], 2),
            "worker_us_per_run": (
                None if m["worker_cpu_per_run"] is None else round(m["worker_cpu_per_run"] * 1e6, 1)
            ),
        }
        for m in measurements
    ]


def memory(python: Path, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="leaseward-peers-memory-") as tmp:
        argv = [str(python), "bench/memory.py", "--quick", "--results-dir", tmp]
        _, error, seconds = run(argv, timeout)
        found: dict[str, Any] = {"command": "bench/memory.py --quick", "seconds": seconds}
        # A quick run writes its timestamped file only.
        written = sorted(Path(tmp).glob("memory-2*.json"))
        measurements: list[dict[str, Any]] = []
        if error is None:
            try:
                measurements = json.loads(written[-1].read_text())["measurements"]
            except (OSError, ValueError, KeyError, IndexError) as exc:
                error = f"could not read memory.py's results in {tmp}: {exc!r}"
    found["error"] = error
    found["measurements"] = [
        {
            key: m.get(key)
            for key in (
                "runs",
                "parked",
                "kb_per_run_current",
                "kb_per_run_peak",
                "park_seconds",
                "release_seconds",
                "completed",
                "failed",
            )
        }
        for m in measurements
    ]
    return found


def claim_growth(rows: Sequence[dict[str, Any]]) -> dict[int, list[tuple[int, int, bool]]]:
    """For each batch size, whether claims/s grew from each worker count to the next."""
    by_batch: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_batch.setdefault(row["batch"], []).append(row)
    growth: dict[int, list[tuple[int, int, bool]]] = {}
    for batch, same in by_batch.items():
        same.sort(key=lambda row: row["workers"])
        growth[batch] = [
            (fewer["workers"], more["workers"], more["runs_per_second"] > fewer["runs_per_second"])
            for fewer, more in itertools.pairwise(same)
        ]
    return growth


def print_scaling(found: dict[str, Any]) -> None:
    print("scaling and parked runs (bench/claims.py, bench/memory.py, run as they are)")
    result = found.get("claims")
    if result is None:
        print(f"  claims: not run ({found.get('claims_skipped', 'not asked')})")
    elif result["error"]:
        print(f"  claims: FAILED: {result['error']}")
    if result:
        for row in result["rows"]:
            print(
                f"  claims, {row['workers']} worker(s), batch {row['batch']:>2}: "
                f"{row['runs_per_second']:>7} runs/s "
                f"({row['runs_per_second_min']}-{row['runs_per_second_max']}), "
                f"{row['claims_per_second']:>6} claims/s, "
                f"{row['vs_one_worker']:.2f}x one worker, double claims {row['double']}"
                + ("" if row.get("busy") is None else f", machine {row['busy']:.0%} busy")
                + (
                    ""
                    if row.get("worker_us_per_run") is None
                    else f", workers' CPU {row['worker_us_per_run']} µs a run"
                )
            )
        busy = {(row["batch"], row["workers"]): row.get("busy") for row in result["rows"]}
        for batch, steps in claim_growth(result["rows"]).items():
            shown = ", ".join(
                f"{fewer} to {more}: {'ok' if grew else 'MISS'}"
                + (
                    ""
                    if grew or busy.get((batch, fewer)) is None
                    else f" (machine {busy[(batch, fewer)]:.0%} busy with {fewer})"
                )
                for fewer, more, grew in steps
            )
            print(f"  claims grow with more workers (target), batch {batch:>2}: {shown}")
    result = found.get("memory")
    if result is None:
        print("  memory: not run")
    elif result["error"]:
        print(f"  memory: FAILED: {result['error']}")
    for m in result["measurements"] if result else []:
        if m.get("failed") or m.get("kb_per_run_current") is None:
            print(f"  memory, N={m.get('runs')}: no figure (failed or not all parked)")
            continue
        print(
            f"  memory, N={m['runs']} parked runs: {m['kb_per_run_current']:.1f} KB/run "
            f"(current RSS), {m['kb_per_run_peak']:.1f} KB/run (peak); parked in "
            f"{m['park_seconds']:.2f} s, released and finished in {m['release_seconds']:.2f} s"
        )
    print()
