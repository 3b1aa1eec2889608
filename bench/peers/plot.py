"""Plot a compare.py result: durable tool steps per second against concurrency.

    bench/.venv-peers/bin/python bench/peers/plot.py bench/results/peers-latest.json \
        bench/results/peers.png

One line per SQLite system (median over the repetitions, bars from min to
max), both axes on a log scale, and the raw SQLite limits of the same run as
horizontal lines (rows/s with one commit per row and with 100 rows per
commit: a journal row is not a step, so they are ceilings to read against,
not points on the same measure). Needs matplotlib (in the peers' venv).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import ScalarFormatter

STYLE = {
    "leaseward-read": ("leaseward, read tool (group commit)", "tab:blue", "o", "-"),
    "leaseward-write": ("leaseward, write tool (group commit)", "tab:purple", "D", "-"),
    "leaseward-no-group-commit": ("leaseward, read, no group commit", "tab:blue", "o", "--"),
    "dbos": ("DBOS Transact", "tab:orange", "s", "-"),
    "langgraph": ("LangGraph (durability=sync)", "tab:green", "^", "-"),
}


def draw(data: dict[str, Any], out: Path) -> None:
    figure, axes = plt.subplots(figsize=(8, 5), dpi=120)
    systems: list[str] = data["arguments"]["systems"]
    for system in systems:
        entries = sorted(
            (e for e in data["matrix"] if e["system"] == system and e.get("samples")),
            key=lambda e: e["concurrency"],
        )
        if not entries:
            continue
        label, color, marker, line = STYLE.get(system, (system, None, "x", "-"))
        x = [e["concurrency"] for e in entries]
        y = [e["steps_per_second"]["median"] for e in entries]
        below = [e["steps_per_second"]["median"] - e["steps_per_second"]["min"] for e in entries]
        above = [e["steps_per_second"]["max"] - e["steps_per_second"]["median"] for e in entries]
        axes.errorbar(
            x,
            y,
            yerr=[below, above],
            label=label,
            color=color,
            marker=marker,
            linestyle=line,
            capsize=3,
        )
    raw = data.get("raw")
    if raw:
        for mode, style in (("single", ":"), ("batched", "-.")):
            rate = raw[mode]["rows_per_second"]["median"]
            axes.axhline(
                rate,
                color="grey",
                linestyle=style,
                label=f"raw SQLite, {raw[mode]['rows_per_commit']} row(s) per commit "
                f"({rate:.0f} rows/s)",
            )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.xaxis.set_major_formatter(ScalarFormatter())
    axes.yaxis.set_major_formatter(ScalarFormatter())
    levels = sorted({int(level) for level in data["arguments"]["levels"]})
    axes.set_xticks(levels)
    if len(levels) == 1:
        axes.set_xlim(levels[0] / 2, levels[0] * 2)
    axes.set_xlabel("concurrent runs (N)")
    axes.set_ylabel("durable tool steps per second (lines: rows per second)")
    machine = data["machine"]
    peers = data["peers"]["packages"]
    axes.set_title(
        f"{data['arguments']['steps_per_run']} durable steps per run, SQLite WAL "
        f"synchronous=FULL; median of {data['arguments']['repeat']}, bars min-max\n"
        f"{machine['cpus']} CPUs, SQLite {data['leaseward']['sqlite']}, leaseward "
        f"{data['leaseward']['commit']}, dbos {peers.get('dbos')}, "
        f"langgraph {peers.get('langgraph')}",
        fontsize=9,
    )
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a JSON file written by compare.py")
    parser.add_argument("out", type=Path, help="the PNG to write")
    args = parser.parse_args()
    draw(json.loads(args.results.read_text()), args.out)


if __name__ == "__main__":
    main()
