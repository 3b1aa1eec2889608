"""Human approval and input from the command line, with real daemons (G12).

A daemon parks a run whose call needs a person and holds nothing for it; the
operator lists what waits, approves, rejects or replies from another process,
and a daemon (the same, or one started later) resumes the run from its journal.
"""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.acceptance_support import (
    LEASEWARD,
    DaemonPool,
    assert_one_line_error,
    base_env,
    leaseward,
    ok,
    read_lines,
    show,
    wait_until,
)
from tests.acceptance.demo_app import APPROVAL_TIMEOUT_SECONDS


def submit(url: str, agent: str) -> str:
    return ok("submit", agent, "--input", '"go"', "--store", url).stdout.strip()


def until_state(url: str, run_id: str, state: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        shown = show(url, run_id)
        return shown if shown["state"] == state else None

    return wait_until(f"run {run_id} {state}", probe, 20.0)


def test_approve_from_the_cli_executes_the_call_once_and_show_tells_who_decided(
    daemons: DaemonPool, url: str, calls_file: Path
) -> None:
    daemons.start(url, worker_id="acc-approve", DEMO_CALLS_FILE=str(calls_file))
    run_id = submit(url, "approver")
    until_state(url, run_id, "waiting_for_approval")
    assert read_lines(calls_file) == []

    listed = ok("approvals", "--store", url).stdout.splitlines()
    assert listed[0].split() == [
        "RUN", "CALL", "DIGEST", "AGENT", "TOOL", "EFFECT", "WAITS", "FOR", "AGE", "ARGUMENTS",
    ]  # fmt: skip
    [request] = ok("approvals", "--json", "--store", url).json()
    digest = request["arguments_digest"][:12]
    assert listed[1].split()[:7] == [
        run_id, "transfer-1", digest, "approver", "transfer", "non_idempotent_write", "approval",
    ]  # fmt: skip
    assert '{"amount_cents": 900, "to": "ACME"}' in listed[1]
    assert (request["run_id"], request["call_id"], request["decision"]) == (
        run_id,
        "transfer-1",
        None,
    )
    timeline = ok("show", run_id, "--store", url).stdout
    assert "call transfer-1 of transfer (non_idempotent_write, turn 0): approval requested" in (
        timeline
    )
    assert f"leaseward approve {run_id} --call transfer-1 --digest {digest}" in timeline
    assert f'leaseward reject {run_id} --reason "..."' in timeline

    wrong = leaseward("approve", run_id, "--call", "transfer-9", "--store", url)
    assert_one_line_error(wrong, 1, "no request for call 'transfer-9'")
    # Another call's arguments than those shown: refused, nothing decided.
    other = "0" * 12 if digest != "0" * 12 else "1" * 12
    unseen = leaseward("approve", run_id, "--digest", other, "--store", url)
    assert_one_line_error(unseen, 1, f"not of those shown ({other})")
    malformed = leaseward("approve", run_id, "--digest", "ab", "--store", url)
    assert_one_line_error(malformed, 2, "a digest is 8 to 64 lowercase hex digits")
    assert ok("approvals", "--json", "--store", url).json()[0]["decision"] is None
    approved = ok(
        "approve",
        run_id,
        "--digest",
        digest,
        "--note",
        "invoice 7 checked",
        "--operator",
        "alice",
        "--store",
        url,
    )
    assert approved.stdout.strip() == f"run {run_id}: approved; every call is decided, requeued"
    again = leaseward("approve", run_id, "--store", url)
    assert again.returncode == 1 and "already approved by alice" in again.stderr, again.describe()

    done = until_state(url, run_id, "completed")
    assert done["result"] == '{"sent_cents": 900, "to": "ACME"}'
    assert [(c["tool"], c["run_id"]) for c in read_lines(calls_file)] == [("transfer", run_id)]
    [decided] = done["requests"]
    assert (decided["decision"], decided["operator"], decided["note"]) == (
        "approved",
        "alice",
        "invoice 7 checked",
    )
    timeline = ok("show", run_id, "--store", url).stdout
    assert "approved by alice at " in timeline and ": invoice 7 checked" in timeline
    assert ok("approvals", "--store", url).stdout.strip() == "nothing waits for a person"


def test_reject_needs_a_reason_and_the_call_never_runs(
    daemons: DaemonPool, url: str, calls_file: Path
) -> None:
    daemons.start(url, worker_id="acc-reject", DEMO_CALLS_FILE=str(calls_file))
    run_id = submit(url, "approver")
    until_state(url, run_id, "waiting_for_approval")
    missing = leaseward("reject", run_id, "--store", url)
    assert_one_line_error(missing, 2, "--reason")
    ok("reject", run_id, "--reason", "wrong account", "--operator", "bob", "--store", url)
    done = until_state(url, run_id, "completed")
    assert done["result"] == '{"error": "rejected by bob: wrong account"}'
    assert read_lines(calls_file) == []


def test_reply_answers_a_question_and_cancel_ends_a_waiting_run(
    daemons: DaemonPool, url: str
) -> None:
    daemons.start(url, worker_id="acc-reply")
    asked = submit(url, "asker")
    until_state(url, asked, "waiting_for_input")
    [request] = ok("approvals", "--json", "--store", url).json()
    assert (request["kind"], request["arguments"]) == ("input", {"question": "Which colour?"})
    assert f"leaseward reply {asked} --input JSON" in ok("show", asked, "--store", url).stdout
    bad = leaseward("reply", asked, "--input", "blue", "--store", url)
    assert_one_line_error(bad, 2, "--input is not JSON")
    approve = leaseward("approve", asked, "--store", url)
    assert_one_line_error(approve, 1, "waiting_for_input")
    ok("reply", asked, "--input", '"blue"', "--store", url)
    assert until_state(url, asked, "completed")["result"] == "blue"

    waiting = submit(url, "approver")
    until_state(url, waiting, "waiting_for_approval")
    assert ok("cancel", waiting, "--store", url).stdout.strip() == f"run {waiting} cancelled"
    late = leaseward("approve", waiting, "--store", url)
    assert_one_line_error(late, 1, "cancelled")


def test_requests_outlive_a_daemon_restart_and_two_daemons_run_each_call_once(
    daemons: DaemonPool, url: str, calls_file: Path
) -> None:
    first = daemons.start(url, worker_id="acc-first", DEMO_CALLS_FILE=str(calls_file))
    run_ids = [submit(url, "approver") for _ in range(4)]
    for run_id in run_ids:
        until_state(url, run_id, "waiting_for_approval")
    first.stop_cleanly()
    # Decided while no daemon runs at all.
    for run_id in run_ids:
        ok("approve", run_id, "--store", url)
    assert {run_id: show(url, run_id)["state"] for run_id in run_ids} == dict.fromkeys(
        run_ids, "queued"
    )
    for worker_id in ("acc-second", "acc-third"):
        daemons.start(url, worker_id=worker_id, DEMO_CALLS_FILE=str(calls_file))
    for run_id in run_ids:
        until_state(url, run_id, "completed")
    calls = read_lines(calls_file)
    assert sorted(c["run_id"] for c in calls) == sorted(run_ids)
    assert all(c["epoch"] == 2 for c in calls), json.dumps(calls)


def test_an_approval_after_the_expiry_is_refused_and_the_transfer_never_runs(
    daemons: DaemonPool, url: str, calls_file: Path
) -> None:
    # No reaper pass comes while the test runs: only the late approval can expire it.
    idle_reaper = ("--lease-seconds", "120", "--reap-interval-seconds", "60")
    first = daemons.start(
        url, worker_id="acc-late-1", flags=idle_reaper, DEMO_CALLS_FILE=str(calls_file)
    )
    run_id = submit(url, "late_approver")
    waiting = until_state(url, run_id, "waiting_for_approval")
    first.stop_cleanly()
    [request] = waiting["requests"]
    expires_at = request["expires_at"]
    assert expires_at == pytest.approx(request["requested_at"] + APPROVAL_TIMEOUT_SECONDS)
    # Every worker is down past the expiry; SQLite's clock is this machine's.
    time.sleep(max(0.0, expires_at - time.time()) + 0.1)

    late = leaseward("approve", run_id, "--operator", "alice", "--store", url)
    expired_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at))
    assert_one_line_error(
        late,
        1,
        f"leaseward: call late-1 of run {run_id}: the request expired at {expired_at}; "
        "it was rejected as expired",
    )
    # Expired as the reaper would have: the run is back in the queue, nobody approved.
    shown = show(url, run_id)
    [expired] = shown["requests"]
    assert (shown["state"], expired["decision"], expired["operator"]) == ("queued", "expired", None)
    assert expired["decided_at"] > expires_at
    noticed_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expired["decided_at"]))
    printed = ok("show", run_id, "--store", url).stdout
    assert f"expired at {expired_at}, noticed at {noticed_at}" in printed
    again = leaseward("approve", run_id, "--store", url)
    assert_one_line_error(again, 1, f"the request expired at {expired_at}")

    daemons.start(url, worker_id="acc-late-2", DEMO_CALLS_FILE=str(calls_file))
    done = until_state(url, run_id, "completed")
    assert done["result"] == '{"error": "rejected: approval expired"}'
    assert read_lines(calls_file) == []


