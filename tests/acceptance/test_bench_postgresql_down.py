"""A benchmark pointed at a PostgreSQL server that does not answer says so in one line.

Each script that needs the server checks it before measuring anything: without the
check some ended in a traceback, and some wrote a results file (over the committed
``-latest.json``) holding nothing but failed samples, or exited 0.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize(
    "arguments",
    [
        ["claims.py", "--store"],
        ["purge.py", "--finished", "10", "--store"],
        ["steps.py", "--concurrency", "1", "--store"],
        ["memory.py", "--quick", "--store"],
        ["pg_network.py", "--pg-url"],
        ["console.py", "--runs", "200", "--postgres"],
    ],
    ids=lambda arguments: arguments[0],
)
def test_a_server_that_does_not_answer_is_one_line_and_no_results(
    arguments: list[str], tmp_path: Path
) -> None:
    url = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"
    script, *flags = arguments
    writes = ("steps.py", "memory.py", "console.py")
    extra = ["--results-dir", str(tmp_path)] if script in writes else []
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *flags, url, *extra],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )

    assert done.returncode == 1
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("PostgreSQL at 127.0.0.1:"), lines
    assert "does not answer" in lines[0]
    assert list(tmp_path.iterdir()) == []
