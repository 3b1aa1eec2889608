"""Store faults made by real means, not by a wrapper that pretends: a lost COMMIT answer
(a TCP proxy), terminated PostgreSQL backends and a restarted server, SQLite's write
lock held by another process, a read-only file, a full disk.

Each test runs a few runs of lookup (read-only) -> charge (non-idempotent write) ->
"done", brings the fault on while the first charge is in its call, so that its outcome
batch meets the fault, and lifts it. Then it checks the same promises: reads went on
during the fault, and nothing is lost (G1-G4): every accepted run is visible and ends
terminal, no charge ran twice, every charge found its intent in the database when it
started, and no run completed over a charge whose result is not in its journal.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import asyncpg
import pytest

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Reason,
    RecoveryPolicy,
    Role,
    RunInfo,
    RunState,
    Runtime,
    ScriptedProvider,
    StepInfo,
    StepStatus,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.storage import Store
from tests.file_modes import unwritable
from tests.integration.faults import (
    FaultyExecutor,
    Statement,
    faulty_store,
    hold,
    query,
    records_tool,
)
from tests.integration.pg_proxy import CommitDropper
from tests.integration.support import Calls, capture_logs, events, one_call_agent

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {
    "poll_interval_seconds": 0.02,
    "reap_interval_seconds": 0.05,
    "lease_seconds": 2.0,
    "recovery": RecoveryPolicy(backoff_base_seconds=0.05, backoff_cap_seconds=0.2),
}
RUNS = 4
SETTLE_SECONDS = 30.0

Probe = Callable[[str], Awaitable[bool]]
Fault = Callable[[str], AbstractAsyncContextManager[None]]


class Workload:
    """RUNS runs of lookup -> charge -> "done"; the first charge brings the fault on."""

    def __init__(self, probe: Probe) -> None:
        self.calls = Calls()
        self.intent_found: list[bool] = []
        self.first_charge = anyio.Event()
        self.fault_on = anyio.Event()
        # When the first charge returned (the host's clock): its outcome's batch is sent
        # after this, where a lease renewal of its run may have been sent before.
        self.first_returned_at: float | None = None
        self.charged_run = ""
        self._probe = probe

        # Short timeouts make short leases: a run whose settle failed is reaped soon.
        @tool(effect=ToolEffect.READ_ONLY, timeout_seconds=2.0)
        async def lookup(ctx: ToolContext) -> str:
            return "found"

        @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=2.0)
        async def charge(ctx: ToolContext, amount: int) -> int:
            self.calls.record(ctx, amount=amount)
            # G3, checked in the database itself, on a connection of its own.
            self.intent_found.append(await self._probe(ctx.run_id))
            if not self.first_charge.is_set():
                self.charged_run = ctx.run_id
                self.first_charge.set()
                await self.fault_on.wait()
                self.first_returned_at = time.time()
            return amount

        def answer(request: ProviderRequest) -> ProviderReply:
            done = sum(1 for message in request.messages if message.role is Role.TOOL)
            if done == 0:
                return ProviderReply(tool_calls=[ToolCall("lookup", {}, "l1")])
            if done == 1:
                return ProviderReply(tool_calls=[ToolCall("charge", {"amount": 5}, "c1")])
            return ProviderReply(text="done")

        provider = ScriptedProvider(answer, timeout_seconds=1.0)
        self.app = App([Agent("payer", provider, tools=[lookup, charge])])


async def under_fault(
    store: str | Store,
    workload: Workload,
    fault: Fault,
    *,
    reads_during: bool = True,
    concurrency: int = 2,
    lease_seconds: float = FAST["lease_seconds"],
) -> tuple[list[RunInfo], dict[str, list[StepInfo]]]:
    """Run the workload with ``fault`` brought on at the first charge; check the promises."""
    options = {**FAST, "lease_seconds": lease_seconds}
    async with Runtime.open(store, workload.app, concurrency=concurrency, **options) as rt:
        ids = [await rt.submit("payer", n) for n in range(RUNS)]
        with anyio.fail_after(SETTLE_SECONDS):
            await workload.first_charge.wait()
        async with fault(workload.charged_run):
            workload.fault_on.set()
            if reads_during:
                assert [(await rt.get(run_id)).id for run_id in ids] == ids
        runs = [await rt.wait(run_id, timeout=SETTLE_SECONDS) for run_id in ids]
        journals = {run_id: await rt.steps(run_id) for run_id in ids}
    check_promises(workload, runs, journals)
    return runs, journals


def check_promises(
    workload: Workload, runs: Sequence[RunInfo], journals: dict[str, list[StepInfo]]
) -> None:
    executed = Counter(call["run_id"] for call in workload.calls.seen)
    assert set(executed.values()) <= {1}, f"a charge ran twice: {executed}"
    assert all(workload.intent_found), "a charge ran without a durable intent"
    for run in runs:
        assert run.state.terminal, run
        charges = [s for s in journals[run.id] if s.tool == "charge"]
        if executed[run.id]:
            assert charges, f"run {run.id} charged and its journal does not say so"
        if run.state is RunState.COMPLETED:
            assert executed[run.id] == 1
            assert [s.status for s in charges] == [StepStatus.SUCCEEDED], (
                f"run {run.id} completed over a charge with no recorded result"
            )


# -- SQLite ---------------------------------------------------------------------------


def sqlite_probe(path: Path) -> Probe:
    async def probe(run_id: str) -> bool:
        def read() -> bool:
            connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
            try:
                row = connection.execute(
                    "SELECT status FROM steps WHERE run_id = ? AND tool = 'charge'", (run_id,)
                ).fetchone()
            finally:
                connection.close()
            return row is not None and row[0] == StepStatus.STARTED.value

        return await anyio.to_thread.run_sync(read)

    return probe


HOLD_LOCK = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
connection.execute("ROLLBACK")
"""


