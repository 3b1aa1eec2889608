"""Helpers for the acceptance tests: the real ``leaseward`` executable as subprocesses,
and the one state no command can make: a worker that vanished in the middle of a write.

Every daemon a test starts goes through a :class:`DaemonPool` (the ``daemons``
fixture of conftest.py, or one a module fixture closes in its ``finally``), which
kills and reaps it whatever happened. Every CLI call has a timeout (``subprocess.run`` kills the
child when it expires). Wait loops poll every ``POLL_SECONDS`` and give up after a
bounded time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest

from leaseward import ProviderReply, StepKind, StepStatus, ToolCall, ToolEffect
from leaseward.runtime.commits import Stored
from leaseward.runtime.conversation import reply_to_json
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.journal import StepWrite
from leaseward.storage import BatchItem, open_store
from tests.acceptance.demo_app import CHARGE_CALL_ID

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
POLL_SECONDS = 0.05
CLI_TIMEOUT_SECONDS = 30.0
# Short leases and quick passes, so that recovery happens within a test's patience.
FAST_DAEMON_FLAGS = (
    "--lease-seconds",
    "1",
    "--reap-interval-seconds",
    "0.1",
    "--poll-interval-seconds",
    "0.05",
    "--log-format",
    "json",
)

T = TypeVar("T")

# Every command that works on runs in a store, with the arguments it needs to go that far.
OPERATOR_COMMANDS = [
    ("runs",),
    ("show", "x"),
    ("submit", "payer", "--input", "{}"),
    ("cancel", "x"),
    ("approvals",),
    ("approve", "x"),
    ("reject", "x", "--reason", "no"),
    ("reply", "x", "--input", "1"),
    ("resolve", "x", "--applied"),
    ("redrive", "x"),
    ("purge", "--finished-before", "1s"),
    ("purge", "--finished-before", "1s", "--dry-run"),
    ("workers",),
    ("reap", "--once"),
    ("dead-letters",),
]


def _find_leaseward() -> Path:
    for candidate in (Path(sys.executable).parent / "leaseward", ROOT / ".venv/bin/leaseward"):
        if candidate.exists():
            return candidate
    pytest.skip("the leaseward console script is not installed", allow_module_level=True)


LEASEWARD = _find_leaseward()


def base_env(**extra: str) -> dict[str, str]:
    """The environment of a child: ours without LEASEWARD_* or DEMO_* variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEWARD_", "DEMO_"))}
    env["PYTHONUNBUFFERED"] = "1"
    # The executable runs the source tree under test, not a copy installed earlier.
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def sqlite_url(path: Path, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"sqlite:///{path}" + (f"?{query}" if query else "")


@attrs.frozen
class Result:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def describe(self) -> str:
        return (
            f"leaseward {' '.join(self.args)} -> {self.returncode}\n"
            f"stdout: {self.stdout!r}\nstderr: {self.stderr!r}"
        )


def leaseward(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = CLI_TIMEOUT_SECONDS,
    preexec_fn: Callable[[], None] | None = None,
) -> Result:
    """Run the executable once and return what it did."""
    done = subprocess.run(
        [str(LEASEWARD), *args],
        env=env if env is not None else base_env(),
        cwd=cwd or HERE,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=preexec_fn,
        check=False,
    )
    return Result(tuple(args), done.returncode, done.stdout, done.stderr)


def ok(*args: str, **kwargs: Any) -> Result:
    """Run a command that must succeed."""
    result = leaseward(*args, **kwargs)
    assert result.returncode == 0, result.describe()
    return result


def assert_one_line_error(result: Result, code: int, *fragments: str) -> None:
    """An error for people: exit ``code``, one line on stderr, no traceback, nothing on stdout."""
    assert result.returncode == code, result.describe()
    assert "Traceback" not in result.stderr, result.describe()
    assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1, result.describe()
    assert result.stderr.startswith("leaseward"), result.describe()
    assert result.stdout == "", result.describe()
    for fragment in fragments:
        assert fragment in result.stderr, result.describe()


def show(url: str, run_id: str) -> dict[str, Any]:
    result: dict[str, Any] = ok("show", run_id, "--json", "--store", url).json()
    return result


def wait_until(what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """Poll ``probe`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL_SECONDS)


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines of a file written so far (a line being written is not one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file of a directory and its bytes: what "changes nothing" is checked against."""
    if not directory.exists():
        return {}
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


async def interrupt_a_charge(url: str, started_seconds_ago: float) -> str:
    """A payer run whose worker stored the intent of its charge, then vanished."""
    store = await open_store(url, must_exist=True)
    try:
        (run,) = await store.claim_runs("acc-vanished", 1, 0.05, ["payer"])
        reply = ProviderReply(
            tool_calls=[ToolCall("charge", {"amount_cents": 500}, CHARGE_CALL_ID)]
        )
        turn = StepWrite(
            seq=0,
            kind=StepKind.PROVIDER,
            status=StepStatus.SUCCEEDED,
            output_json=dump_json(reply_to_json(reply)),
        )
        intent = StepWrite(
            seq=1,
            kind=StepKind.TOOL,
            status=StepStatus.STARTED,
            tool="charge",
            call_id=CHARGE_CALL_ID,
            effect=ToolEffect.NON_IDEMPOTENT_WRITE,
            idempotency_key="key-of-the-charge",
            arguments_json='{"amount_cents":500}',
            started_at=time.time() - started_seconds_ago,
        )
        (outcome,) = await store.commit_batch(
            [BatchItem(run.id, run.epoch, (turn, intent), lease_seconds=0.05)]
        )
        assert isinstance(outcome, Stored)
    finally:
        await store.aclose()
    return run.id


class Daemon:
    """One ``leaseward daemon`` process; its stderr (the JSON log) goes to a file."""

    def __init__(
        self,
        url: str,
        log_path: Path,
        *,
        worker_id: str,
        env: dict[str, str],
        flags: tuple[str, ...],
        app: str = "demo_app:app",
    ) -> None:
        self.url = url
        self.worker_id = worker_id
        self.log_path = log_path
        self._log_file = log_path.open("wb")
        args = [
            str(LEASEWARD),
            "daemon",
            "--app",
            app,
            "--store",
            url,
            "--worker-id",
            worker_id,
            *FAST_DAEMON_FLAGS,
            *flags,
        ]
        self.process = subprocess.Popen(
            args,
            cwd=HERE,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log_file,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> list[dict[str, Any]]:
        """The daemon's log lines so far, each parsed (every line must be JSON)."""
        return read_lines(self.log_path)

    def events(self, name: str, **fields: Any) -> list[dict[str, Any]]:
        return [
            line
            for line in self.log()
            if line.get("event") == name and all(line.get(k) == v for k, v in fields.items())
        ]

    def wait_for(self, name: str, timeout: float = 10.0, **fields: Any) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            found = self.events(name, **fields)
            if found:
                return found[0]
            if self.process.poll() is not None:
                pytest.fail(
                    f"the daemon exited ({self.process.returncode}) before logging {name}:\n"
                    + self.log_path.read_text()
                )
            return None

        return wait_until(f"{name} {fields} in {self.worker_id}'s log", probe, timeout)

    def started(self) -> Daemon:
        self.wait_for("daemon.started")
        return self

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM (drain) and wait for the exit."""
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def stop_cleanly(self, timeout: float = 15.0) -> None:
        """SIGTERM, and the daemon drains and exits 0; otherwise fail with its log."""
        code = self.stop(timeout)
        if code != 0:
            pytest.fail(f"the daemon exited {code} on SIGTERM:\n" + self.log_path.read_text())

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        self._log_file.close()


class DaemonPool:
    """Starts daemons and guarantees that every one is killed and reaped at the end."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._started: list[Daemon] = []

    def start(
        self,
        url: str,
        *,
        worker_id: str,
        flags: tuple[str, ...] = (),
        wait: bool = True,
        app: str = "demo_app:app",
        **env: str,
    ) -> Daemon:
        daemon = Daemon(
            url,
            self._directory / f"{worker_id}.log",
            worker_id=worker_id,
            env=base_env(**env),
            flags=flags,
            app=app,
        )
        self._started.append(daemon)
        return daemon.started() if wait else daemon

    def close(self) -> None:
        for daemon in self._started:
            daemon.kill()
