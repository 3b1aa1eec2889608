"""`leaseward workers`, the warnings about runs no live worker serves, and `leaseward purge`."""

from __future__ import annotations

import re
import time
from pathlib import Path

import anyio
import pytest

from leaseward.runtime.clock import ManualClock, SystemClock
from leaseward.runtime.commits import Stored
from leaseward.runtime.lifecycle import Event, Reason, RunMode
from leaseward.runtime.runs import NewRun
from leaseward.runtime.settlements import Settlement
from leaseward.runtime.workers import WorkerRegistration
from leaseward.storage import BatchItem, SQLStore, open_store
from tests.acceptance.acceptance_support import (
    DaemonPool,
    assert_one_line_error,
    base_env,
    leaseward,
    ok,
    show,
    snapshot,
)
from tests.acceptance.demo_app import app

EXIT_FAILURE = 1
EXIT_USAGE = 2
DEMO_AGENTS = tuple(agent.name for agent in app.agents)
DAY_SECONDS = 86_400.0


def _runs(url: str) -> list[dict[str, object]]:
    listed: list[dict[str, object]] = ok("runs", "--json", "--store", url).json()
    return listed


async def _register(url: str, worker_id: str, agents: tuple[str, ...], at: float) -> None:
    """A worker row as a worker whose clock read ``at`` would have left it."""
    store = await open_store(url, clock=ManualClock(at), must_exist=True)
    try:
        registration = WorkerRegistration(worker_id, "elsewhere", 99, agents, 15.0)
        await store.register_worker(registration)
    finally:
        await store.aclose()


# -- leaseward workers ------------------------------------------------------------------


def test_workers_lists_a_running_daemon_and_forgets_it_when_it_stops(
    daemons: DaemonPool, url: str
) -> None:
    ok("migrate", "--store", url)
    assert ok("workers", "--store", url).stdout == "no workers\n"
    daemon = daemons.start(url, worker_id="acc-w1")

    header, row = ok("workers", "--store", url).stdout.splitlines()
    assert header.split() == ["WORKER", "HOST", "PID", "AGENTS", "STARTED", "HEARTBEAT", "STATUS"]
    assert row.split()[0] == "acc-w1"
    assert row.split()[2] == str(daemon.pid)
    assert row.split()[3] == ",".join(DEMO_AGENTS)
    assert row.endswith(" live")
    assert re.search(r" \d+\.\ds ago ", row), row
    (listed,) = ok("workers", "--json", "--store", url).json()
    assert (listed["id"], listed["pid"], listed["agents"], listed["live"]) == (
        "acc-w1",
        daemon.pid,
        list(DEMO_AGENTS),
        True,
    )
    assert listed["heartbeat_age_seconds"] <= listed["stale_after_seconds"]

    daemon.stop_cleanly()
    assert ok("workers", "--store", url).stdout == "no workers\n"
    assert ok("workers", "--json", "--store", url).json() == []


def test_a_worker_whose_heartbeat_stopped_is_shown_gone_and_serves_nothing(url: str) -> None:
    ok("migrate", "--store", url)
    anyio.run(_register, url, "acc-crashed", ("greeter",), time.time() - 3600)

    _, row = ok("workers", "--store", url).stdout.splitlines()
    assert row.split()[:4] == ["acc-crashed", "elsewhere", "99", "greeter"]
    assert re.search(r" (59m\d+s|1h0m) ago +gone$", row), row
    (listed,) = ok("workers", "--json", "--store", url).json()
    assert listed["live"] is False
    assert listed["heartbeat_age_seconds"] >= 3600

    submitted = ok("submit", "greeter", "--store", url)
    assert "no live worker serves agent 'greeter' (no worker is live)" in submitted.stderr


# -- runs nobody serves -----------------------------------------------------------------


def test_submit_warns_about_an_agent_no_live_worker_serves_and_queues_it(
    daemons: DaemonPool, url: str
) -> None:
    ok("migrate", "--store", url)
    daemons.start(url, worker_id="acc-w2")

    served = ok("submit", "greeter", "--input", '"hi"', "--store", url)
    assert served.stderr == ""
    unserved = ok("submit", "nosuchagent", "--input", "{}", "--store", url)
    run_id = unserved.stdout.strip()
    assert unserved.stderr == (
        "leaseward: warning: no live worker serves agent 'nosuchagent' "
        f"(live workers serve {', '.join(sorted(DEMO_AGENTS))}); "
        f"run {run_id} stays queued until one does\n"
    )
    assert show(url, run_id)["state"] == "queued"

    # Waiting is refused only when it could never end; the refusal queues nothing.
    before = len(_runs(url))
    refused = leaseward("submit", "nosuchagent", "--wait", "--store", url)
    assert_one_line_error(refused, EXIT_USAGE, "no live worker serves agent 'nosuchagent'",
                          "--wait would never return", "nothing was queued")  # fmt: skip
    assert len(_runs(url)) == before
    bounded = leaseward("submit", "nosuchagent", "--wait", "--timeout", "0.3", "--store", url)
    assert bounded.returncode == EXIT_FAILURE, bounded.describe()
    assert "no live worker serves agent 'nosuchagent'" in bounded.stderr
    assert "did not finish within 0.3 seconds" in bounded.stderr
    assert len(_runs(url)) == before + 1