def _submit_waiting(url: str, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(LEASEWARD), "submit", "approver", "--wait", "--store", url, *flags],
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def _new_waiting(url: str, before: set[str]) -> list[dict[str, Any]]:
    return [
        run
        for run in ok("runs", "--json", "--store", url).json()
        if run["id"] not in before and run["state"] == "waiting_for_approval"
    ]


def test_a_wait_stopped_by_ctrl_c_names_the_run_it_leaves_behind(
    daemons: DaemonPool, url: str
) -> None:
    """Told nothing, a user would submit again: a second transfer waiting for approval."""
    ok("migrate", "--store", url)
    daemons.start(url, worker_id="w1")
    for flags, again in [
        ((), "submitting again queues a second run"),
        (("--idempotency-key", "t-1"), "same --idempotency-key queues nothing new"),
    ]:
        before = {run["id"] for run in ok("runs", "--json", "--store", url).json()}
        process = _submit_waiting(url, *flags)
        try:
            [run] = wait_until(
                "the submitted run waits for its approval",
                functools.partial(_new_waiting, url, before),
                timeout=20,
            )
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=10)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert process.returncode == 130, err
        assert out == ""
        assert err.startswith(
            f"leaseward: the wait was stopped; run {run['id']} is submitted and goes on"
        )
        assert again in err and err.count("\n") == 1
        assert show(url, run["id"])["state"] == "waiting_for_approval"
