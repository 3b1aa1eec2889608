"""compare.py's figures: medians over the repetitions, the ratios and targets, the tables.

Standard library only. Every figure here is computed from the workloads' JSON
lines of the same invocation: a median with its min and max over the good
repetitions, and each ratio the quotient of two such medians.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from systems import BY_NAME, LOOP, Outcome, System

__all__ = [
    "LOOP_TARGET",
    "PEER_TARGET",
    "PG_TARGET",
    "RAW_BATCHED_TARGET",
    "RAW_MODES",
    "TARGET_LEVELS",
    "print_collector",
    "print_latency",
    "print_loops",
    "print_matrix",
    "print_pg",
    "print_python_speed",
    "print_ratios",
    "ratios",
    "summarize",
    "summarize_loops",
    "summarize_raw",
]

PEER_TARGET = 10.0  # leaseward steps/s over each peer's, at the target levels
RAW_BATCHED_TARGET = 0.20  # leaseward journal rows/s over raw SQLite, 100 rows per commit
TARGET_LEVELS = (100, 1000)
PG_TARGET = 1.0  # leaseward on PostgreSQL over its SQLite figure, one worker process
LOOP_TARGET = 1.0  # a submit loop beside busy runs over raw SQLite's one commit per row
OURS = ("leaseward-read", "leaseward-write")
PG_OURS = ("leaseward-read-pg", "leaseward-write-pg")
PEERS = ("dbos", "langgraph")
RAW_MODES = ("single", "batched", "run_row")


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def good(outcomes: Sequence[Outcome], name: str, level: int | None = None) -> list[dict[str, Any]]:
    return [
        o.result
        for o in outcomes
        if o.system == name
        and (level is None or o.concurrency == level)
        and o.result is not None
        and o.error is None
    ]


def failed(outcomes: Sequence[Outcome], name: str, level: int | None = None) -> int:
    return sum(
        1
        for o in outcomes
        if o.system == name and (level is None or o.concurrency == level) and o.error is not None
    )


def summarize(
    outcomes: Sequence[Outcome], systems: Sequence[System], levels: Sequence[int]
) -> list[dict[str, Any]]:
    """Per system and N: medians and ranges of steps/s, rows/s, seconds and the waits."""
    summary: list[dict[str, Any]] = []
    for system in systems:
        for level in levels:
            results = good(outcomes, system.name, level)
            entry: dict[str, Any] = {
                "system": system.name,
                "concurrency": level,
                "samples": len(results),
                "failed": failed(outcomes, system.name, level),
            }
            if results:
                entry.update(
                    steps_per_second=spread([r["steps_per_second"] for r in results]),
                    rows_per_second=spread([r["rows_per_second"] for r in results]),
                    seconds=spread([r["seconds"] for r in results]),
                    rows_per_run=statistics.median(r["rows_per_run"] for r in results),
                    steps_per_run=results[0]["steps_per_run"],
                    wait_p50_ms=spread([r["wait"]["p50_ms"] for r in results]),
                    wait_p99_ms=spread([r["wait"]["p99_ms"] for r in results]),
                    wait_what=results[0]["wait"]["what"],
                )
                if "gc_seconds" in results[0]:
                    entry.update(gc_share=spread([r["gc_seconds"] / r["seconds"] for r in results]))
            summary.append(entry)
    return summary


def summarize_raw(outcomes: Sequence[Outcome]) -> dict[str, Any] | None:
    results = good(outcomes, "raw")
    if not results:
        return None
    found: dict[str, Any] = {"samples": len(results), "failed": failed(outcomes, "raw")}
    for mode in RAW_MODES:
        found[mode] = {
            "rows_per_commit": results[0][mode]["rows_per_commit"],
            "rows_per_second": spread([r[mode]["rows_per_second"] for r in results]),
            "commit_p50_ms": spread([r[mode]["commit_p50_ms"] for r in results]),
            "commit_p99_ms": spread([r[mode]["commit_p99_ms"] for r in results]),
            "row_bytes": statistics.median(r[mode]["row_bytes"] for r in results),
        }
    return found


def summarize_loops(outcomes: Sequence[Outcome], systems: Sequence[System]) -> list[dict[str, Any]]:
    loops: list[dict[str, Any]] = []
    for system in systems:
        if system.kind != LOOP:
            continue
        results = good(outcomes, system.name)
        entry: dict[str, Any] = {
            "system": system.name,
            "samples": len(results),
            "failed": failed(outcomes, system.name),
        }
        if results:
            entry.update(
                background_runs=results[0]["background_runs"],
                submits_per_second=spread([r["submits_per_second"] for r in results]),
                submit_p50_ms=spread([r["wait"]["p50_ms"] for r in results]),
                submit_p99_ms=spread([r["wait"]["p99_ms"] for r in results]),
                background_running_at_end=min(r["background_running_at_end"] for r in results),
            )
        loops.append(entry)
    return loops


def median_of(
    summary: Sequence[dict[str, Any]], name: str, level: int, key: str = "steps_per_second"
) -> float | None:
    for entry in summary:
        if entry["system"] == name and entry["concurrency"] == level and entry["samples"]:
            value: float = entry[key]["median"]
            return value
    return None


def quotient(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def ratios(
    summary: Sequence[dict[str, Any]], raw: dict[str, Any] | None, levels: Sequence[int]
) -> list[dict[str, Any]]:
    """Per N: leaseward over each peer (steps/s) and leaseward's journal rows/s over raw
    SQLite, each with its target where there is one and whether it holds."""
    batched = raw["batched"]["rows_per_second"]["median"] if raw else None
    single = raw["single"]["rows_per_second"]["median"] if raw else None
    found: list[dict[str, Any]] = []
    for level in levels:
        targeted = level in TARGET_LEVELS

        def add(name: str, value: float | None, target: float | None, level: int = level) -> None:
            found.append(
                {
                    "concurrency": level,
                    "ratio": name,
                    "value": value,
                    "target": target,
                    "holds": None if value is None or target is None else value >= target,
                }
            )

        for ours in OURS:
            for peer in PEERS:
                add(
                    f"{ours}/{peer}",
                    quotient(median_of(summary, ours, level), median_of(summary, peer, level)),
                    PEER_TARGET if targeted else None,
                )
        for ours in OURS:
            rows = median_of(summary, ours, level, "rows_per_second")
            add(
                f"{ours} journal/raw batched",
                quotient(rows, batched),
                RAW_BATCHED_TARGET if targeted else None,
            )
            add(f"{ours} journal/raw single", quotient(rows, single), None)
        add(
            "leaseward-read/leaseward-no-group-commit",
            quotient(
                median_of(summary, "leaseward-read", level),
                median_of(summary, "leaseward-no-group-commit", level),
            ),
            None,
        )
    return found


def label(name: str) -> str:
    return BY_NAME[name].label if name in BY_NAME else name


def figure(entry: dict[str, Any], key: str, digits: int = 0) -> str:
    if not entry.get("samples"):
        return "failed" if entry.get("failed") else "-"
    value = entry[key]
    return f"{value['median']:.{digits}f} ({value['min']:.{digits}f}-{value['max']:.{digits}f})"


def print_matrix(title: str, summary: Sequence[dict[str, Any]]) -> None:
    if not summary:
        return
    width = max(len(label(e["system"])) for e in summary)
    header = (
        f"{'system':<{width}} {'N':>5} {'steps/s median (min-max)':>25} "
        f"{'rows/s median (min-max)':>25} {'rows/run':>8} {'s median':>8} {'good':>5}"
    )
    print(title)
    print(header)
    print("-" * len(header))
    for entry in summary:
        samples = entry["samples"]
        rows_per_run = f"{entry['rows_per_run']:.0f}" if samples else "-"
        seconds = f"{entry['seconds']['median']:.2f}" if samples else "-"
        print(
            f"{label(entry['system']):<{width}} {entry['concurrency']:>5} "
            f"{figure(entry, 'steps_per_second'):>25} {figure(entry, 'rows_per_second'):>25} "
            f"{rows_per_run:>8} {seconds:>8} {samples:>3}/{samples + entry['failed']}"
        )
    print()


def print_raw(raw: dict[str, Any] | None) -> None:
    if raw is None:
        print("raw SQLite limits: not measured\n")
        return
    print(
        "raw SQLite limits (WAL, synchronous=FULL, a fresh file; once per repetition): what "
        "one connection commits with no runtime around it; higher is faster"
    )
    for mode in RAW_MODES:
        m = raw[mode]
        rps = m["rows_per_second"]
        what = (
            "a run row per commit, leaseward's schema"
            if mode == "run_row"
            else f"{m['rows_per_commit']:>3} row(s) per commit"
        )
        print(
            f"  {what}: {rps['median']:8.0f} rows/s "
            f"({rps['min']:.0f}-{rps['max']:.0f}); one commit p50 "
            f"{m['commit_p50_ms']['median']:.2f} ms, p99 {m['commit_p99_ms']['median']:.2f} ms; "
            f"{m['row_bytes']:.0f}-byte JSON"
        )
    print()


def print_ratios(found: Sequence[dict[str, Any]], raw: dict[str, Any] | None) -> None:
    print_raw(raw)
    if not found:
        return
    names = list(dict.fromkeys(r["ratio"] for r in found))
    levels = list(dict.fromkeys(r["concurrency"] for r in found))
    by_key = {(r["ratio"], r["concurrency"]): r for r in found}
    width = max(len(name) for name in names)
    print(
        "ratios of medians, per N: leaseward's figure over the other's, so above 1x (or 100%) "
        "where leaseward is faster\n"
        f"(targets: >= {PEER_TARGET:g}x each peer, journal >= "
        f"{RAW_BATCHED_TARGET:.0%} of raw batched, at N = "
        f"{', '.join(map(str, TARGET_LEVELS))}; 'ok'/'MISS' where a target applies)"
    )
    header = f"{'ratio':<{width}} " + " ".join(f"{'N=' + str(level):>15}" for level in levels)
    print(header)
    print("-" * len(header))
    for name in names:
        cells = []
        for level in levels:
            r = by_key[(name, level)]
            if r["value"] is None:
                cells.append("-")
                continue
            shown = f"{r['value']:.0%}" if "raw" in name else f"{r['value']:.2f}x"
            if r["holds"] is not None:
                shown += " ok" if r["holds"] else " MISS"
            cells.append(shown)
        print(f"{name:<{width}} " + " ".join(f"{cell:>15}" for cell in cells))
    print()


def print_collector(summary: Sequence[dict[str, Any]]) -> None:
    rows = [e for e in summary if e["samples"] and "gc_share" in e]
    if not rows:
        return
    print(
        "garbage collection in leaseward's process, share of the timed wall (median, min-max); "
        "lower is better"
    )
    for name in dict.fromkeys(e["system"] for e in rows):
        cells = [
            f"N={e['concurrency']} {e['gc_share']['median']:.1%} "
            f"({e['gc_share']['min']:.1%}-{e['gc_share']['max']:.1%})"
            for e in rows
            if e["system"] == name
        ]
        print(f"  {label(name)}: " + ", ".join(cells))
    print()


def print_latency(summary: Sequence[dict[str, Any]]) -> None:
    rows = [e for e in summary if e["samples"]]
    if not rows:
        return
    width = max(len(label(e["system"])) for e in rows)
    print(
        "wait for one durable write, ms: median over the repetitions of each one's p50 and p99; "
        "lower is better"
    )
    header = f"{'system':<{width}} {'N':>5} {'p50 (min-max)':>22} {'p99 (min-max)':>22}"
    print(header)
    print("-" * len(header))
    for e in rows:
        print(
            f"{label(e['system']):<{width}} {e['concurrency']:>5} "
            f"{figure(e, 'wait_p50_ms', 2):>22} {figure(e, 'wait_p99_ms', 2):>22}"
        )
    for name in dict.fromkeys(e["system"] for e in rows):
        what = next(e["wait_what"] for e in rows if e["system"] == name)
        print(f"  {label(name)}: {what}")
    print()


def print_loops(
    loops: Sequence[dict[str, Any]], raw: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The submit loops, each beside the raw rates; returns, for each, its share of raw
    SQLite's one-commit-per-row rate and whether the target holds (a loop beside busy
    runs has one; a loop alone has none)."""
    if not loops:
        return []
    single = raw["single"]["rows_per_second"]["median"] if raw else None
    run_row = raw["run_row"]["rows_per_second"]["median"] if raw else None
    found: list[dict[str, Any]] = []
    print(
        "submit loop: one task awaiting rt.submit(...) one after another (SQLite); more "
        f"submits/s and a shorter submit are better; target: beside busy runs, >= "
        f"{LOOP_TARGET:.0%} of raw one-commit-per-row"
    )
    for loop in loops:
        if not loop["samples"]:
            print(f"  {label(loop['system'])}: failed")
            continue
        rate = loop["submits_per_second"]["median"]
        share = rate / single if single else None
        holds = None if share is None or not loop["background_runs"] else share >= LOOP_TARGET
        found.append({"system": loop["system"], "of_raw_single": share, "holds": holds})
        beside = (
            f"; {rate / single:.1%} of raw one-commit-per-row ({single:.0f} rows/s), "
            f"{rate / run_row:.1%} of a run row committed alone ({run_row:.0f} rows/s)"
            if single and run_row
            else ""
        )
        verdict = "" if holds is None else (" ok" if holds else " MISS")
        print(
            f"  {label(loop['system'])}: one submit p50 {loop['submit_p50_ms']['median']:.2f} ms, "
            f"p99 {loop['submit_p99_ms']['median']:.2f} ms; {rate:.0f} submits/s "
            f"({loop['submits_per_second']['min']:.0f}-{loop['submits_per_second']['max']:.0f})"
            f"{beside}{verdict}"
        )
    print()
    return found


