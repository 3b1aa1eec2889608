"""Short leases renewed in the background while calls run, and the guard that stops a
call whose lease cannot be renewed.

Leases here are one second or less, so that what the defaults do in seconds
happens in a fraction of one; processes are paused and killed for real, and a
store is blocked by a real second connection holding SQLite's write lock.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Reason,
    RunState,
    Runtime,
    ScriptedProvider,
    StepInfo,
    StepKind,
    StepStatus,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.actors import Lease, LeaseKeeper, Persister
from leaseward.actors.lease_keeper import GUARD_TICK_SECONDS, LOOP_LATE_SECONDS
from leaseward.runtime.clock import ManualClock
from leaseward.storage.protocol import WriteBatch
from tests.integration.crash_worker import read_lines
from tests.integration.faults import FaultyExecutor, Statement, fail, faulty_store, query
from tests.integration.paused_worker import CALLS_FILE, LEASE_SECONDS, LOG_FILE, build_app
from tests.integration.support import Calls, capture_logs, one_call_agent, queued_run, until

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).resolve().with_name("paused_worker.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
REAPER: dict[str, Any] = {"reap_interval_seconds": 0.05, "poll_interval_seconds": 0.02}


def _lease_expires_at(db_path: Path, run_id: str) -> float:
    connection = sqlite3.connect(db_path)
    try:
        (expires,) = connection.execute(
            "SELECT lease_expires_at FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
    finally:
        connection.close()
    return float(expires)


# The statement that renews a batch's leases (on PostgreSQL, its fence too).
RENEWALS = ("renew_leases",)

# The statements that write an item's steps, requests or settlement: an item with none
# of these is a lease renewal alone.
_ITEM_WRITES = {
    "insert_steps": "steps",
    "insert_step": "steps",
    "insert_step_set": "steps",
    "settle_steps": "steps",
    "settle_step": "steps",
    "settle_step_set": "steps",
    "withdraw_steps": "steps",
    "insert_requests": "requests",
    "settle_runs": "settlements",
}


def _run_id(row: Any) -> str:
    return str(row["run_id"] if isinstance(row, dict) else row[0])


def count_renewals(executor: FaultyExecutor) -> list[int]:
    """How many lease renewals alone each committed write carried."""
    per_write: list[int] = []

    async def count(statement: Statement) -> None:
        transaction = statement.transaction
        assert transaction is not None

        async def committed() -> None:
            renewed = {_run_id(row) for row in statement.rows("items")}
            written = {
                _run_id(row)
                for other in transaction.statements
                if other.name in _ITEM_WRITES
                for row in other.rows(_ITEM_WRITES[other.name])
            }
            if renewed - written:
                per_write.append(len(renewed - written))

        transaction.after_commit(committed)

    executor.inject(query(*RENEWALS), after=count)
    return per_write


async def test_calls_far_longer_than_the_lease_are_renewed_together_and_never_reaped(
    store_url: str,
) -> None:
    """Five charges of 2 s each under a 0.6 s lease, with another worker reaping every
    50 ms: none is reaped or run twice, and their renewals share writes."""
    calls = Calls()

    async def slow(ctx: ToolContext) -> None:
        await anyio.sleep(2.0)

    agent = one_call_agent(
        "payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, timeout_seconds=30.0, body=slow
    )
    store, executor = await faulty_store(store_url)
    renewals_per_write = count_renewals(executor)
    async with (
        Runtime.open(store_url, App([]), worker_id="reaper", **REAPER) as reaper,
        Runtime.open(store, App([agent]), lease_seconds=0.6, concurrency=5, **REAPER) as rt,
    ):
        run_ids = await rt.submit_many("payer", [None] * 5)
        runs = [await rt.wait(run_id, timeout=30) for run_id in run_ids]
        keeper = rt.supervisor.keeper.stats
        reaped = reaper.supervisor.metrics.leases_reaped._value.get()
    await store.aclose()

    assert [(run.state, run.epoch) for run in runs] == [(RunState.COMPLETED, 1)] * 5
    assert len(calls) == 5
    assert reaped == 0
    assert keeper.guard_cancels == 0
    # Every 0.2 s, one write renewed every call in flight.
    assert keeper.renewal_batches >= 5
    assert keeper.renewals >= 5 * keeper.renewal_batches - 5
    assert max(renewals_per_write) == 5


@pytest.mark.slow
async def test_a_thousand_calls_in_flight_on_postgresql_keep_their_short_leases(
    pg_url: str,
) -> None:
    """bench/memory.py's reproduction, scaled down: 1,000 runs parked in a read-only
    call under a 3 s lease for two leases. Every lease is renewed in time: no call is
    cut off, none is found lost or reaped, and each run then finishes on its first
    epoch."""
    runs = 1_000
    calls = Calls()
    inside = anyio.Event()
    release = anyio.Event()

    async def park(ctx: ToolContext) -> None:
        if len(calls) == runs:
            inside.set()
        await release.wait()

    agent = one_call_agent("parker", ToolEffect.READ_ONLY, calls, timeout_seconds=600.0, body=park)
    async with Runtime.open(
        pg_url, App([agent]), concurrency=runs, lease_seconds=3.0, reap_interval_seconds=0.5
    ) as rt:
        run_ids = await rt.submit_many("parker", [None] * runs)
        with anyio.fail_after(120):
            await inside.wait()
        keeper = rt.supervisor.keeper.stats
        before = keeper.renewals
        await anyio.sleep(6.0)
        renewed = keeper.renewals - before
        release.set()
        finished = [await rt.wait(run_id, timeout=120) for run_id in run_ids]
        reaped = rt.supervisor.metrics.leases_reaped._value.get()

    assert (keeper.guard_cancels, keeper.leases_lost, keeper.renewals_failed) == (0, 0, 0)
    assert reaped == 0
    # A renewal a second: at least four rounds of every call went by while parked.
    assert renewed >= 4 * runs
    assert [(run.state, run.epoch) for run in finished] == [(RunState.COMPLETED, 1)] * runs
    assert len(calls) == runs


async def test_the_keeper_renews_on_its_clock_and_cuts_a_call_off_before_the_lease_ends(
    db_url: str,
) -> None:
    """On a manual clock shared with the store: a 3 s lease is renewed after 1 s; then the
    store refuses every renewal, and the call is cancelled at 0.5 s before the lease's
    end, not a moment earlier, while the store's lease still holds."""
    clock = ManualClock()
    start = clock.monotonic()
    store, executor = await faulty_store(db_url, clock=clock)
    await store.create_run(queued_run("payer"))
    [record] = await store.claim_runs("w", 1, 3.0, ["payer"])
    persister = Persister(store)
    keeper = LeaseKeeper(persister.renew, clock, lease_seconds=3.0, margin_seconds=0.5)
    lease = Lease(record.id, record.epoch, deadline=start + 3.0)
    cut_off_at: list[float] = []

    async def call() -> None:
        with anyio.CancelScope() as scope, keeper.guarding(lease, scope):
            await anyio.sleep_forever()
        cut_off_at.append(clock.monotonic())

    async with anyio.create_task_group() as tg:
        await tg.start(persister.run)
        await tg.start(keeper.run)
        tg.start_soon(call)
        clock.advance(1.0)
        await until(lambda: keeper.stats.renewals == 1, 10)
        assert lease.deadline == start + 4.0
        stored = await store.get_run(record.id)
        assert stored is not None and stored.lease_expires_at == start + 4.0

        executor.inject(query(*RENEWALS), fail())
        for failures in (1, 2):
            clock.advance(1.0)
            await until(lambda: keeper.stats.renewals_failed == failures, 10)  # noqa: B023
        clock.advance(0.4)
        await anyio.sleep(2 * GUARD_TICK_SECONDS)
        assert cut_off_at == []

        clock.advance(0.1)
        await until(lambda: bool(cut_off_at), 10)
        tg.cancel_scope.cancel()
    await store.aclose()

    assert cut_off_at == [start + 3.5]
    assert keeper.stats.guard_cancels == 1
    assert lease.cut_off is not None and "the lease could not be renewed" in lease.cut_off


