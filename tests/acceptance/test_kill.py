"""Two daemons on one store; one is SIGKILLed mid-charge and the other recovers.

The kill scenario costs one lease of the killed daemon (charge's timeout plus twice
the runtime's 5 s deadline margin, ~13 s), so it runs once per module: the fixture
records what the survivor did, and the resolve test then goes on with the same store
and the same surviving daemon.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.acceptance.acceptance_support import (
    Daemon,
    DaemonPool,
    assert_one_line_error,
    leaseward,
    ok,
    read_lines,
    show,
    sqlite_url,
    wait_until,
)

pytestmark = pytest.mark.slow

OTHER_RUNS = 4
# The killed daemon's charge: it sleeps far longer than the test waits, but its
# timeout (hence the lease it takes out for the call) stays short.
VICTIM_TOOL_TIMEOUT = "3"


@attrs.frozen
class Scenario:
    url: str
    calls_file: Path
    survivor: Daemon
    victim_pid: int
    victim_returncode: int
    victim_run: str
    other_runs: tuple[str, ...]
    at_kill: dict[str, Any]
    after_reap: dict[str, Any]
    dead_letters: list[dict[str, Any]]
    dead_letters_text: str


def _charges(calls_file: Path, run_id: str) -> list[dict[str, Any]]:
    return [c for c in read_lines(calls_file) if c["run_id"] == run_id and c["tool"] == "charge"]


@pytest.fixture(scope="module")
def killed_mid_charge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    directory = tmp_path_factory.mktemp("kill")
    url = sqlite_url(directory / "runs.db")
    calls_file = directory / "calls.jsonl"
    pool = DaemonPool(directory)
    try:
        ok("migrate", "--store", url)
        victim_run = ok("submit", "payer", "--input", '"victim"', "--store", url).stdout.strip()
        victim = pool.start(
            url,
            worker_id="acc-victim",
            flags=("--concurrency", "1"),
            DEMO_CALLS_FILE=str(calls_file),
            DEMO_TOOL_SLEEP="60",
            DEMO_TOOL_TIMEOUT=VICTIM_TOOL_TIMEOUT,
        )
        wait_until("the victim's charge", lambda: _charges(calls_file, victim_run), 15)
        # Both daemons share the store while the victim is inside its call.
        survivor = pool.start(
            url, worker_id="acc-survivor", wait=False, DEMO_CALLS_FILE=str(calls_file)
        )
        victim.signal(signal.SIGKILL)
        victim_returncode = victim.wait(timeout=10)
        at_kill = show(url, victim_run)
        survivor.started()
        others = tuple(
            ok("submit", "payer", "--input", f'"other-{i}"', "--store", url).stdout.strip()
            for i in range(OTHER_RUNS)
        )
        survivor.wait_for("run.dead_lettered", timeout=30, run_id=victim_run)
        for run_id in others:
            survivor.wait_for("run.settled", timeout=15, run_id=run_id, state="completed")
        dead = ok("dead-letters", "--reason", "interrupted_write", "--json", "--store", url)
        text = ok("dead-letters", "--store", url).stdout
        yield Scenario(
            url=url,
            calls_file=calls_file,
            survivor=survivor,
            victim_pid=victim.pid,
            victim_returncode=victim_returncode,
            victim_run=victim_run,
            other_runs=others,
            at_kill=at_kill,
            after_reap=show(url, victim_run),
            dead_letters=dead.json(),
            dead_letters_text=text,
        )
    finally:
        pool.close()


def test_sigkill_mid_write_dead_letters_the_run_and_the_survivor_does_the_rest(
    killed_mid_charge: Scenario,
) -> None:
    s = killed_mid_charge
    assert s.victim_returncode == -signal.SIGKILL
    # Killed inside the call: the intent is recorded, the outcome is not.
    assert s.at_kill["state"] == "running", s.at_kill
    assert [(st["tool"], st["status"]) for st in s.at_kill["steps"]] == [
        (None, "succeeded"),
        ("charge", "started"),
    ]

    run = s.after_reap
    assert (run["state"], run["reason"]) == ("dead_lettered", "interrupted_write"), run
    assert run["epoch"] == 1
    assert run["steps"] == s.at_kill["steps"], "the reaper only settles, it executes nothing"
    assert [r["id"] for r in s.dead_letters] == [s.victim_run]
    assert s.victim_run in s.dead_letters_text and "interrupted_write" in s.dead_letters_text

    reaped = s.survivor.events("lease.reaped", run_id=s.victim_run)
    assert len(reaped) == 1 and reaped[0]["state"] == "dead_lettered"

    # The charge ran exactly once, in the killed daemon; each other run's once, in the survivor.
    charges = _charges(s.calls_file, s.victim_run)
    assert [(c["pid"], c["epoch"]) for c in charges] == [(s.victim_pid, 1)]
    for run_id in s.other_runs:
        assert [c["pid"] for c in _charges(s.calls_file, run_id)] == [s.survivor.pid]
    completed = ok("runs", "--state", "completed", "--json", "--store", s.url).json()
    assert {r["id"] for r in completed} == set(s.other_runs)
    assert all(r["epoch"] == 1 and r["requeues"] == 0 for r in completed)


def test_resolve_applied_resumes_the_interrupted_write_without_running_it_again(
    killed_mid_charge: Scenario,
) -> None:
    s = killed_mid_charge
    before = show(s.url, s.victim_run)
    assert before["reason"] == "interrupted_write", "the kill scenario did not leave its run"
    calls_before = read_lines(s.calls_file)

    refused = leaseward("redrive", s.victim_run, "--store", s.url)
    assert_one_line_error(refused, 1, "resolve")
    assert show(s.url, s.victim_run) == before, "a refused redrive changed the run"

    note = "the PSP dashboard shows the charge"
    resolved = ok(
        "resolve", s.victim_run, "--applied", "--note", note, "--operator", "alice",
        "--store", s.url,
    )  # fmt: skip
    assert "applied" in resolved.stdout and s.victim_run in resolved.stdout
    s.survivor.wait_for("run.settled", timeout=15, run_id=s.victim_run, state="completed")

    run = show(s.url, s.victim_run)
    assert (run["state"], run["result"]) == ("completed", "done"), run
    assert run["epoch"] > before["epoch"]
    charge = next(st for st in run["steps"] if st["tool"] == "charge")
    assert charge["seq"] == 1 and charge["epoch"] == 1
    assert charge["resolved_by"] == "alice"
    assert charge["resolved_at"] is not None
    assert charge["output"]["resolution"] == "applied"
    assert charge["output"]["note"] == note
    assert [st["kind"] for st in run["steps"]] == ["provider", "tool", "provider"]
    assert read_lines(s.calls_file) == calls_before, "the resolved charge ran again"

    again = leaseward("resolve", s.victim_run, "--not-applied", "--store", s.url)
    assert_one_line_error(again, 1, "interrupted_write")


def test_every_line_of_the_survivors_log_names_the_survivor(killed_mid_charge: Scenario) -> None:
    log = killed_mid_charge.survivor.log()
    assert {line["worker_id"] for line in log} == {"acc-survivor"}