def print_pg(
    pg: Sequence[dict[str, Any]], sqlite: Sequence[dict[str, Any]], level: int
) -> list[dict[str, Any]]:
    """The PostgreSQL table and its ratios (PG/SQLite, leaseward over each PG peer); the
    target, leaseward's PG/SQLite at least PG_TARGET, marked 'ok'/'MISS'."""
    print_matrix(
        f"PostgreSQL, N={level}, one worker process, a fresh database each: steps/s and rows/s, "
        "median (min-max); higher is better",
        pg,
    )
    found: list[dict[str, Any]] = []
    print(
        "ratios of medians, the first's steps/s over the second's: "
        "above 1x where the first is faster"
    )
    pairs = [
        ("leaseward-read-pg", "leaseward-read", "PG/SQLite"),
        ("leaseward-write-pg", "leaseward-write", "PG/SQLite"),
        ("dbos-pg", "dbos", "PG/SQLite"),
        ("leaseward-read-pg", "dbos-pg", "on PG"),
        ("leaseward-write-pg", "dbos-pg", "on PG"),
        ("leaseward-read-pg", "procrastinate", "on PG, steps/s over jobs/s"),
        ("leaseward-write-pg", "procrastinate", "on PG, steps/s over jobs/s"),
    ]
    unmeasured = not any(e["concurrency"] == level for e in sqlite)
    for top, bottom, what in pairs:
        bottom_summary = sqlite if what == "PG/SQLite" else pg
        value = quotient(median_of(pg, top, level), median_of(bottom_summary, bottom, level))
        targeted = what == "PG/SQLite" and top in PG_OURS
        holds = value >= PG_TARGET if targeted and value is not None else None
        found.append({"ratio": f"{top}/{bottom}", "what": what, "value": value, "holds": holds})
        shown = f"{value:.2f}x" if value is not None else "-"
        if value is None and what == "PG/SQLite" and unmeasured:
            shown += f" (SQLite was not measured at N={level}: add {level} to --levels)"
        verdict = "" if holds is None else (" ok" if holds else " MISS")
        print(f"  {top}/{bottom} ({what}): {shown}{verdict}")
    print()
    return found


def print_python_speed(samples: Sequence[float | None]) -> dict[str, Any]:
    """The machine's Python speed over the run (python_speed.py, ns an iteration): its
    samples and their spread, for the JSON."""
    found = [sample for sample in samples if sample is not None]
    if not found:
        print("python speed: not measured")
        return {"samples": list(samples)}
    summary = spread(found)
    print(
        f"python speed (bench/peers/python_speed.py with leaseward's interpreter, before each "
        f"repetition and after the last; lower is faster): {summary['median']:.0f} ns an "
        f"iteration ({summary['min']:.0f}-{summary['max']:.0f}), {len(found)} samples"
    )
    print()
    return {"samples": list(samples), **summary}