async def test_a_call_admitted_with_less_lease_left_than_the_others_is_cut_off_on_time(
    db_url: str,
) -> None:
    """The guard looks through the calls only when one may be due: a call that joins
    with a nearer deadline than those already held brings that time forward."""
    clock = ManualClock()
    start = clock.monotonic()
    store, executor = await faulty_store(db_url, clock=clock)
    for _ in range(2):
        await store.create_run(queued_run("payer"))
    records = await store.claim_runs("w", 2, 3.0, ["payer"])
    persister = Persister(store)
    keeper = LeaseKeeper(persister.renew, clock, lease_seconds=3.0, margin_seconds=0.5)
    executor.inject(query(*RENEWALS), fail())
    far = Lease(records[0].id, records[0].epoch, deadline=start + 3.0)
    near = Lease(records[1].id, records[1].epoch, deadline=start + 1.25)
    cut_off_at: dict[str, float] = {}

    async def call(lease: Lease) -> None:
        with anyio.CancelScope() as scope, keeper.guarding(lease, scope):
            await anyio.sleep_forever()
        cut_off_at[lease.run_id] = clock.monotonic()

    async with anyio.create_task_group() as tg:
        await tg.start(persister.run)
        await tg.start(keeper.run)
        tg.start_soon(call, far)
        await until(lambda: keeper.calls_in_flight == 1, 10)
        # The keeper has seen the far lease, and sleeps its longest tick.
        await anyio.sleep(2 * GUARD_TICK_SECONDS)
        tg.start_soon(call, near)
        await until(lambda: keeper.calls_in_flight == 2, 10)

        clock.advance(0.5)
        await anyio.sleep(2 * GUARD_TICK_SECONDS)
        assert cut_off_at == {}
        clock.advance(0.25)
        await until(lambda: near.run_id in cut_off_at, 10)
        assert keeper.calls_in_flight == 1

        clock.advance(1.75)
        await until(lambda: far.run_id in cut_off_at, 10)
        assert keeper.calls_in_flight == 0
        tg.cancel_scope.cancel()
    await store.aclose()

    assert cut_off_at == {near.run_id: start + 0.75, far.run_id: start + 2.5}
    assert keeper.stats.guard_cancels == 2


