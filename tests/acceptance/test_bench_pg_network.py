"""bench/pg_network.py records which commit, machine and moment made its figures.

docs/performance.md quotes this benchmark's figures "at" a commit; without the commit
and the date in its JSON nobody could tell which run a figure came from. It compares
no figure with a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def test_a_tiny_run_writes_its_commit_date_and_figures(tmp_path: Path, pg_server: Any) -> None:
    pg_server.settle()
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "pg_network.py"),
            "--pg-url",
            pg_server.admin_url,
            "--delay-ms",
            "0",
            "--concurrency",
            "2",
            "--steps",
            "1",
            "--repetitions",
            "1",
            "--results-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    [stamped] = tmp_path.glob("pg-network-2*.json")
    document = json.loads(stamped.read_text())
    assert json.loads((tmp_path / "pg-network-latest.json").read_text()) == document
    assert document["started_utc"] in stamped.name
    assert document["environment"]["revision"] not in ("", "unknown")
    assert document["command"][0] == "pg_network.py"
    for cell in ("0 ms", "SQLite"):
        for kind in ("read", "write"):
            [rate] = document["measured"][cell][kind]
            assert document["summary"][cell][kind]["median"] == rate > 0
    assert f"results: {stamped}" in done.stdout