def test_a_keyed_submit_answered_by_a_finished_or_purged_run_warns_of_nothing_and_may_wait(
    url: str,
) -> None:
    ok("migrate", "--store", url)
    keyed = ("submit", "nosuchagent", "--input", "{}", "--idempotency-key", "k-1", "--store", url)
    run_id = ok(*keyed).stdout.strip()
    ok("cancel", run_id, "--store", url)

    again = ok(*keyed)
    assert again.stdout.strip() == run_id
    assert again.stderr == ""
    # Nothing is queued and the run has ended: a wait for it ends at once.
    waited = leaseward(*keyed, "--wait", "--json")
    assert waited.returncode == EXIT_FAILURE, waited.describe()
    assert (waited.json()["id"], waited.json()["state"], waited.stderr) == (
        run_id,
        "cancelled",
        "",
    )

    time.sleep(1.1)  # the shortest age a purge takes is a second
    assert "deleted 1 run " in ok("purge", "--finished-before", "1s", "--store", url).stdout
    after_purge = ok(*keyed)
    assert after_purge.stdout.strip() == run_id
    assert after_purge.stderr == ""
    assert_one_line_error(leaseward(*keyed, "--wait"), EXIT_FAILURE, f"run {run_id} was purged")

    # A key no run holds would queue a run nobody serves: refused, as without a key.
    fresh = leaseward(*keyed[:-3], "k-2", "--store", url, "--wait")
    assert_one_line_error(fresh, EXIT_USAGE, "--wait would never return", "nothing was queued")
    assert _runs(url) == []


def test_a_refused_wait_changes_nothing_in_a_store_without_workers(url: str) -> None:
    ok("migrate", "--store", url)
    directory = Path(url.removeprefix("sqlite:///")).parent
    before = snapshot(directory)
    refused = leaseward("submit", "payer", "--input", "{}", "--wait", "--store", url)
    assert_one_line_error(refused, EXIT_USAGE, "(no worker is live)", "add --timeout")
    assert snapshot(directory) == before


def test_runs_and_show_mark_queued_runs_no_live_worker_serves(url: str) -> None:
    ok("migrate", "--store", url)
    anyio.run(_register, url, "acc-fake", ("greeter",), time.time())
    served = ok("submit", "greeter", "--store", url)
    assert served.stderr == ""
    unserved = ok("submit", "nosuchagent", "--store", url).stdout.strip()

    lines = {line.split()[0]: line for line in ok("runs", "--store", url).stdout.splitlines()}
    assert lines[unserved].endswith("  no live worker serves nosuchagent")
    assert "no live worker" not in lines[served.stdout.strip()]
    assert ok("runs", "--state", "completed", "--store", url).stdout == "no runs\n"

    timeline = ok("show", unserved, "--store", url).stdout.splitlines()
    assert timeline[-1] == "note: no live worker serves nosuchagent; the run waits until one does"
    assert "no live worker" not in ok("show", served.stdout.strip(), "--store", url).stdout


# -- leaseward purge --------------------------------------------------------------------


async def _finished(store: SQLStore, settlement: Settlement) -> str:
    run_id = (await store.create_run(NewRun(_new_id(), "payer", RunMode.QUEUED, "{}"))).id
    (run,) = await store.claim_runs("acc-old", 1, 30.0, ["payer"])
    (outcome,) = await store.commit_batch(
        [BatchItem(run_id, run.epoch, lease_seconds=30.0, settlement=settlement)]
    )
    assert isinstance(outcome, Stored)
    return run_id


_ids = iter(range(1_000_000))


def _new_id() -> str:
    return f"run-{next(_ids):06d}"


COMPLETE = Settlement(Event.COMPLETE, Reason.COMPLETED, result_json='"ok"')
DEAD = Settlement(Event.DEAD_LETTER, Reason.NOT_RETRYABLE, error="bad key")