async def test_a_round_of_renewals_is_one_write_dated_from_its_send(db_url: str) -> None:
    """Six thousand calls: a round renews them in one write, and each lease's new
    deadline counts from when that write was sent, not from when it was answered. (A
    write waits for turns of a busy event loop; rounds written in chunks one after the
    other outlasted the leases of a hundred thousand calls.)"""
    calls = 6_000
    clock = ManualClock()
    start = clock.monotonic()
    store, executor = await faulty_store(db_url, clock=clock)
    await store.commit(WriteBatch(new_runs=tuple(queued_run("payer") for _ in range(calls))))
    records = await store.claim_runs("w", calls, 3.0, ["payer"])
    persister = Persister(store)
    keeper = LeaseKeeper(persister.renew, clock, lease_seconds=3.0, margin_seconds=0.5)
    leases = [Lease(r.id, r.epoch, deadline=start + 3.0) for r in records]
    sent: list[float] = []

    async def dated(statement: Statement) -> None:
        sent.append(clock.monotonic())
        # The answer comes later on the keeper's clock than the send.
        clock.advance(0.125)

    executor.inject(query(*RENEWALS), dated)

    async def call(lease: Lease) -> None:
        with anyio.CancelScope() as scope, keeper.guarding(lease, scope):
            await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        await tg.start(persister.run)
        await tg.start(keeper.run)
        for lease in leases:
            tg.start_soon(call, lease)
        await until(lambda: keeper.calls_in_flight >= calls, 30)
        clock.advance(1.0)
        await until(lambda: keeper.stats.renewals >= calls, 30)
        tg.cancel_scope.cancel()
    await store.aclose()

    assert keeper.stats.renewal_batches == 1
    assert sent == [start + 1.0]
    assert {lease.deadline for lease in leases} == {start + 4.0}


