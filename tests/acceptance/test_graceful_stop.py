"""A graceful stop never cuts off a write (G13): real daemons, real signals, both stores.

The daemons run on a 1 s lease and a 1 s drain, so a write that outlives the drain
also outlives several leases: only the keeper's renewals keep it from the reaper.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from tests.acceptance.acceptance_support import DaemonPool, ok, read_lines, show, wait_until
from tests.acceptance.demo_app import CHARGE_CALL_ID

DRAIN = ("--drain-seconds", "1")
CHARGE_SECONDS = 3.0


def _calls(calls_file: Path, run_id: str, tool: str) -> list[dict[str, Any]]:
    return [c for c in read_lines(calls_file) if c["run_id"] == run_id and c["tool"] == tool]


def _dead_letters(url: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ok("dead-letters", "--json", "--store", url).json()
    return found


def test_sigterm_lets_a_write_longer_than_the_drain_finish_and_cancels_a_read(
    daemons: DaemonPool, store_url: str, calls_file: Path
) -> None:
    first = daemons.start(
        store_url,
        worker_id="acc-deploy-1",
        flags=(*DRAIN, "--concurrency", "2"),
        DEMO_CALLS_FILE=str(calls_file),
        DEMO_TOOL_SLEEP=str(CHARGE_SECONDS),
        DEMO_TOOL_TIMEOUT="10",
        DEMO_NAP_SECONDS="30",
        DEMO_NAP_TIMEOUT="60",
    )
    napper = ok("submit", "slow", "--input", "{}", "--store", store_url).stdout.strip()
    wait_until("the nap", lambda: _calls(calls_file, napper, "nap"), 15)
    payer = ok("submit", "payer", "--input", '"A-42"', "--store", store_url).stdout.strip()
    wait_until("the charge", lambda: _calls(calls_file, payer, "charge"), 15)

    first.signal(signal.SIGTERM)
    assert first.wait(timeout=CHARGE_SECONDS + 10) == 0
    log = [(line["event"], line.get("run_id"), line.get("status")) for line in first.log()]
    # At the drain's end the read was cut off and its run released, while the write
    # went on, and was recorded, and then its run released.
    finishing = log.index(("worker.finishing_write", payer, None))
    assert log.index(("lease.released", napper, None)) > finishing
    recorded = log.index(("step.recorded", payer, "succeeded"), finishing)
    assert log.index(("lease.released", payer, None)) > recorded

    assert _dead_letters(store_url) == []
    assert not first.events("run.dead_lettered")
    assert not first.events("lease.reaped")
    assert not first.events("call.cut_off")
    released = show(store_url, payer)
    assert (released["state"], released["requeues"], released["epoch"]) == ("queued", 0, 1)
    charge = next(s for s in released["steps"] if s["tool"] == "charge")
    assert (charge["status"], charge["output"]) == ("succeeded", {"charged_cents": 500})
    read = show(store_url, napper)
    assert (read["state"], read["requeues"], read["error"]) == ("queued", 0, None)
    assert [s["kind"] for s in read["steps"]] == ["provider"], "the cut-off nap left no record"

    second = daemons.start(
        store_url, worker_id="acc-deploy-2", DEMO_CALLS_FILE=str(calls_file), DEMO_NAP_SECONDS="0"
    )
    for run_id in (payer, napper):
        second.wait_for("run.settled", timeout=15, run_id=run_id, state="completed")
    done = show(store_url, payer)
    assert (done["result"], done["requeues"], done["epoch"]) == ("done", 0, 2)
    charges = _calls(calls_file, payer, "charge")
    assert [(c["pid"], c["call_id"]) for c in charges] == [(first.pid, CHARGE_CALL_ID)]
    second.stop_cleanly()


def test_a_read_longer_than_the_drain_is_cancelled_and_released_without_a_retry(
    daemons: DaemonPool, store_url: str, calls_file: Path
) -> None:
    daemon = daemons.start(
        store_url,
        worker_id="acc-read-drain",
        flags=DRAIN,
        DEMO_CALLS_FILE=str(calls_file),
        DEMO_NAP_SECONDS="30",
        DEMO_NAP_TIMEOUT="60",
    )
    run_id = ok("submit", "slow", "--input", "{}", "--store", store_url).stdout.strip()
    wait_until("the nap", lambda: _calls(calls_file, run_id, "nap"), 15)
    signalled = time.monotonic()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout=10) == 0
    assert time.monotonic() - signalled < 5
    run = show(store_url, run_id)
    assert (run["state"], run["requeues"], run["epoch"], run["error"]) == ("queued", 0, 1, None)
    assert daemon.events("lease.released", run_id=run_id)


def test_a_second_signal_names_the_write_it_cuts_off(
    daemons: DaemonPool, store_url: str, calls_file: Path
) -> None:
    daemon = daemons.start(
        store_url,
        worker_id="acc-forced",
        flags=DRAIN,
        DEMO_CALLS_FILE=str(calls_file),
        DEMO_TOOL_SLEEP="60",
        DEMO_TOOL_TIMEOUT="90",
    )
    run_id = ok("submit", "payer", "--input", '"A-43"', "--store", store_url).stdout.strip()
    wait_until("the charge", lambda: _calls(calls_file, run_id, "charge"), 15)
    daemon.signal(signal.SIGTERM)
    # Past the drain the write is still going: the first signal alone never ends it.
    daemon.wait_for("worker.finishing_write", run_id=run_id)
    assert daemon.process.poll() is None
    assert _dead_letters(store_url) == []

    daemon.signal(signal.SIGTERM)
    # It cut a write off: no success, but 128 + SIGTERM, as if the signal had ended it.
    assert daemon.wait(timeout=10) == 143
    [cut] = daemon.events("worker.cutting_off")
    assert cut["level"] == "warning"
    assert (cut["run_id"], cut["tool"], cut["call_id"]) == (run_id, "charge", CHARGE_CALL_ID)
    events = [line["event"] for line in daemon.log()]
    assert events.index("worker.cutting_off") < events.index("run.dead_lettered")
    run = show(store_url, run_id)
    # A forced stop cuts the call off: whether it charged is for a person to say.
    assert (run["state"], run["reason"]) == ("dead_lettered", "interrupted_write")
    assert [d["id"] for d in _dead_letters(store_url)] == [run_id]


def test_a_second_signal_within_the_drain_says_only_that_it_cuts_the_write_off(
    daemons: DaemonPool, store_url: str, calls_file: Path
) -> None:
    daemon = daemons.start(
        store_url,
        worker_id="acc-forced-early",
        flags=("--drain-seconds", "30"),
        DEMO_CALLS_FILE=str(calls_file),
        DEMO_TOOL_SLEEP="60",
        DEMO_TOOL_TIMEOUT="90",
    )
    run_id = ok("submit", "payer", "--input", '"A-44"', "--store", store_url).stdout.strip()
    wait_until("the charge", lambda: _calls(calls_file, run_id, "charge"), 15)
    daemon.signal(signal.SIGTERM)
    daemon.wait_for("worker.draining")
    # The second signal says how the stop ends, whichever the first was.
    daemon.signal(signal.SIGINT)
    assert daemon.wait(timeout=10) == 130
    assert [cut["run_id"] for cut in daemon.events("worker.cutting_off")] == [run_id]
    # The write was cut off, not waited for: no line may say it is being finished.
    assert not daemon.events("worker.finishing_write")


def test_a_sigterm_before_the_daemon_opens_its_store_ends_it_with_nothing_written(
    daemons: DaemonPool, store_dir: Path, url: str
) -> None:
    """While it imports, SIGTERM ends the daemon as it ends any program (143 in the
    shell): that is fine only because nothing has been opened yet."""
    daemon = daemons.start(url, worker_id="acc-early", wait=False)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout=15) == -signal.SIGTERM
    assert daemon.log_path.read_text() == ""
    assert list(store_dir.iterdir()) == []


def test_a_sigterm_as_the_store_is_created_drains_and_leaves_it_whole(
    daemons: DaemonPool, store_dir: Path, url: str
) -> None:
    """Its drain handlers are in place before the daemon opens the store: a signal
    that lands while it creates one waits for the store, then drains."""
    daemon = daemons.start(url, worker_id="acc-creating", wait=False)
    wait_until("the store file", lambda: any(store_dir.iterdir()), 15)
    daemon.signal(signal.SIGTERM)
    said = daemon.log_path.read_text
    assert daemon.wait(timeout=15) == 0, said()
    assert "Traceback" not in said()
    assert ok("workers", "--json", "--store", url).json() == []
    assert ok("runs", "--json", "--store", url).json() == []
