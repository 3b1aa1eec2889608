"""make demo-crash: a daemon killed in the middle of charging a card, and what happens next.

The script runs the real ``leaseward`` executable next to the Python running it:
it starts a daemon on a fresh store in a temporary directory, submits an order
whose agent charges a card (a ``NON_IDEMPOTENT_WRITE`` that takes a few seconds
and appends each charge to a charge ledger file), SIGKILLs the daemon while the
charge is in flight, starts another, and says in plain sentences what happens.
Exits 0 when everything went as the design promises, 1 otherwise.

The daemons import this module for its app (``--app demo_crash:build_app``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)

LEASEWARD = Path(sys.executable).with_name("leaseward")
HERE = Path(__file__).resolve().parent
CHARGES_VARIABLE = "DEMO_CHARGE_LEDGER"
CHARGE_SECONDS = 3.0
POLL_SECONDS = 0.1
WAIT_SECONDS = 30.0
DAEMON_FLAGS = (
    "--lease-seconds",
    "2",
    "--reap-interval-seconds",
    "0.2",
    "--poll-interval-seconds",
    "0.1",
    "--log-format",
    "json",
)


# -- the app the daemons serve ---------------------------------------------------------


def record_charge(charge: dict[str, Any]) -> None:
    """The card API's own books: durable before the API answers, whoever dies next."""
    with Path(os.environ[CHARGES_VARIABLE]).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(charge) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=CHARGE_SECONDS + 2)
async def charge_card(ctx: ToolContext, order_id: str, amount_cents: int) -> dict[str, Any]:
    """Charge the customer's card: the money moves at once, the answer comes slowly."""
    record_charge({"order_id": order_id, "amount_cents": amount_cents, "pid": os.getpid()})
    await anyio.sleep(CHARGE_SECONDS)
    return {"charged": amount_cents}


def _checkout(request: ProviderRequest) -> ProviderReply:
    turn = sum(1 for m in request.messages if m.role is Role.ASSISTANT)
    order_id = next(str(m.content) for m in request.messages if m.role is Role.USER)
    if turn == 0:
        arguments = {"order_id": order_id, "amount_cents": 4200}
        return ProviderReply(tool_calls=[ToolCall("charge_card", arguments, "charge-1")])
    return ProviderReply(text=f"order {order_id} is paid")


def build_app() -> App:
    return App([Agent("checkout", ScriptedProvider(_checkout), tools=[charge_card])])


# -- the narration ---------------------------------------------------------------------


class DemoFailed(Exception):
    """Something did not happen as the design promises."""


def say(text: str) -> None:
    print(textwrap.fill(text, width=88), flush=True)
    print(flush=True)


def leaseward(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(LEASEWARD), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise DemoFailed(f"leaseward {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def charges(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def one_charge(path: Path) -> dict[str, Any]:
    found = charges(path)
    if len(found) != 1:
        raise DemoFailed(f"the charge ledger holds {len(found)} charges, not 1: {found}")
    return found[0]


def wait_for(what: str, probe: Any) -> Any:
    deadline = time.monotonic() + WAIT_SECONDS
    while not (found := probe()):
        if time.monotonic() > deadline:
            raise DemoFailed(f"gave up waiting for {what}")
        time.sleep(POLL_SECONDS)
    return found


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="leaseward-demo-") as tmp:
        directory = Path(tmp)
        url = f"sqlite:///{directory / 'store.db'}"
        ledger = directory / "charges.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEWARD_", "DEMO_"))}
        env[CHARGES_VARIABLE] = str(ledger)
        daemons: list[subprocess.Popen[bytes]] = []

        def start(name: str) -> subprocess.Popen[bytes]:
            log = (directory / f"{name}.log").open("wb")
            args = ["daemon", "--app", "demo_crash:build_app", "--store", url, *DAEMON_FLAGS]
            daemon = subprocess.Popen(
                [str(LEASEWARD), *args, "--worker-id", name],
                cwd=HERE,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
            daemons.append(daemon)
            return daemon

        def run() -> dict[str, Any]:
            shown: dict[str, Any] = json.loads(
                leaseward("show", run_id, "--json", "--store", url, env=env)
            )
            return shown.get("run", shown)

        def in_state(state: str) -> dict[str, Any] | None:
            found = run()
            return found if found["state"] == state else None

        try:
            leaseward("migrate", "--store", url, env=env)
            say(f"A fresh store: {url}. The card API keeps its own charge ledger: {ledger}.")
            first = start("daemon-1")
            run_id = leaseward("submit", "checkout", "--input", '"A-1"', "--store", url, env=env)
            run_id = run_id.strip()
            say(
                f"Submitted order A-1 as run {run_id}. Daemon 1 (pid {first.pid}) claims it and "
                f"calls charge_card, a NON_IDEMPOTENT_WRITE that takes {CHARGE_SECONDS:g} s."
            )
            wait_for("the charge to start", lambda: charges(ledger))
            first.send_signal(signal.SIGKILL)
            first.wait()
            say(
                "The card API has taken the money (one line in the charge ledger), and before it "
                "could answer, daemon 1 was killed with SIGKILL. Nobody recorded the charge's "
                "outcome; the journal only holds its intent, written before the call."
            )
            second = start("daemon-2")
            say(
                f"Daemon 2 (pid {second.pid}) starts. It waits for daemon 1's lease to expire, "
                "then reaps the run."
            )
            dead = wait_for("the run to be dead-lettered", lambda: in_state("dead_lettered"))
            if dead["reason"] != "interrupted_write":
                raise DemoFailed(f"the run was dead-lettered {dead['reason']}: {dead['error']}")
            say(
                f"The run is {dead['state']}, reason {dead['reason']}: the charge may have "
                "happened, so leaseward does not run it again and does not pretend it did not; "
                "it waits for a person to decide."
            )
            found = one_charge(ledger)
            say(
                "The charge ledger holds exactly one charge: "
                f"{found['amount_cents']} cents for order {found['order_id']}."
            )
            say(
                f"An operator looks at the card API, sees the charge, and says so: "
                f"leaseward resolve {run_id} --applied"
            )
            leaseward(
                "resolve",
                run_id,
                "--applied",
                "--store",
                url,
                "--note",
                "seen in the card API",
                env=env,
            )
            done = wait_for("the run to complete", lambda: in_state("completed"))
            one_charge(ledger)
            say(
                f"Daemon 2 resumes the run from its journal, taking the charge as done: the run is "
                f"{done['state']} with the result {done['result']!r}, and the charge ledger still "
                "holds 1 charge. The card was charged once."
            )
            return 0
        except DemoFailed as exc:
            print(f"demo failed: {exc}", file=sys.stderr)
            for log in sorted(directory.glob("*.log")):
                print(f"--- {log.name}", log.read_text()[-3000:], sep="\n", file=sys.stderr)
            return 1
        finally:
            for daemon in daemons:
                if daemon.poll() is None:
                    daemon.send_signal(signal.SIGTERM)
                    try:
                        daemon.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        daemon.kill()
                        daemon.wait()


if __name__ == "__main__":
    sys.exit(main())