async def test_a_round_due_while_one_is_written_follows_it_at_once(db_url: str) -> None:
    """A round that is written for longer than a renewal interval: the round due
    meanwhile is sent as soon as it is answered, with the call that began after it took
    its leases, instead of a whole interval later."""
    clock = ManualClock()
    start = clock.monotonic()
    store, executor = await faulty_store(db_url, clock=clock)
    for _ in range(2):
        await store.create_run(queued_run("payer"))
    first, later = await store.claim_runs("w", 2, 3.0, ["payer"])
    persister = Persister(store)
    keeper = LeaseKeeper(persister.renew, clock, lease_seconds=3.0, margin_seconds=0.5)
    early_lease = Lease(first.id, first.epoch, deadline=start + 3.0)
    later_lease = Lease(later.id, later.epoch, deadline=start + 4.0)
    sent: list[tuple[float, int]] = []

    async def call(lease: Lease) -> None:
        with anyio.CancelScope() as scope, keeper.guarding(lease, scope):
            await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:

        async def slow(statement: Statement) -> None:
            sent.append((clock.monotonic(), len(statement.rows("items"))))
            if len(sent) == 1:
                tg.start_soon(call, later_lease)
                # The write outlasts the interval: the keeper's next tick finds a round
                # due while this one is still unanswered.
                clock.advance(1.0)
                await anyio.sleep(6 * GUARD_TICK_SECONDS)

        executor.inject(query(*RENEWALS), slow)
        await tg.start(persister.run)
        await tg.start(keeper.run)
        tg.start_soon(call, early_lease)
        await until(lambda: keeper.calls_in_flight >= 1, 10)
        clock.advance(1.0)
        await until(lambda: keeper.stats.renewal_batches >= 2, 10)
        tg.cancel_scope.cancel()
    await store.aclose()

    assert sent == [(start + 1.0, 1), (start + 2.0, 2)]
    assert later_lease.deadline == start + 5.0


