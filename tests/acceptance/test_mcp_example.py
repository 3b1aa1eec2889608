"""examples/mcp_agent.py as a user runs it: offline, its MCP server started beside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.acceptance.acceptance_support import ROOT, base_env

RUN_TIMEOUT_SECONDS = 90.0


def test_the_mcp_example_runs_offline_and_shows_who_decided_each_effect(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mcp_agent.py")],
        cwd=tmp_path,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(": completed: A-1 is invoiced and paid")
    assert [line.split(" -> ")[0].strip() for line in lines[1:]] == [
        "order_total: read_only (decided by annotations)",
        "create_invoice: non_idempotent_write (decided by code)",
        "mark_paid: idempotent_write (decided by annotations)",
    ]
    assert (tmp_path / "leaseward-mcp.db").exists()
