"""The daemon as a process: it completes submitted runs, logs JSON, and drains on signals."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.acceptance.acceptance_support import (
    Daemon,
    DaemonPool,
    ok,
    read_lines,
    show,
    wait_until,
)
from tests.acceptance.demo_app import CHARGE_CALL_ID, SLOW_STEPS


def test_submit_wait_completes_a_run_and_the_journal_shows_each_step(
    daemons: DaemonPool, url: str, calls_file: Path
) -> None:
    daemon = daemons.start(url, worker_id="acc-one", DEMO_CALLS_FILE=str(calls_file))

    waited = ok(
        "submit", "payer", "--input", '{"order": "A-1"}', "--wait", "--json", "--timeout", "20",
        "--store", url,
    )  # fmt: skip
    run = waited.json()
    assert run["state"] == "completed"
    assert run["reason"] == "completed"
    assert run["result"] == "done"
    assert run["agent"] == "payer"
    assert (run["epoch"], run["requeues"]) == (1, 0)

    shown = show(url, run["id"])
    assert shown["requests"] == []
    assert {k: v for k, v in shown.items() if k not in ("steps", "requests", "usage")} == run
    # A scripted provider reports no tokens.
    assert shown["usage"] is None
    steps = shown["steps"]
    assert [(s["seq"], s["kind"], s["tool"], s["status"]) for s in steps] == [
        (0, "provider", None, "succeeded"),
        (1, "tool", "charge", "succeeded"),
        (2, "provider", None, "succeeded"),
    ]
    charge = steps[1]
    # The intent (started_at, idempotency key, arguments) and the outcome of one call.
    assert charge["effect"] == "non_idempotent_write"
    assert charge["call_id"] == CHARGE_CALL_ID
    assert charge["arguments"] == {"amount_cents": 500}
    assert charge["output"] == {"charged_cents": 500}
    assert charge["idempotency_key"]
    assert charge["started_at"] <= charge["finished_at"]
    assert charge["resolved_by"] is None
    assert steps[0]["output"]["tool_calls"][0]["name"] == "charge"
    assert steps[2]["output"]["text"] == "done"
    assert all(s["epoch"] == 1 for s in steps)

    calls = read_lines(calls_file)
    assert [(c["run_id"], c["tool"], c["pid"]) for c in calls] == [
        (run["id"], "charge", daemon.pid)
    ]
    assert calls[0]["idempotency_key"] == charge["idempotency_key"]

    # Without --wait: the id, plain or as JSON; the daemon picks it up on its own.
    plain = ok("submit", "greeter", "--input", '"hi"', "--store", url).stdout.strip()
    as_json = ok("submit", "greeter", "--input", '"hi"', "--json", "--store", url).json()["id"]
    for run_id in (plain, as_json):
        daemon.wait_for("run.settled", run_id=run_id, state="completed")

    completed = ok("runs", "--state", "completed", "--json", "--store", url).json()
    assert {r["id"] for r in completed} == {run["id"], plain, as_json}
    assert ok("runs", "--state", "queued", "--json", "--store", url).json() == []
    by_agent = ok("runs", "--agent", "payer", "--json", "--store", url).json()
    assert [r["id"] for r in by_agent] == [run["id"]]
    listing = ok("runs", "--state", "completed", "--store", url).stdout
    assert run["id"] in listing and "completed" in listing
    timeline = ok("show", run["id"], "--store", url).stdout
    assert "charge" in timeline and "non_idempotent_write" in timeline

    daemon.stop_cleanly()
    log = daemon.log()
    assert all(line["worker_id"] == "acc-one" for line in log), log
    events = [line["event"] for line in log]
    # The daemon created the store, and says where, before it started.
    assert events[:2] == ["store.created", "daemon.started"]
    assert (log[0]["level"], log[0]["store"]) == ("info", url.removeprefix("sqlite:///"))
    assert events[-1] == "daemon.stopped"
    assert "daemon.draining" in events
    assert Counter(events)["run.claimed"] == 3
    assert Counter(events)["run.settled"] == 3
    claimed = daemon.events("run.claimed", run_id=run["id"])
    assert claimed[0]["epoch"] == 1


def _naps(calls_file: Path, run_id: str) -> list[dict[str, Any]]:
    return [c for c in read_lines(calls_file) if c["run_id"] == run_id and c["tool"] == "nap"]


def test_sigterm_drains_to_a_step_boundary_and_a_second_daemon_finishes_the_run(
    daemons: DaemonPool, url: str, calls_file: Path, provider_file: Path
) -> None:
    drain_seconds = 5.0
    first = daemons.start(
        url,
        worker_id="acc-drain-1",
        flags=("--drain-seconds", str(drain_seconds)),
        DEMO_NAP_SECONDS="0.4",
        DEMO_CALLS_FILE=str(calls_file),
        DEMO_PROVIDER_FILE=str(provider_file),
    )
    run_id = ok("submit", "slow", "--input", "{}", "--store", url).stdout.strip()
    wait_until("two naps of the first daemon", lambda: len(_naps(calls_file, run_id)) >= 2, 15)

    signalled = time.monotonic()
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=drain_seconds + 5) == 0
    assert time.monotonic() - signalled < drain_seconds

    events = [line["event"] for line in first.log()]
    assert "daemon.draining" in events and events[-1] == "daemon.stopped"
    assert first.events("lease.released", run_id=run_id)
    assert not first.events("run.settled", run_id=run_id)
    assert all(line["worker_id"] == "acc-drain-1" for line in first.log())

    released = show(url, run_id)
    assert released["state"] == "queued"
    assert released["requeues"] == 0, "a drain must not spend a retry"
    assert released["epoch"] == 1
    done_before = _naps(calls_file, run_id)
    assert 2 <= len(done_before) < SLOW_STEPS
    assert {c["pid"] for c in done_before} == {first.pid}
    # The call in flight when the signal came finished and was recorded: every nap
    # that ran is in the journal, succeeded, and the journal ends at a boundary.
    journaled = [s for s in released["steps"] if s["kind"] == "tool"]
    assert [s["call_id"] for s in journaled] == [f"nap-{c['step']}" for c in done_before]
    assert all(s["status"] == "succeeded" and s["epoch"] == 1 for s in released["steps"])
    assert released["steps"][-1]["kind"] == "tool"

    second = daemons.start(
        url,
        worker_id="acc-drain-2",
        DEMO_NAP_SECONDS="0.05",
        DEMO_CALLS_FILE=str(calls_file),
        DEMO_PROVIDER_FILE=str(provider_file),
    )
    second.wait_for("run.settled", timeout=15, run_id=run_id, state="completed")
    finished = show(url, run_id)
    assert finished["state"] == "completed" and finished["result"] == "rested"
    assert (finished["epoch"], finished["requeues"]) == (2, 0)

    # No recorded step ran again: each nap once, each provider turn asked once.
    naps = _naps(calls_file, run_id)
    assert sorted(c["step"] for c in naps) == list(range(SLOW_STEPS))
    assert {c["pid"] for c in naps[len(done_before) :]} == {second.pid}
    assert {c["epoch"] for c in naps[len(done_before) :]} == {2}
    turns = [t["turn"] for t in read_lines(provider_file) if t["run_id"] == run_id]
    assert sorted(turns) == list(range(SLOW_STEPS + 1))
    steps = finished["steps"]
    assert [s["seq"] for s in steps] == list(range(2 * SLOW_STEPS + 1))
    assert steps[: len(released["steps"])] == released["steps"]
    assert all(s["epoch"] == 2 for s in steps[len(released["steps"]) :])
    second.stop_cleanly()


def test_a_second_signal_stops_at_once_and_still_releases_the_lease(
    daemons: DaemonPool, url: str, calls_file: Path
) -> None:
    daemon = daemons.start(
        url,
        worker_id="acc-impatient",
        flags=("--drain-seconds", "30"),
        DEMO_CALLS_FILE=str(calls_file),
        DEMO_NAP_SECONDS="60",
        DEMO_NAP_TIMEOUT="90",
    )
    run_id = ok("submit", "slow", "--input", "{}", "--store", url).stdout.strip()
    wait_until("the first nap", lambda: _naps(calls_file, run_id), 15)
    # Ctrl-C twice, as at a terminal.
    daemon.signal(signal.SIGINT)
    daemon.wait_for("daemon.draining")
    signalled = time.monotonic()
    daemon.signal(signal.SIGINT)
    # A forced stop is no success: 128 + SIGINT, as the shell reports a process it ended.
    assert daemon.wait(timeout=10) == 130
    assert time.monotonic() - signalled < 5
    events = [line["event"] for line in daemon.log()]
    assert "daemon.stopping_now" in events and events[-1] == "daemon.stopped"
    stopped = daemon.events("daemon.stopped")[0]
    assert (stopped["level"], stopped["forced_by"], stopped["exit_code"]) == (
        "warning",
        "SIGINT",
        130,
    )

    run = show(url, run_id)
    # The nap is read-only, so the cut-off attempt is released, not charged a retry.
    assert (run["state"], run["requeues"]) == ("queued", 0), json.dumps(run, indent=1)
    assert [s["kind"] for s in run["steps"]] == ["provider"]


def test_at_info_the_daemon_logs_each_step_and_log_level_warning_silences_it(
    daemons: DaemonPool, url: str, calls_file: Path
) -> None:
    submit = ("submit", "payer", "--input", "{}", "--wait", "--json", "--timeout", "20")
    daemon = daemons.start(url, worker_id="acc-info", DEMO_CALLS_FILE=str(calls_file))
    run = ok(*submit, "--store", url).json()
    daemon.wait_for("run.settled", run_id=run["id"])
    steps = daemon.events("step.recorded", run_id=run["id"])
    assert [(s["seq"], s["kind"], s["tool"], s["effect"], s["status"]) for s in steps] == [
        (0, "provider", None, None, "succeeded"),
        (1, "tool", "charge", "non_idempotent_write", "started"),
        (1, "tool", "charge", "non_idempotent_write", "succeeded"),
        (2, "provider", None, None, "succeeded"),
    ]
    assert {(s["level"], s["logger"], s["epoch"], s["worker_id"]) for s in steps} == {
        ("info", "leaseward.run", 1, "acc-info")
    }
    daemon.stop_cleanly()
    assert {line["level"] for line in daemon.log()} == {"info"}

    quiet = daemons.start(
        url,
        worker_id="acc-warning",
        flags=("--log-level", "warning"),
        wait=False,
        DEMO_CALLS_FILE=str(calls_file),
    )
    assert ok(*submit, "--store", url).json()["state"] == "completed"
    quiet.stop_cleanly()
    assert quiet.log() == []


def test_a_database_dropped_under_the_daemon_is_logged_in_lines_without_a_traceback(
    daemons: DaemonPool, pg_server: Any
) -> None:
    database = pg_server.create_database()
    try:
        daemon = daemons.start(pg_server.url_for(database), worker_id="acc-dropped")
        pg_server.drop(database)
        # The driver's pool tries to reopen the connection it lost, and says it failed:
        # the database is gone, or (on a loaded machine) its connect timed out first.
        wait_until(
            "the pool's reconnection warning",
            lambda: any("does not exist" in e["event"] for e in driver_warnings(daemon)),
            20.0,
        )
        daemon.wait_for("claim.failed")
        daemon.stop(timeout=15.0)
    finally:
        pg_server.drop(database)
    for warning in driver_warnings(daemon):
        assert "exception" not in warning, warning
        said = warning["event"]
        assert "does not exist" in said or said.endswith("the server did not answer in time"), said
    assert "Traceback" not in daemon.log_path.read_text()


def driver_warnings(daemon: Daemon) -> list[dict[str, Any]]:
    return [e for e in daemon.log() if e.get("logger") == "asyncpg.pool"]