def _hold_write_lock(db_path: Path, seconds: float, held: threading.Event) -> None:
    connection = sqlite3.connect(db_path, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        connection.execute("ROLLBACK")
    finally:
        connection.close()


class ChargeOnABlockedStore:
    """A charge's body that has another connection hold SQLite's write lock for 3 s
    while it runs, and notes when it was cut off and when the store's lease ended."""

    def __init__(self, db_path: Path) -> None:
        self._db_path = db_path
        self._locker: threading.Thread | None = None
        self.cut_off: list[tuple[float, float]] = []

    async def __call__(self, ctx: ToolContext) -> None:
        held = threading.Event()
        self._locker = threading.Thread(target=_hold_write_lock, args=(self._db_path, 3.0, held))
        self._locker.start()
        await anyio.to_thread.run_sync(held.wait)
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            self.cut_off.append((time.time(), _lease_expires_at(self._db_path, ctx.run_id)))
            raise

    async def finished(self) -> None:
        assert self._locker is not None, "the charge never ran"
        await anyio.to_thread.run_sync(self._locker.join)


async def test_a_worker_whose_store_is_blocked_cuts_its_call_off_before_the_lease_expires(
    tmp_path: Path,
) -> None:
    """Another connection holds SQLite's write lock for 3 s while a charge runs under
    a 1.2 s lease: no renewal can land, so the guard cancels the charge while the
    store's lease still holds, and the run is dead-lettered for the lease."""
    db_path = tmp_path / "runs.db"
    url = f"sqlite:///{db_path}?busy_timeout_ms=20000"
    blocked = ChargeOnABlockedStore(db_path)
    calls = Calls()
    agent = one_call_agent(
        "payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, timeout_seconds=60.0, body=blocked
    )
    async with Runtime.open(url, App([agent]), lease_seconds=1.2, reap_interval_seconds=1.1) as rt:
        run = await rt.wait(await rt.submit("payer", None), timeout=30)
        guard_cancels = rt.supervisor.keeper.stats.guard_cancels
        cut_off_metric = rt.supervisor.metrics.calls_cut_off._value.get()
    await blocked.finished()

    [(cut_at, expires_at)] = blocked.cut_off
    assert cut_at < expires_at
    assert (guard_cancels, cut_off_metric) == (1, 1)
    assert (run.state, run.reason, run.epoch) == (
        RunState.DEAD_LETTERED,
        Reason.INTERRUPTED_WRITE,
        1,
    )
    assert run.error is not None and "the lease could not be renewed" in run.error
    assert len(calls) == 1


async def test_a_call_after_one_that_used_up_its_guard_is_still_cut_off_by_the_keeper(
    tmp_path: Path,
) -> None:
    """A read swallows the cancel of its timeout and returns, so the guard it used up
    is replaced before the next call. Then another connection holds SQLite's write
    lock while a charge runs under a 1.2 s lease: the keeper cuts the charge off
    through the new guard, while the store's lease still holds."""
    db_path = tmp_path / "runs.db"
    url = f"sqlite:///{db_path}?busy_timeout_ms=20000"
    blocked = ChargeOnABlockedStore(db_path)

    @tool(timeout_seconds=0.1)
    async def stubborn(ctx: ToolContext) -> str:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            return "swallowed"
        return "never"

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=60.0)
    async def charge(ctx: ToolContext) -> None:
        await blocked(ctx)

    provider = ScriptedProvider(
        [
            ProviderReply(tool_calls=(ToolCall("stubborn", {}, "call-0"),)),
            ProviderReply(tool_calls=(ToolCall("charge", {}, "call-1"),)),
            ProviderReply(text="done"),
        ]
    )
    agent = Agent("payer", provider, tools=[stubborn, charge])
    async with Runtime.open(url, App([agent]), lease_seconds=1.2, reap_interval_seconds=1.1) as rt:
        run = await rt.wait(await rt.submit("payer", None), timeout=30)
        guard_cancels = rt.supervisor.keeper.stats.guard_cancels
        steps = await rt.steps(run.id)
    await blocked.finished()

    [(cut_at, expires_at)] = blocked.cut_off
    assert cut_at < expires_at
    assert guard_cancels == 1
    assert (run.state, run.reason, run.epoch) == (
        RunState.DEAD_LETTERED,
        Reason.INTERRUPTED_WRITE,
        1,
    )
    assert run.error is not None and "the lease could not be renewed" in run.error
    assert [(step.tool, step.status) for step in steps if step.kind is StepKind.TOOL] == [
        ("stubborn", StepStatus.SUCCEEDED),
        ("charge", StepStatus.STARTED),
    ]


def _started(marker_dir: Path) -> list[dict[str, Any]]:
    return read_lines(marker_dir / CALLS_FILE)


def _spawn(db_url: str, marker_dir: Path, lookup_seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), db_url, str(marker_dir), str(lookup_seconds)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


async def _until(check: Any, timeout: float = 20.0) -> None:
    """Poll a file another process writes: nothing in this process can signal it."""
    with anyio.fail_after(timeout):
        while not check():  # noqa: ASYNC110
            await anyio.sleep(0.02)


def _journal_at(journal: Sequence[StepInfo], epoch: int) -> list[tuple[int, str | None, str]]:
    return [(s.seq, s.tool, s.status.value) for s in journal if s.epoch == epoch]


