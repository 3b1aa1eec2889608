"""``leaseward submit --idempotency-key``: a retried submit prints the run it made before."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.acceptance.acceptance_support import (
    CLI_TIMEOUT_SECONDS,
    HERE,
    LEASEWARD,
    DaemonPool,
    assert_one_line_error,
    base_env,
    leaseward,
    ok,
    read_lines,
    show,
)

EXIT_FAILURE = 1
EXIT_USAGE = 2
ORDER = '{"order": "A-1"}'


def submit(url: str, *args: str) -> str:
    return ok("submit", "payer", *args, "--store", url).stdout.strip()


def run_ids(url: str) -> list[str]:
    return [run["id"] for run in ok("runs", "--json", "--store", url).json()]


def test_the_same_key_twice_prints_the_same_run_and_show_prints_the_key(url: str) -> None:
    ok("migrate", "--store", url)
    first = submit(url, "--input", ORDER, "--idempotency-key", "order-A-1")
    # The same object, spelt differently, is the same input.
    again = submit(url, "--input", '{ "order" : "A-1" }', "--idempotency-key", "order-A-1")
    assert again == first
    assert run_ids(url) == [first]
    assert show(url, first)["idempotency_key"] == "order-A-1"
    timeline = ok("show", first, "--store", url).stdout.splitlines()
    assert timeline[2] == "idempotency key: order-A-1"
    as_json = ok("submit", "payer", "--input", ORDER, "--idempotency-key", "order-A-1",
                 "--json", "--store", url).json()  # fmt: skip
    assert as_json == {"id": first}


def test_a_key_reused_for_other_input_is_one_line_and_creates_nothing(url: str) -> None:
    ok("migrate", "--store", url)
    first = submit(url, "--input", ORDER, "--idempotency-key", "order-A-1")
    other = leaseward("submit", "payer", "--input", '{"order": "B-2"}', "--idempotency-key",
                      "order-A-1", "--store", url)  # fmt: skip
    assert_one_line_error(other, EXIT_FAILURE)
    assert other.stderr == (
        f"leaseward: the idempotency key 'order-A-1' was already used by run {first} "
        "for a different input to 'payer'\n"
    )
    assert other.stdout == ""
    assert run_ids(url) == [first]


def test_an_empty_or_overlong_key_is_a_usage_error(url: str) -> None:
    ok("migrate", "--store", url)
    for key in ("", "k" * 201):
        result = leaseward("submit", "payer", "--idempotency-key", key, "--store", url)
        assert_one_line_error(result, EXIT_USAGE)
        assert "idempotency key" in result.stderr
    assert run_ids(url) == []


def test_submits_of_one_key_from_processes_started_together_make_one_run(url: str) -> None:
    ok("migrate", "--store", url)
    args = [str(LEASEWARD), "submit", "payer", "--input", ORDER, "--idempotency-key", "k",
            "--store", url]  # fmt: skip
    processes = [
        subprocess.Popen(args, cwd=HERE, env=base_env(), stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    try:
        outputs = [p.communicate(timeout=CLI_TIMEOUT_SECONDS)[0] for p in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait()
    assert [p.returncode for p in processes] == [0] * 4
    assert len(set(outputs)) == 1
    assert run_ids(url) == [outputs[0].strip()]


def test_a_retried_submit_of_a_finished_run_waits_for_nothing_and_charges_once(
    daemons: DaemonPool, url: str, calls_file: Path
) -> None:
    daemons.start(url, worker_id="acc-keys", DEMO_CALLS_FILE=str(calls_file))
    flags = ("--input", ORDER, "--idempotency-key", "order-A-1", "--wait", "--json",
             "--timeout", "20")  # fmt: skip
    done = ok("submit", "payer", *flags, "--store", url).json()
    assert (done["state"], done["idempotency_key"]) == ("completed", "order-A-1")
    assert ok("submit", "payer", *flags, "--store", url).json() == done
    # Without --json the run's row is followed by what it came to, as `show` prints it.
    table = ok("submit", "payer", *flags[:-3], "--timeout", "20", "--store", url).stdout
    assert done["id"] in table.splitlines()[1]
    assert f"result: {json.dumps(done['result'], ensure_ascii=False)}" in table.splitlines()
    assert [call["run_id"] for call in read_lines(calls_file)] == [done["id"]]


def test_a_purge_keeps_the_key_and_the_retried_order_is_charged_once(
    daemons: DaemonPool, url: str, calls_file: Path
) -> None:
    daemon = daemons.start(url, worker_id="acc-purge", DEMO_CALLS_FILE=str(calls_file))
    flags = ("--input", ORDER, "--idempotency-key", "checkout-A-42")
    done = ok("submit", "payer", *flags, "--wait", "--json", "--timeout", "20",
              "--store", url).json()  # fmt: skip
    assert done["state"] == "completed"
    assert submit(url, *flags) == done["id"]
    time.sleep(1.1)

    purged = ok("purge", "--finished-before", "1s", "--store", url).stdout
    assert purged.startswith("deleted 1 run (3 journal rows) finished before ")
    # The retried submit names the purged run and queues nothing, with a worker ready.
    assert submit(url, *flags) == done["id"]
    assert run_ids(url) == []
    shown = leaseward("show", done["id"], "--store", url)
    assert_one_line_error(shown, EXIT_FAILURE, f"leaseward: run {done['id']} was purged at ")
    assert "it had ended completed at " in shown.stderr
    waited = leaseward("submit", "payer", *flags, "--wait", "--timeout", "5", "--store", url)
    assert_one_line_error(waited, EXIT_FAILURE, f"run {done['id']} was purged at ")
    other = leaseward("submit", "payer", "--input", '{"order": "B-2"}', "--idempotency-key",
                      "checkout-A-42", "--store", url)  # fmt: skip
    assert_one_line_error(other, EXIT_FAILURE, f"already used by run {done['id']}")
    # A routine purge again forgets nothing.
    ok("purge", "--finished-before", "1s", "--store", url)
    assert submit(url, *flags) == done["id"]
    assert run_ids(url) == []
    assert [call["run_id"] for call in read_lines(calls_file)] == [done["id"]]

    daemon.stop_cleanly()
    dry = ok("purge", "--forget-keys-older-than", "1s", "--dry-run", "--store", url).stdout
    assert dry.startswith("would forget 1 idempotency key of purged runs first used before ")
    assert dry.endswith(", in 1 batch; nothing changed (dry run)\n")
    assert submit(url, *flags) == done["id"]
    forgot = ok("purge", "--forget-keys-older-than", "1s", "--store", url).stdout
    assert forgot.startswith("forgot 1 idempotency key of purged runs first used before ")
    # Forgotten on the operator's word: the key makes a new run.
    fresh = submit(url, *flags)
    assert fresh != done["id"]
    assert run_ids(url) == [fresh]
    missing = leaseward("show", done["id"], "--store", url)
    assert_one_line_error(missing, EXIT_FAILURE, "no run with id")
