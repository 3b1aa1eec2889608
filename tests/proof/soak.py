"""The soak: many worker processes on one store, killed, frozen and fed faults at random.

``python -m tests.proof.soak --kills 1000 --faults 10000 --minutes 20`` runs, on
each store in turn (SQLite, then PostgreSQL unless ``--stores sqlite``), a pool
of ``proof_worker.py`` processes working a queue the driver keeps stocked with
runs of every effect (some with bad tool arguments). Meanwhile it SIGKILLs
workers at random, starts others with a random crash point armed (they kill
themselves there), SIGSTOPs workers past their lease and continues them later,
and the workers' stores refuse or delay a share of commits and claims. Each
store gets its share of the kills, faults and minutes; when its targets are
reached (or its time is out) the chaos stops, a clean worker finishes the
queue, and the invariants are counted from the ledger and the journal. Prints
one table row per store; exits 1 if any invariant is not 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import attrs

from leaseward import Client, RunState
from leaseward.runtime.errors import LeasewardError
from leaseward.storage import open_store
from leaseward.storage.crash_points import POINTS
from tests.proof.invariants import NAMES, ProcessLife, count, read_journal
from tests.proof.proof_app import EFFECTS, order, read_lines
from tests.proof.scenarios import start_worker, worker_env

WORKERS = 4
CONCURRENCY = 8
FAULT_RATE = 0.2
TICK_SECONDS = 0.25
KILL_CHANCE = 0.25
PAUSE_CHANCE = 0.1
ARMED_CHANCE = 0.5
BAD_INPUT_CHANCE = 0.1
PAUSE_SECONDS = (1.5, 3.0)
FINISH_SECONDS = 180.0
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@attrs.define
class Row:
    scenario: str
    runs: int = 0
    kills: int = 0
    pauses: int = 0
    faults: int = 0
    bad_inputs: int = 0
    tally: dict[str, int] = attrs.Factory(dict)


@attrs.define
class Slot:
    proc: subprocess.Popen[bytes]
    armed: bool
    paused_until: float | None = None
    paused_at: float = 0.0


class Soak:
    def __init__(self, name: str, url: str, directory: Path, kills: int, faults: int) -> None:
        self.row = Row(name)
        self.url = url
        self.directory = directory
        self.kills_target = kills
        self.faults_target = faults
        self.lives: dict[int, ProcessLife] = {}
        self.slots: list[Slot] = []
        self.run_ids: list[str] = []
        self.random = random.Random(name)
        self.marker = directory / "marker.jsonl"

    def faults(self) -> int:
        return sum(
            len(path.read_bytes().splitlines()) for path in self.directory.glob("faults-*.txt")
        )

    def spawn(self, *, chaos: bool) -> Slot:
        seed = self.random.randrange(1 << 30)
        args = ["--concurrency", str(CONCURRENCY), "--log-file", str(self.directory / "w.log")]
        extra: dict[str, str] = {}
        armed = chaos and self.random.random() < ARMED_CHANCE
        if chaos:
            faults_file = self.directory / f"faults-{seed}.txt"
            args += ["--fault-rate", str(FAULT_RATE), "--faults-file", str(faults_file)]
            args += ["--seed", str(seed)]
        if armed:
            extra = {
                "LEASEWARD_TEST_CRASH_POINT": self.random.choice(POINTS),
                "LEASEWARD_TEST_CRASH_MARKER": str(self.marker),
            }
        proc = start_worker(self.url, self.directory, *args, env=worker_env(**extra))
        self.lives[proc.pid] = ProcessLife()
        return Slot(proc, armed)

    async def stock(self, client: Client, target: int) -> None:
        # A frozen worker may hold SQLite's write lock past the busy timeout.
        with contextlib.suppress(LeasewardError):
            await self._stock(client, target)

    async def _stock(self, client: Client, target: int) -> None:
        counts = await client.store.count_runs()
        waiting = counts.get(RunState.QUEUED, 0) + counts.get(RunState.RUNNING, 0)
        for _ in range(max(0, target - waiting)):
            effect = self.random.choice(list(EFFECTS))
            bad = self.random.random() < BAD_INPUT_CHANCE
            self.run_ids.append(await client.submit(effect, order(effect, bad=bad)))
            self.row.bad_inputs += bad

    def record_exit(self, slot: Slot) -> None:
        """Note when a worker that exited by itself died: at its crash point, if it had one."""
        life = self.lives[slot.proc.pid]
        if life.died is not None:
            return
        if slot.proc.returncode == -signal.SIGKILL:
            self.row.kills += 1
        # Read after the exit was seen: the marker is written before the self-kill.
        hits = {line["pid"]: line["t"] for line in read_lines(self.marker)}
        life.died = hits.get(slot.proc.pid, time.time())

    def reap_exited(self) -> None:
        for index, slot in enumerate(self.slots):
            if slot.proc.poll() is not None:
                self.record_exit(slot)
                self.slots[index] = self.spawn(chaos=True)

    def chaos(self) -> None:
        now = time.time()
        for slot in self.slots:
            if slot.paused_until is not None and now >= slot.paused_until:
                slot.proc.send_signal(signal.SIGCONT)
                self.lives[slot.proc.pid].pauses.append((slot.paused_at, time.time()))
                slot.paused_until = None
        running = [s for s in self.slots if s.paused_until is None and s.proc.poll() is None]
        if not running:
            return
        slot = self.random.choice(running)
        dice = self.random.random()
        if dice < KILL_CHANCE:
            slot.proc.kill()
            slot.proc.wait()
            self.lives[slot.proc.pid].died = time.time()
            self.row.kills += 1
        elif dice < KILL_CHANCE + PAUSE_CHANCE:
            slot.paused_at = time.time()
            slot.proc.send_signal(signal.SIGSTOP)
            slot.paused_until = slot.paused_at + self.random.uniform(*PAUSE_SECONDS)
            self.row.pauses += 1

    def stop_all(self) -> None:
        for slot in self.slots:
            if slot.proc.poll() is not None:
                self.record_exit(slot)
                continue
            if slot.paused_until is not None:
                slot.proc.send_signal(signal.SIGCONT)
                self.lives[slot.proc.pid].pauses.append((slot.paused_at, time.time()))
            slot.proc.kill()
            slot.proc.wait()
            self.lives[slot.proc.pid].died = time.time()

    async def _settled(self, client: Client) -> bool:
        try:
            counts = await client.store.count_runs()
        except LeasewardError:
            return False
        return not counts.get(RunState.QUEUED) and not counts.get(RunState.RUNNING)

    async def run(self, seconds: float) -> Row:
        deadline = time.monotonic() + seconds
        # Created as a worker creates it: the client that watches creates none.
        await (await open_store(self.url)).aclose()
        async with Client.open(self.url) as client:
            self.slots = [self.spawn(chaos=True) for _ in range(WORKERS)]
            try:
                while time.monotonic() < deadline and (
                    self.row.kills < self.kills_target or self.faults() < self.faults_target
                ):
                    await self.stock(client, WORKERS * CONCURRENCY * 2)
                    self.reap_exited()
                    self.chaos()
                    await anyio.sleep(TICK_SECONDS)
            finally:
                self.stop_all()
            self.row.faults = self.faults()
            # Chaos over: one clean worker finishes every run still in the queue.
            finisher = self.spawn(chaos=False)
            try:
                with anyio.move_on_after(FINISH_SECONDS):
                    while True:
                        if await self._settled(client):
                            break
                        await anyio.sleep(TICK_SECONDS)
            finally:
                finisher.proc.kill()
                finisher.proc.wait()
                self.lives[finisher.proc.pid].died = time.time()
        self.row.runs = len(self.run_ids)
        ledger = read_lines(self.directory / "ledger.jsonl")
        journal = await read_journal(self.url, self.run_ids)
        self.row.tally = count(ledger, journal, self.lives, now=time.time())
        lives = {pid: attrs.asdict(life) for pid, life in self.lives.items()}
        (self.directory / "lives.json").write_text(json.dumps(lives))
        return self.row


def table(rows: list[Row]) -> str:
    head = ["scenario", "runs", "kills", "pauses", "faults", "bad inputs", *NAMES]
    body = [
        [r.scenario, r.runs, r.kills, r.pauses, r.faults, r.bad_inputs]
        + [r.tally.get(name, 0) for name in NAMES]
        for r in rows
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in body]
    return "\n".join(lines)


async def pg_database(admin_url: str, name: str, *, drop: bool) -> str:
    import asyncpg

    connection = await asyncpg.connect(admin_url)
    try:
        if drop:
            await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


async def main(args: argparse.Namespace) -> int:
    stores = args.stores.split(",")
    rows: list[Row] = []
    tmp = tempfile.mkdtemp(prefix="leaseward-soak-")
    for store in stores:
        directory = Path(tmp) / store
        directory.mkdir()
        kills = -(-args.kills // len(stores))
        faults = -(-args.faults // len(stores))
        seconds = args.minutes * 60 / len(stores)
        if store == "sqlite":
            url = f"sqlite:///{directory / 'runs.db'}"
            rows.append(await Soak("soak sqlite", url, directory, kills, faults).run(seconds))
        else:
            name = f"lw_soak_{uuid.uuid4().hex[:12]}"
            url = await pg_database(args.pg_url, name, drop=False)
            try:
                soak = Soak("soak postgresql", url, directory, kills, faults)
                rows.append(await soak.run(seconds))
            finally:
                await pg_database(args.pg_url, name, drop=True)
        # A store's row survives whatever happens to the next store's phase.
        print(table(rows[-1:]), file=sys.stderr, flush=True)
    print(table(rows))
    if any(any(row.tally.values()) for row in rows):
        print(f"kept the ledgers, logs and SQLite store for a look: {tmp}", file=sys.stderr)
        return 1
    shutil.rmtree(tmp)
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=1000, help="SIGKILLs in all")
    parser.add_argument("--faults", type=int, default=10000, help="injected store faults in all")
    parser.add_argument("--minutes", type=float, default=20.0, help="the time budget in all")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("LEASEWARD_TEST_PG_URL", DEFAULT_PG_URL),
        help="a maintenance database where the soak may create and drop its own",
    )
    return parser.parse_args(argv)


def entry(argv: list[str] | None = None) -> Any:
    return anyio.run(main, parse(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(entry())