def _pause_outside_the_write_lock(pid: int, database: Path) -> None:
    """SIGSTOP the worker at a moment it does not hold SQLite's write lock: frozen while
    holding it (in a renewal's commit, say), it would stop every other writer of the file,
    which no lease can help with. Stopped, it cannot take the lock after the probe."""
    while True:
        os.kill(pid, signal.SIGSTOP)
        probe = sqlite3.connect(database, timeout=0)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.01)
        finally:
            probe.close()


@pytest.mark.slow
async def test_a_paused_worker_resumed_after_its_lease_expired_starts_nothing_and_records_nothing(
    db_url: str, tmp_path: Path
) -> None:
    """SIGSTOP a worker inside a lookup; another worker reaps the run and finishes it,
    charge included; SIGCONT: the resumed worker neither charges nor records."""
    worker = _spawn(db_url, tmp_path, lookup_seconds=1.5)
    try:
        await _until(lambda: any(c["pid"] == worker.pid for c in _started(tmp_path)))
        _pause_outside_the_write_lock(worker.pid, tmp_path / "runs.db")
        paused_at = time.monotonic()
        assert worker.stdout is not None
        run_id = worker.stdout.readline().strip().removeprefix("run_id=")
        async with Runtime.open(
            db_url, build_app(tmp_path, lookup_seconds=0.0), worker_id="taker", **REAPER
        ) as rt:
            run = await rt.wait(run_id, timeout=20)
            before = await rt.steps(run_id)
            # The pause outlasted the lease: the lease was taken, not renewed behind it.
            assert time.monotonic() - paused_at > LEASE_SECONDS
            os.kill(worker.pid, signal.SIGCONT)
            log = tmp_path / LOG_FILE
            await _until(lambda: "lease.lost" in log.read_text())
            await anyio.sleep(0.3)
            after = await rt.steps(run_id)
    finally:
        worker.kill()
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()

    assert (run.state, run.epoch) == (RunState.COMPLETED, 2)
    charges = [c for c in _started(tmp_path) if c["tool"] == "charge"]
    assert [(c["epoch"], c["pid"]) for c in charges] == [(2, os.getpid())]
    assert _journal_at(after, 1) == _journal_at(before, 1)
    assert [s.seq for s in after] == [s.seq for s in before]


@pytest.mark.slow
async def test_a_killed_worker_inside_a_long_call_holds_its_runs_one_lease_at_most(
    db_url: str, tmp_path: Path
) -> None:
    """SIGKILL a worker inside a lookup whose timeout is 60 s: the store's lease ends at
    most one lease after the kill, and another worker reaps and reruns the run long
    before the call's timeout could have passed."""
    worker = _spawn(db_url, tmp_path, lookup_seconds=3600.0)
    try:
        await _until(lambda: any(c["pid"] == worker.pid for c in _started(tmp_path)))
        # Past two renewal intervals, so the lease seen below is a renewal's.
        await anyio.sleep(LEASE_SECONDS)
        os.kill(worker.pid, signal.SIGKILL)
        killed_at = time.time()
        worker.wait()
        assert worker.stdout is not None
        run_id = worker.stdout.readline().strip().removeprefix("run_id=")
    finally:
        worker.kill()
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()
    expires_at = _lease_expires_at(Path(db_url.removeprefix("sqlite:///")), run_id)
    assert expires_at <= killed_at + LEASE_SECONDS

    async with Runtime.open(
        db_url, build_app(tmp_path, lookup_seconds=0.0), worker_id="taker", **REAPER
    ) as rt:
        run = await rt.wait(run_id, timeout=20)
    assert (run.state, run.epoch) == (RunState.COMPLETED, 2)
    lookups = [(c["epoch"], c["pid"]) for c in _started(tmp_path) if c["tool"] == "lookup"]
    assert lookups == [(1, worker.pid), (2, os.getpid())]


