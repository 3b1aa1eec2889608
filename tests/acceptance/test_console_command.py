"""``leaseward console`` and ``leaseward daemon --console`` as an operator starts them:
they serve on loopback, refuse to listen further without an operator token, and stop
cleanly on a signal."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.acceptance.acceptance_support import (
    LEASEWARD,
    DaemonPool,
    assert_one_line_error,
    base_env,
    leaseward,
    ok,
    wait_until,
)
from tests.conftest import PgServer

TOKEN = "an-operator-token-long-enough"


@pytest.fixture
def store(url: str) -> str:
    ok("migrate", "--store", url)
    return url


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def served(store: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen(
        [str(LEASEWARD), "console", "--store", store, "--port", "0"],
        env=base_env(LEASEWARD_CONSOLE_TOKEN=TOKEN),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        line = process.stdout.readline()
        assert line.startswith("console at http://127.0.0.1:"), line + process.stderr.read()
        yield process, line.split()[2]
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


@pytest.mark.parametrize(
    ("flags", "env", "fragment"),
    [
        (("--host", "0.0.0.0"), {}, "LEASEWARD_CONSOLE_TOKEN"),
        (("--host", "192.0.2.7"), {"LEASEWARD_CONSOLE_TOKEN": "short"}, "at least 16"),
        (("--port", "70000"), {}, "not a port number"),
        (("--allowed-host", "console.example.com,bad_name"), {}, "'bad_name' is not a host"),
        ((), {"LEASEWARD_CONSOLE_ALLOWED_HOST": "http://x.example"}, "is not a host name"),
    ],
)
def test_a_console_beyond_loopback_without_a_token_or_bad_flags_is_refused(
    store: str, flags: tuple[str, ...], env: dict[str, str], fragment: str
) -> None:
    result = leaseward("console", "--store", store, *flags, env=base_env(**env))
    assert_one_line_error(result, 2, fragment)


def test_the_console_reads_the_variables_the_daemon_console_flags_read(store: str) -> None:
    """One deployment's environment serves the console however it is started."""
    result = leaseward(
        "console",
        "--store",
        store,
        env=base_env(LEASEWARD_CONSOLE_HOST="0.0.0.0", LEASEWARD_CONSOLE_PORT="8788"),
    )
    assert_one_line_error(result, 2, "LEASEWARD_CONSOLE_TOKEN")
    result = leaseward("console", "--store", store, env=base_env(LEASEWARD_CONSOLE_PORT="70000"))
    assert_one_line_error(result, 2, "LEASEWARD_CONSOLE_PORT", "not a port number")


def test_a_console_on_a_missing_store_is_refused(url: str) -> None:
    assert_one_line_error(leaseward("console", "--store", url), 1, "no leaseward store")


def test_a_port_in_use_is_one_clear_error(store: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = leaseward("console", "--store", store, "--port", port)
    assert_one_line_error(result, 2, "cannot serve the console", port)


def test_the_console_serves_on_loopback_and_stops_on_a_signal(
    served: tuple[subprocess.Popen[str], str],
) -> None:
    process, address = served
    assert httpx.get(address + "healthz").text == "ok"
    page = httpx.get(address + "runs")
    assert page.status_code == 200 and "Log in to act" in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=10) == 0


def test_the_daemon_serves_the_console_beside_its_worker_until_drained(
    daemons: DaemonPool, store: str
) -> None:
    port = free_port()
    daemon = daemons.start(
        store,
        worker_id="w1",
        flags=(
            "--console", "--console-port", str(port), "--console-allowed-host", "console.example"
        ),
    )  # fmt: skip
    address = f"http://127.0.0.1:{port}/"
    # Started without LEASEWARD_CONSOLE_TOKEN, its log says the console only reads.
    serving = daemon.wait_for("console.serving", timeout=20)
    assert (serving["url"], serving["read_only"]) == (address, True)
    workers = wait_until(
        "the console lists the worker",
        lambda: httpx.get(address + "api/workers").json(),
        timeout=10,
    )
    assert [w["id"] for w in workers] == ["w1"]
    # Under a name it was given, and no other.
    named = httpx.get(address + "api/workers", headers={"host": f"console.example:{port}"})
    assert named.status_code == 200
    rebound = httpx.get(address + "api/workers", headers={"host": f"evil.example:{port}"})
    assert rebound.status_code == 400 and "evil.example" in rebound.json()["error"]
    assert daemon.stop() == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(address + "healthz")


def test_the_daemon_refuses_a_console_beyond_loopback_without_a_token(store: str) -> None:
    result = leaseward(
        "daemon",
        "--app",
        "demo_app:app",
        "--store",
        store,
        "--console",
        "--console-host",
        "0.0.0.0",
    )
    assert_one_line_error(
        result, 2, "--console-host 0.0.0.0 is reachable", "LEASEWARD_CONSOLE_TOKEN"
    )


def test_the_daemon_refuses_a_console_name_without_its_console(store: str) -> None:
    result = leaseward(
        "daemon", "--app", "demo_app:app", "--store", store,
        "--console-allowed-host", "console.example",
    )  # fmt: skip
    assert_one_line_error(result, 2, "--console-allowed-host tunes --console")


def test_a_daemon_whose_console_port_is_in_use_refuses_before_it_claims_a_run(
    store: str,
) -> None:
    run_id = ok("submit", "greeter", "--input", '"hi"', "--store", store).stdout.strip()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = leaseward(
            "daemon", "--app", "demo_app:app", "--store", store, "--console",
            "--console-port", port,
        )  # fmt: skip
    assert_one_line_error(result, 2, "cannot serve the console", port)
    run = ok("show", run_id, "--json", "--store", store).json()
    assert (run["state"], run["epoch"]) == ("queued", 0)
    assert ok("workers", "--store", store).stdout == "no workers\n"


def test_a_console_whose_server_turns_it_away_logs_each_retry_in_one_line(
    pg_server: PgServer, pg_database: str, tmp_path: Path
) -> None:
    """While the database refuses connections, the driver's pool retries its floor of
    connections every second or so: one line each, not a traceback each."""
    log = tmp_path / "console.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [str(LEASEWARD), "console", "--store", pg_server.url_for(pg_database), "--port", "0"],
            env=base_env(LEASEWARD_LOG_FORMAT="json"),
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    try:
        assert process.stdout is not None
        address = process.stdout.readline().split()[2]
        assert httpx.get(address + "runs").status_code == 200
        pg_server.run(
            f'ALTER DATABASE "{pg_database}" ALLOW_CONNECTIONS false',
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{pg_database}'",
        )
        assert httpx.get(address + "healthz").status_code == 503
        wait_until("the pool's retry", lambda: "asyncpg.pool" in log.read_text(), timeout=10)
    finally:
        pg_server.run(f'ALTER DATABASE "{pg_database}" ALLOW_CONNECTIONS true')
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=10)
    retries = [line for line in log.read_text().splitlines() if "asyncpg.pool" in line]
    assert retries and "Traceback" not in log.read_text(), log.read_text()
    assert all("is not currently accepting connections" in line for line in retries), retries
