"""A worker process of the proof scenarios: a Runtime serving proof_app's agents.

``python proof_worker.py STORE_URL LEDGER [options]`` works the store's queue
until it is killed (or, with ``--exit-after-point``, until it was frozen at its
crash point, continued, and has no run left). Crash points come from the
``LEASEWARD_TEST_CRASH_*`` variables (see leaseward.storage.crash_points). With
``--fault-rate`` the store's executor refuses or delays that share of commits and
claims, appending one line per fault to ``--faults-file``.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
from pathlib import Path

import anyio

from leaseward import RecoveryPolicy, Runtime
from leaseward.runtime.errors import StoreError
from leaseward.storage import open_store
from tests.integration.faults import Statement, faulty_store
from tests.proof.proof_app import build_app, read_lines

LEASE_SECONDS = 1.0
DEADLINE_MARGIN_SECONDS = 0.2
REAP_INTERVAL_SECONDS = 0.05
POLL_INTERVAL_SECONDS = 0.02
# Faults and kills requeue runs often: retries must not run out, nor wait long.
POLICY = RecoveryPolicy(max_requeues=1000, backoff_base_seconds=0.01, backoff_cap_seconds=0.2)
IDLE_CHECK_SECONDS = 0.02
MAX_FAULT_DELAY_SECONDS = 0.05
REGISTRY_QUERIES = {"beat_worker", "remove_worker"}


class RandomFaults:
    """Refuses or delays a share of the worker's transactions, at random, at their first
    statement: a refusal is a connection that dropped before sending, so nothing of the
    transaction is written. The worker registry's own writes are left alone."""

    def __init__(self, rate: float, faults_file: Path, seed: int) -> None:
        self._rate = rate
        self._faults = faults_file.open("a", encoding="utf-8")
        self._random = random.Random(seed)

    def picks(self, statement: Statement) -> bool:
        return (
            statement.transaction is not None
            and not statement.transaction.statements
            and statement.name not in REGISTRY_QUERIES
            and self._random.random() < self._rate
        )

    async def fault(self, statement: Statement) -> None:
        # Every write of a worker (records, renewals, settlements, claims, reaps) is one
        # group commit of its Persister: the one place a store fault reaches them all.
        what = "claim" if statement.name == "claim_runs" else "commit"
        kind = self._random.choice(("refuse", "delay"))
        # Flushed, not fsynced: a SIGKILL loses nothing the kernel already has.
        self._faults.write(f"{what} {kind}\n")
        self._faults.flush()
        if kind == "refuse":
            raise StoreError(f"injected fault: {what} refused")
        await anyio.sleep(self._random.uniform(0, MAX_FAULT_DELAY_SECONDS))


def point_fired(marker: str | None) -> bool:
    """This process reached its crash point (and, being alive, was continued after it)."""
    return marker is not None and any(
        line["pid"] == os.getpid() for line in read_lines(Path(marker))
    )


async def main(args: argparse.Namespace) -> None:
    if args.fault_rate > 0:
        # Injected once the store is open: its migrations are not the worker's writes.
        # Batches are written as production writes them (one statement on PostgreSQL).
        store, executor = await faulty_store(args.store, writes_alone=True)
        faults = RandomFaults(args.fault_rate, Path(args.faults_file), args.seed)
        executor.inject(faults.picks, faults.fault)
    else:
        store = await open_store(args.store)
    marker = os.environ.get("LEASEWARD_TEST_CRASH_MARKER")
    try:
        async with Runtime.open(
            store,
            build_app(Path(args.ledger), tool_seconds=args.tool_seconds),
            concurrency=args.concurrency,
            lease_seconds=LEASE_SECONDS,
            reap_interval_seconds=REAP_INTERVAL_SECONDS,
            poll_interval_seconds=POLL_INTERVAL_SECONDS,
            deadline_margin_seconds=DEADLINE_MARGIN_SECONDS,
            drain_seconds=0,
            recovery=POLICY,
            worker_id=f"proof:{os.getpid()}",
        ) as rt:
            while True:
                await anyio.sleep(IDLE_CHECK_SECONDS)
                if args.exit_after_point and point_fired(marker) and rt.supervisor.active_runs == 0:
                    return
    finally:
        await store.aclose()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("ledger")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tool-seconds", type=float, default=0.05)
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--faults-file", default=os.devnull)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-file", default=os.devnull)
    parser.add_argument("--exit-after-point", action="store_true")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    # Logs go to a file: the parent reads nothing from this process's pipes.
    logging.basicConfig(
        stream=open(arguments.log_file, "a", encoding="utf-8"),  # noqa: SIM115
        format="%(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("leaseward").setLevel(logging.INFO)
    anyio.run(main, arguments)