async def _history(url: str, old_completed: int) -> dict[str, str]:
    """Runs that finished 40 days ago (completed, a dead letter), one queued and one
    running since then, and one completed now. Returns each kind's latest id."""
    old = await open_store(url, clock=ManualClock(time.time() - 40 * DAY_SECONDS))
    try:
        ids = {"completed": ""}
        for _ in range(old_completed):
            ids["completed"] = await _finished(old, COMPLETE)
        ids["dead"] = await _finished(old, DEAD)
        ids["queued"] = (await old.create_run(NewRun(_new_id(), "other", RunMode.QUEUED, "1"))).id
        ids["running"] = (await old.create_run(NewRun(_new_id(), "payer", RunMode.QUEUED, "1"))).id
        await old.claim_runs("acc-old", 1, 100 * DAY_SECONDS, ["payer"])
    finally:
        await old.aclose()
    now = await open_store(url, clock=SystemClock())
    try:
        ids["recent"] = await _finished(now, COMPLETE)
    finally:
        await now.aclose()
    return ids


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (("--finished-before", "30x"), "'30x' is not a duration"),
        (("--finished-before", "30"), "e.g. 30d, 12h, 45m, 90s"),
        (("--finished-before", "1.5d"), "is not a duration"),
        (("--finished-before=-3d",), "is not a duration"),
        (("--finished-before", "0s"), "longer than zero"),
        (("--finished-before", "99999999999999d"), "too long"),
        ((), "purge needs --finished-before, --forget-keys-older-than, or both"),
        (("--forget-keys-older-than", "0s"), "longer than zero"),
        (("--forget-keys-older-than", "90d", "--state", "completed"), "need --finished-before"),
        (("--finished-before", "30d", "--state", "running"), "not a finished state"),
        (("--finished-before", "30d", "--state", "dead_lettered"), "--include-dead-letters"),
    ],
)
def test_purge_refuses_bad_input_in_one_line_and_changes_nothing(
    url: str, flags: tuple[str, ...], fragment: str
) -> None:
    anyio.run(_history, url, 1)
    directory = Path(url.removeprefix("sqlite:///")).parent
    before = snapshot(directory)
    result = leaseward("purge", *flags, "--store", url)
    assert_one_line_error(result, EXIT_USAGE, fragment)
    assert snapshot(directory) == before


def test_purge_deletes_old_finished_runs_in_batches_and_keeps_dead_letters(url: str) -> None:
    # More than two batches of PURGE_BATCH_RUNS (500).
    ids = anyio.run(_history, url, 1100)
    directory = Path(url.removeprefix("sqlite:///")).parent
    before = snapshot(directory)

    dry = ok("purge", "--finished-before", "30d", "--dry-run", "--store", url).stdout
    assert re.fullmatch(
        r"would delete 1100 runs \(0 journal rows\) finished before \S+Z, in 3 batches; "
        r"dead-lettered runs kept; nothing changed \(dry run\)\n",
        dry,
    ), dry
    assert snapshot(directory) == before

    done = ok("purge", "--finished-before", "30d", "--store", url).stdout
    assert done.startswith("deleted 1100 runs (0 journal rows) finished before ")
    assert done.endswith(", in 3 batches; dead-lettered runs kept\n")
    left = {run["id"]: run["state"] for run in _runs(url)}
    assert left == {
        ids["dead"]: "dead_lettered",
        ids["queued"]: "queued",
        ids["running"]: "running",
        ids["recent"]: "completed",
    }
    again = ok("purge", "--finished-before", "30d", "--state", "completed", "--store", url)
    assert again.stdout.startswith("deleted 0 runs (0 journal rows)")

    letters = ok("purge", "--finished-before", "30d", "--include-dead-letters", "--store", url)
    assert letters.stdout.startswith("deleted 1 run (0 journal rows) finished before ")
    assert letters.stdout.endswith(", in 1 batch\n")
    assert {run["id"] for run in _runs(url)} == {ids["queued"], ids["running"], ids["recent"]}


def test_purge_deletes_the_journal_with_its_run(daemons: DaemonPool, url: str) -> None:
    ok("migrate", "--store", url)
    daemon = daemons.start(url, worker_id="acc-w3")
    done = ok("submit", "payer", "--input", "{}", "--wait", "--json", "--timeout", "20",
              "--store", url).json()  # fmt: skip
    assert len(show(url, done["id"])["steps"]) == 3
    daemon.stop_cleanly()
    time.sleep(1.1)

    purged = ok("purge", "--finished-before", "1s", "--store", url).stdout
    assert purged.startswith("deleted 1 run (3 journal rows) finished before ")
    missing = leaseward("show", done["id"], "--store", url)
    assert_one_line_error(missing, EXIT_FAILURE, "no run with id")


# -- help --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("workers", {"--json"}),
        (
            "purge",
            {
                "--finished-before",
                "--state",
                "--include-dead-letters",
                "--forget-keys-older-than",
                "--dry-run",
            },
        ),
    ],
)
def test_help_names_the_store_variable_and_no_other(command: str, flags: set[str]) -> None:
    # Every other flag says what one invocation does: no variable may set it.
    text = " ".join(ok(command, "--help", env=base_env(COLUMNS="80")).stdout.split())
    assert re.findall(r"\[env var: (LEASEWARD_\w+)", text) == ["LEASEWARD_STORE"]
    for flag in flags:
        assert flag in text
