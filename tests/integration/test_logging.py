"""leaseward embedded in an application: silent unless the application's ``logging``
configuration asks for its events, and then on the application's handlers.

Each case is a fresh process (embedded_host.py), since what is tested is what a
process that never configured logging or structlog does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
HOST = Path(__file__).with_name("embedded_host.py")
TIMEOUT_SECONDS = 60.0
# embedded_host.py's record format: "LEVEL logger message".
RECORD = re.compile(r"(?P<level>[A-Z]+) (?P<logger>\S+) (?P<message>.*)")


@attrs.frozen
class Output:
    stdout: str
    stderr: str

    def records(self) -> list[tuple[str, str, str]]:
        """(level, logger, message) of every line on stderr."""
        found = []
        for line in self.stderr.splitlines():
            matched = RECORD.fullmatch(line)
            assert matched, f"not a record: {line!r}"
            found.append((matched["level"], matched["logger"], matched["message"]))
        return found


def run_host(db_url: str, setup: str, **env: str) -> Output:
    done = subprocess.run(
        [sys.executable, str(HOST), db_url, setup],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    return Output(done.stdout, done.stderr)


def test_an_application_that_configures_nothing_sees_nothing(db_url: str) -> None:
    assert run_host(db_url, "nothing") == Output("", "")


def test_a_warning_goes_to_stderr_through_pythons_last_resort_never_to_stdout(
    db_url: str,
) -> None:
    out = run_host(db_url, "nothing", FAIL="1")
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    # What the tool raised, at ERROR, with its traceback down to the tool's own line.
    assert lines[0].startswith("tool.raised run_id=")
    assert "tool='broken' call_id='call-1'" in lines[0]
    assert "error='RuntimeError: the tool is broken'" in lines[0]
    assert lines[1] == "Traceback (most recent call last):"
    assert 'raise RuntimeError("the tool is broken")' in out.stderr
    assert lines[-2] == "RuntimeError: the tool is broken"
    # Then what became of the attempt, and nothing else.
    assert lines[-1].startswith("run.attempt_failed run_id=")
    assert "error='RuntimeError: the tool is broken'" in lines[-1]
    assert sum(not line.startswith((" ", "Traceback", "RuntimeError")) for line in lines) == 2


def test_basic_config_at_debug_shows_every_event_on_the_applications_handler(
    db_url: str,
) -> None:
    out = run_host(db_url, "basic")
    assert out.stdout == ""
    ours = [r for r in out.records() if r[1].startswith("leaseward.")]
    by_event = {(level, logger, message.split(" ", 1)[0]) for level, logger, message in ours}
    assert {
        ("INFO", "leaseward.supervisor", "run.claimed"),
        ("INFO", "leaseward.run", "step.recorded"),
        ("INFO", "leaseward.run", "card.charged"),
        ("INFO", "leaseward.run", "run.settled"),
        ("DEBUG", "leaseward.persister", "persister.committed"),
    } <= by_event
    charges = [m for _, _, m in ours if m.startswith("step.recorded") and "tool='charge'" in m]
    # Five runs, each with the intent and the outcome of its one write.
    assert len(charges) == 10
    assert all("effect='non_idempotent_write'" in m for m in charges)
    assert sum("status='started'" in m for m in charges) == 5
    assert sum("status='succeeded'" in m for m in charges) == 5
    # The run's context is bound, and so is what the application bound with contextvars.
    assert all(
        re.search(r"run_id='[0-9a-f-]{36}' epoch=1 worker_id='[^']+' agent='payer'", m)
        for m in charges
    )
    assert all("host_request='req-7'" in m for _, _, m in ours)


def test_a_handler_on_the_leaseward_logger_at_info_gets_info_and_above(db_url: str) -> None:
    out = run_host(db_url, "leaseward-info")
    assert out.stdout == ""
    records = out.records()
    assert records
    assert {level for level, _, _ in records} == {"INFO"}
    assert all(logger.startswith("leaseward.") for _, logger, _ in records)
    steps = [m for _, _, m in records if m.startswith("step.recorded")]
    # Per run: provider, write intent, write outcome, provider.
    assert len(steps) == 5 * 4


def test_importing_leaseward_configures_neither_logging_nor_structlog() -> None:
    probe = (
        "import logging, structlog, leaseward, leaseward.cli, leaseward.daemon\n"
        "assert not structlog.is_configured()\n"
        "assert logging.getLogger().handlers == []\n"
        "assert logging.getLogger('leaseward').handlers == []\n"
        "assert logging.getLogger('leaseward').level == logging.NOTSET\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