async def test_a_run_done_well_within_its_lease_renews_it_with_none_of_its_commits(
    tmp_path: Path,
) -> None:
    """A commit renews the lease only once a third of it has passed: a write's intent and
    outcome, sent a moment after the claim, only fence, and the run's row keeps the
    renewal count its claim gave it. A run stepping longer is renewed by the keeper
    during its calls (the tests above) and by its commits once a third has passed
    (tests/unit/test_run_machine.py)."""
    db_path = tmp_path / "runs.db"
    calls = Calls()
    agent = one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls)
    async with Runtime.open(f"sqlite:///{db_path}", App([agent]), lease_seconds=30.0) as rt:
        run = await rt.wait(await rt.submit("payer", None), timeout=10)
    assert (run.state, run.epoch, len(calls)) == (RunState.COMPLETED, 1, 1)
    connection = sqlite3.connect(db_path)
    try:
        [(renewals,)] = connection.execute(
            "SELECT renewals FROM runs WHERE id = ?", (run.id,)
        ).fetchall()
    finally:
        connection.close()
    assert renewals == 1


async def test_a_run_of_many_quick_writes_outlasting_its_lease_is_never_reaped(
    store_url: str,
) -> None:
    """Most of a run's commits only fence: 120 quick charges, each committing its intent
    and its outcome, step on for several 0.6 s leases with another worker reaping every
    50 ms. The keeper's renewals and the commits sent once a third of the lease passed
    keep the run: it is never reaped, every charge runs once, and its lease was renewed
    along the way."""
    charges: list[int] = []

    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(ctx: ToolContext, amount: int) -> int:
        charges.append(amount)
        await anyio.sleep(0.02)
        return amount

    turns = 120

    def reply(request: ProviderRequest) -> ProviderReply:
        turn = (len(request.messages) - 1) // 2
        if turn < turns:
            return ProviderReply(tool_calls=[ToolCall("charge", {"amount": turn}, f"c{turn}")])
        return ProviderReply(text="done")

    agent = Agent("payer", ScriptedProvider(reply), tools=[charge], max_steps=turns + 1)
    async with (
        Runtime.open(store_url, App([]), worker_id="reaper", **REAPER) as reaper,
        Runtime.open(store_url, App([agent]), lease_seconds=0.6, **REAPER) as rt,
    ):
        started = time.monotonic()
        run = await rt.wait(await rt.submit("payer", None), timeout=60)
        took = time.monotonic() - started
        reaped = reaper.supervisor.metrics.leases_reaped._value.get()
        renewed = rt.supervisor.metrics.registry.get_sample_value("leaseward_leases_renewed_total")

    assert took > 3 * 0.6, f"the run took {took:.2f} s, not several leases"
    assert (run.state, run.epoch, reaped) == (RunState.COMPLETED, 1, 0)
    assert charges == list(range(turns))
    assert renewed is not None and renewed > 0


@pytest.mark.parametrize("blocking", [True, False], ids=["time.sleep", "anyio.sleep"])
async def test_a_tool_that_blocks_the_event_loop_is_named_in_the_log(
    db_url: str, blocking: bool
) -> None:
    """A tool that blocks the loop holds up every renewal of the worker, and a lease
    that runs out meanwhile is reaped under a live call: the log says why."""
    calls = Calls()

    async def hold(ctx: ToolContext) -> None:
        if blocking:
            time.sleep(1.5)  # the mistake this test makes on purpose
        else:
            await anyio.sleep(1.5)

    agent = one_call_agent("reader", ToolEffect.READ_ONLY, calls, body=hold)
    with capture_logs() as logs:
        async with Runtime.open(db_url, App([agent]), lease_seconds=6.0) as rt:
            run = await rt.wait(await rt.submit("reader", None), timeout=30)
            stalls = rt.supervisor.keeper.stats.loop_stalls
    blocked = [line for line in logs if line["event"] == "worker.loop_blocked"]
    assert run.state is RunState.COMPLETED
    if blocking:
        assert stalls == 1
        [line] = blocked
        assert line["seconds"] >= LOOP_LATE_SECONDS
    else:
        assert (stalls, blocked) == (0, [])