async def test_sqlite_write_lock_held_by_another_process_past_the_busy_timeout(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    workload = Workload(sqlite_probe(path))

    @asynccontextmanager
    async def locked(run_id: str) -> AsyncIterator[None]:
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None
            assert await anyio.to_thread.run_sync(holder.stdout.readline) == "locked\n"
            yield
            # Well past the 100 ms busy timeout, while the runs keep trying.
            await anyio.sleep(0.5)
        finally:
            assert holder.stdin is not None
            holder.stdin.close()
            await anyio.to_thread.run_sync(holder.wait)

    with capture_logs() as logs:
        runs, _ = await under_fault(f"sqlite:///{path}?busy_timeout_ms=100", workload, locked)
    assert "persister.batch_failed" in events(logs)
    assert any("locked" in str(e.get("error")) for e in logs if e["event"] == "audit.failed")
    assert {r.state for r in runs} <= {RunState.COMPLETED, RunState.DEAD_LETTERED}


async def test_sqlite_database_made_read_only_mid_run(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    workload = Workload(sqlite_probe(path))

    @asynccontextmanager
    async def read_only(run_id: str) -> AsyncIterator[None]:
        # The database and its log, not the shared-memory index: writes to a mapped
        # file that turned immutable kill the process with SIGBUS.
        with unwritable(path, Path(f"{path}-wal")):
            yield
            await anyio.sleep(0.3)

    with capture_logs() as logs:
        await under_fault(f"sqlite:///{path}", workload, read_only)
    assert any("disk I/O" in str(e.get("error")) for e in logs if e["event"] == "audit.failed")


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    """A 4 MiB tmpfs, unmounted afterwards; skips where mounting is not permitted."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; returns the filler file."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as out:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    out.write(chunk[:size])
            except OSError:
                continue
    return filler


async def test_sqlite_disk_full_mid_run(small_disk: Path) -> None:
    path = small_disk / "runs.db"
    workload = Workload(sqlite_probe(path))

    @asynccontextmanager
    async def full(run_id: str) -> AsyncIterator[None]:
        filler = await anyio.to_thread.run_sync(fill, small_disk)
        try:
            yield
            await anyio.sleep(0.3)
        finally:
            filler.unlink()

    with capture_logs() as logs:
        await under_fault(f"sqlite:///{path}", workload, full)
    assert any("full" in str(e.get("error")) for e in logs if e["event"] == "audit.failed")


# -- PostgreSQL -------------------------------------------------------------------------


def upstream(admin_url: str) -> tuple[str, int, str]:
    parts = urlsplit(admin_url)
    return parts.hostname or "127.0.0.1", parts.port or 5432, parts.username or "postgres"


def pg_probe(url: str) -> Probe:
    async def probe(run_id: str) -> bool:
        connection = await asyncpg.connect(url)
        try:
            status = await connection.fetchval(
                "SELECT status FROM steps WHERE run_id = $1 AND tool = 'charge'", run_id
            )
        finally:
            await connection.close()
        return bool(status == StepStatus.STARTED.value)

    return probe


BLOCKED_ROW_LEASE_SECONDS = 6.0
"""The lease of the runs whose row a test holds locked: no renewal of it falls due while
it is held, which a loaded machine may stretch past a third of a short lease. The keeper's
renewal passes a held row, so the charge's lease would run low and its call be cut off
before its outcome could be faulted on the server."""


@asynccontextmanager
async def outcome_batch_blocked(url: str, run_id: str) -> AsyncIterator[asyncpg.Connection]:
    """Holds the run's row, so the charge's outcome batch waits inside its transaction."""
    admin = await asyncpg.connect(url)
    try:
        transaction = admin.transaction()
        await transaction.start()
        await admin.execute("SELECT 1 FROM runs WHERE id = $1 FOR UPDATE", run_id)
        yield admin
    finally:
        admin.terminate()


async def until_the_outcome_waits(
    admin: asyncpg.Connection, database: str, workload: Workload
) -> None:
    """Until the first charge's outcome batch waits for the run's row.

    A batch that waits may be a lease renewal of that run, sent while the charge was in
    its call: a fault brought on then meets the renewal, and the outcome, sent after it,
    finds the fault over and is recorded. So the batch looked for is one whose statement
    began after the charge returned (the server is on this host: one clock).
    """
    with anyio.fail_after(10):
        for _ in itertools.count():
            returned_at = workload.first_returned_at
            if returned_at is not None:
                # Inside a transaction the server shows every session's activity as it
                # was at the first look: one taken before the batch began never shows it.
                await admin.execute("SELECT pg_stat_clear_snapshot()")
                waiting = await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
                    " AND wait_event_type = 'Lock' AND application_name = 'leaseward'"
                    " AND extract(epoch FROM query_start) >= $2",
                    database,
                    returned_at,
                )
                if waiting:
                    return
            await anyio.sleep(0.01)


async def test_postgres_backends_terminated_mid_batch(pg_server: Any, pg_database: str) -> None:
    url = pg_server.url_for(pg_database)
    workload = Workload(pg_probe(url))

    @asynccontextmanager
    async def terminated(run_id: str) -> AsyncIterator[None]:
        async with outcome_batch_blocked(url, run_id) as admin:
            yield
            await until_the_outcome_waits(admin, pg_database, workload)
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                " WHERE datname = $1 AND application_name LIKE 'leaseward%'",
                pg_database,
            )
            assert killed >= 2

    with capture_logs() as logs:
        runs, _ = await under_fault(
            url, workload, terminated, lease_seconds=BLOCKED_ROW_LEASE_SECONDS
        )
    assert "audit.failed" in events(logs)
    charged = next(r for r in runs if r.id == workload.charged_run)
    assert charged.state is RunState.DEAD_LETTERED
    # Every run whose outcome was in the killed transaction is dead-lettered like the
    # charged one (with two runs at once, the other's charge may have joined it).
    for run in runs:
        interrupted = (run.state, run.reason) == (RunState.DEAD_LETTERED, Reason.INTERRUPTED_WRITE)
        assert run.state is RunState.COMPLETED or interrupted, run
    assert sum(r.state is RunState.COMPLETED for r in runs) >= RUNS - 2


RESTART = ["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "restart"]


async def until_the_server_answers(admin_url: str) -> None:
    with anyio.fail_after(60):
        while True:
            try:
                connection = await asyncpg.connect(admin_url, timeout=1)
            except (OSError, asyncpg.PostgresError, TimeoutError):
                await anyio.sleep(0.1)
                continue
            await connection.close()
            return


@pytest.mark.serial
@pytest.mark.skipif(os.geteuid() != 0, reason="restarting the server takes root")
async def test_postgres_server_restarted_mid_batch(pg_server: Any, pg_database: str) -> None:
    """The only test that restarts the shared server: it waits until it answers again."""
    url = pg_server.url_for(pg_database)
    workload = Workload(pg_probe(url))

    @asynccontextmanager
    async def restarted(run_id: str) -> AsyncIterator[None]:
        async with outcome_batch_blocked(url, run_id) as admin:
            yield
            await until_the_outcome_waits(admin, pg_database, workload)
            try:
                done = await anyio.run_process(RESTART, check=False)
            finally:
                await until_the_server_answers(pg_server.admin_url)
            assert done.returncode == 0, done.stderr

    with capture_logs() as logs:
        _, journals = await under_fault(
            url, workload, restarted, lease_seconds=BLOCKED_ROW_LEASE_SECONDS
        )
    # The restart ends the lock's holder too, and the server may end it before the
    # backend of the batch waiting for it: that batch then commits before it goes, and
    # the charge is recorded. Otherwise the batch is cut off and the run fails closed.
    recorded = any(
        step.call_id == "c1" and step.status is StepStatus.SUCCEEDED
        for step in journals[workload.charged_run]
    )
    assert recorded or "audit.failed" in events(logs)


def lose_commit_of(executor: FaultyExecutor, proxy: CommitDropper, status: StepStatus) -> None:
    """Arms the proxy inside the first transaction with a ``status`` record of the charge,
    before its COMMIT."""
    # The proxy loses the next COMMIT of any connection: the worker's heartbeat, the
    # one other writer beside the Persister, must not send it meanwhile.
    one_commit = anyio.Lock()
    charge = records_tool("charge", status)

    async def arm(statement: Statement) -> None:
        await hold(one_commit)(statement)
        proxy.arm()

    executor.inject(lambda statement: not proxy.dropped and charge(statement), arm)
    executor.inject(query("beat_worker"), hold(one_commit))


@pytest.mark.parametrize(
    "lost", [StepStatus.STARTED, StepStatus.SUCCEEDED], ids=["intent", "outcome"]
)
@pytest.mark.parametrize("alone", [False, True], ids=["transaction", "one_statement"])
async def test_a_lost_commit_answer_is_decided_from_what_the_database_holds(
    pg_server: Any, pg_database: str, lost: StepStatus, alone: bool
) -> None:
    """Hole 4: the answer to the COMMIT of the charge's intent, or of its outcome, never
    comes back, though the commit applied. Before, the outcome's case dead-lettered the
    run interrupted_write over a journal that says the charge succeeded, and neither
    resolve nor redrive would move it. Now the worker reads its journal and goes on,
    whether the batch was a transaction or one statement committed on its own."""
    host, port, user = upstream(pg_server.admin_url)
    calls = Calls()
    app = App([one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, tool_name="charge")])
    async with CommitDropper(host, port) as proxy:
        store, executor = await faulty_store(proxy.url(pg_database, user), writes_alone=alone)
        lose_commit_of(executor, proxy, lost)
        one_statement = executor.inject(query("write_journal"))
        try:
            with capture_logs() as logs:
                # One run at a time: no claim commits while the armed batch is in flight.
                async with Runtime.open(store, app, concurrency=1, **FAST) as rt:
                    run = await rt.wait(await rt.submit("payer", None), timeout=20)
                    journal = await rt.steps(run.id)
        finally:
            await store.aclose()

    assert proxy.dropped == 1
    assert bool(one_statement.fired) is alone
    assert "commit.stored" in events(logs)
    assert len(calls) == 1
    assert [s.status for s in journal if s.tool == "charge"] == [StepStatus.SUCCEEDED]
    assert (run.state, run.result, run.epoch) == (RunState.COMPLETED, "done", 1)
