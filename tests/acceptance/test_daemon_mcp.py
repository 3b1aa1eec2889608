"""The daemon serves an agent whose tools come from an MCP server it runs over stdio."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from leaseward.mcp import FENCING_TOKEN_META, IDEMPOTENCY_KEY_META
from tests.acceptance.acceptance_support import (
    ROOT,
    DaemonPool,
    base_env,
    ok,
    read_lines,
    show,
    wait_until,
)

# Listing the server at start launches a Python process with the SDK: slow when loaded.
START_SECONDS = 60.0


def test_the_daemon_runs_an_agent_whose_tools_come_from_an_mcp_server(
    daemons: DaemonPool, url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    daemon = daemons.start(
        url, worker_id="acc-mcp", app="mcp_app:app", wait=False, DEMO_MCP_LEDGER=str(ledger)
    )
    daemon.wait_for("daemon.started", timeout=START_SECONDS)

    run = ok(
        "submit", "clerk", "--input", '"bill"', "--wait", "--json", "--timeout", "25",
        "--store", url,
    ).json()  # fmt: skip
    assert (run["state"], run["result"]) == ("completed", "billed")

    steps = {s["tool"]: s for s in show(url, run["id"])["steps"] if s["kind"] == "tool"}
    assert steps["lookup"]["effect"] == "read_only"
    assert steps["create_invoice"]["effect"] == "non_idempotent_write"
    assert steps["create_invoice"]["source"] == {
        "source": "billing",
        "decided_by": "annotations",
        "annotations": None,
    }
    calls = read_lines(ledger)
    assert [c["tool"] for c in calls] == ["lookup", "create_invoice"]
    invoice = calls[1]["meta"]
    assert invoice[IDEMPOTENCY_KEY_META] == steps["create_invoice"]["idempotency_key"]
    assert invoice[FENCING_TOKEN_META] == steps["create_invoice"]["epoch"]
    daemon.stop_cleanly()


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_the_daemons_log_never_shows_the_url_of_a_server_over_http(
    daemons: DaemonPool, url: str, tmp_path: Path
) -> None:
    """A token in the URL's query reached the log with every request: the HTTP client's
    info line names the URL of each."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.mcp_server", "http", str(port)],
        cwd=ROOT,
        env=base_env(LEDGER=str(tmp_path / "ledger.jsonl")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until("the MCP server", lambda: _accepts(port) or None, timeout=START_SECONDS)
        daemon = daemons.start(
            url,
            worker_id="acc-mcp-http",
            app="mcp_app:app",
            wait=False,
            DEMO_MCP_URL=f"http://127.0.0.1:{port}/mcp?key=s3cret-in-url",
        )
        daemon.wait_for("daemon.started", timeout=START_SECONDS)
        run = ok(
            "submit", "clerk", "--input", '"bill"', "--wait", "--json", "--timeout", "25",
            "--store", url,
        ).json()  # fmt: skip
        assert (run["state"], run["result"]) == ("completed", "billed")
        daemon.stop_cleanly()
    finally:
        server.kill()
        server.wait()
    assert "s3cret-in-url" not in daemon.log_path.read_text()
