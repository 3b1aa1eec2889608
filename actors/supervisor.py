"""The Supervisor: owns the helper actors, claims runs while it has room, and drains."""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import attrs
from anyio.abc import TaskGroup, TaskStatus

from leaseward.actors.bounds import SharedBounds
from leaseward.actors.lease_keeper import LeaseKeeper
from leaseward.actors.mailbox import Mailbox
from leaseward.actors.messages import LeasesReaped, RunEnded, SupervisorMessage, Wake
from leaseward.actors.metrics import Metrics
from leaseward.actors.persister import MAX_BATCH_ITEMS, Persister
from leaseward.actors.reaper import LeaseReaper, Reaped
from leaseward.actors.run_actor import RunActor, RunSettings, WriteInFlight
from leaseward.actors.store_faults import StoreFaults
from leaseward.runtime.agents import App
from leaseward.runtime.clock import Clock
from leaseward.runtime.errors import LeasewardError
from leaseward.runtime.logs import get_logger
from leaseward.runtime.runs import RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.runtime.workers import WorkerRegistration
from leaseward.storage.crash_points import crash_point
from leaseward.storage.protocol import ClaimRequest, Store

__all__ = [
    "CLAIM_BATCH",
    "RESTART_DELAY_SECONDS",
    "STARTING_AT_MOST",
    "WORKER_GONE_AFTER_BEATS",
    "WORKER_GONE_AFTER_MIN_SECONDS",
    "Supervisor",
    "SupervisorSettings",
    "stale_after_seconds",
]

CLAIM_BATCH = 256
"""Runs one claim leases at most, within the room the worker has: a large worker fills
in a few batches, and no worker empties a shared queue at a stroke."""
STARTING_AT_MOST = CLAIM_BATCH // 2
"""Claimed runs not yet under way (see ``RunActor``'s ``under_way``) above which no more
are claimed. A claim's lease runs from when it is sent, and until its run's first
commit or call nothing renews it: claimed faster than the process can start them, a
flood of runs waits in the event loop's queue until their leases are too short to admit
a call, and they go back to the queue to be claimed again."""
RESTART_DELAY_SECONDS = 0.5
WORKER_GONE_AFTER_BEATS = 3
"""Heartbeats a worker may miss before it is shown as gone."""
WORKER_GONE_AFTER_MIN_SECONDS = 5.0
"""However short its heartbeat interval, a worker is not shown gone sooner: a pause of
the process or a slow store must not make `submit --wait` refuse a served agent."""

log = get_logger("leaseward.supervisor")


@attrs.frozen
class SupervisorSettings:
    worker_id: str
    concurrency: int
    lease_seconds: float
    reap_interval_seconds: float
    poll_interval_seconds: float
    drain_seconds: float
    run: RunSettings
    group_commit: bool = True
    max_batch: int = MAX_BATCH_ITEMS


def stale_after_seconds(heartbeat_interval_seconds: float) -> float:
    """How long a worker beating every ``heartbeat_interval_seconds`` may stay silent."""
    return max(WORKER_GONE_AFTER_BEATS * heartbeat_interval_seconds, WORKER_GONE_AFTER_MIN_SECONDS)


def _sole_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    found: BaseException = group
    while isinstance(found, BaseExceptionGroup):
        if len(found.exceptions) != 1:
            return None
        found = found.exceptions[0]
    return found


@attrs.define
class _Local:
    actor: RunActor
    scope: anyio.CancelScope
    claimed: bool
    """Claimed from the queue, in a slot of ``concurrency``; otherwise an interactive run
    (``Runtime.run``), which executes in its caller's task and takes no slot."""
    starting: bool
    """Claimed, and not yet under way: no commit answered and no call begun, so nothing
    but the claim has given it its lease."""


# A reaped actor may still be alive (inside a call that cannot record anything)
# when its run is claimed again: one run can have two epochs here at once.
_LocalKey = tuple[str, int]


class Supervisor:
    """The root actor of one worker process."""

    def __init__(
        self,
        store: Store,
        app: App,
        settings: SupervisorSettings,
        clock: Clock,
        *,
        metrics: Metrics | None = None,
    ) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self._store = store
        self._app = app
        self.settings = settings
        self._clock = clock
        self.mailbox: Mailbox[SupervisorMessage] = Mailbox()
        # One count of store failures for all its helpers: an outage is told once.
        self._faults = StoreFaults(clock)
        self.persister = Persister(
            store,
            group_commit=settings.group_commit,
            max_batch=settings.max_batch,
            concurrent_batches=None,
            metrics=self.metrics,
            faults=self._faults,
        )
        self.keeper = LeaseKeeper(
            self.persister.renew,
            clock,
            lease_seconds=settings.lease_seconds,
            margin_seconds=settings.run.deadline_margin_seconds,
            metrics=self.metrics,
            faults=self._faults,
        )
        self._bounds = SharedBounds()
        self._agents = tuple(agent.name for agent in app.agents)
        self.registration = WorkerRegistration(
            id=settings.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            agents=self._agents,
            stale_after_seconds=stale_after_seconds(settings.reap_interval_seconds),
        )
        self.reaper = LeaseReaper(
            store,
            interval_seconds=settings.reap_interval_seconds,
            policy=settings.run.policy,
            on_reaped=self._reaped,
            metrics=self.metrics,
            worker=self.registration,
            reap=self.persister.reap,
            clock=clock,
            faults=self._faults,
        )
        # Every run this process executes, claimed or interactive: a lost lease, a drain
        # and a forced stop reach them all alike.
        self._local: dict[_LocalKey, _Local] = {}
        # How many of them each run has (two after a reap, for a moment), and how many
        # hold a slot: kept as they change, so a claim costs no pass over every run.
        self._local_runs: Counter[str] = Counter()
        self._claimed = 0
        self._starting = 0
        # Helpers outlive a cancel from outside until the runs are over: a write that is
        # finishing needs the Persister to record it and the keeper to renew its lease.
        self._helper_scopes: list[anyio.CancelScope] = []
        self._run_ended = anyio.Event()
        self._draining = anyio.Event()
        self._drain_scope: anyio.CancelScope | None = None
        self._stop_now = False
        self._claiming = True
        self._log = log.bind(worker_id=settings.worker_id)
        self.ended: Callable[[str, Settlement | None], None] | None = None
        """Told of every run this process settled, by its actor or its reaper."""

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Supervisor]:
        await self._warn_of_a_namesake()
        # Registered before the first claim, so that a submit made once this is
        # running sees its agents served.
        await self._registry(self._store.register_worker)
        try:
            await self._store.rehearse()
            async with anyio.create_task_group() as helpers:
                try:
                    await helpers.start(self._keep_alive, "persister", self.persister.run)
                    await helpers.start(self._keep_alive, "keeper", self.keeper.run)
                    await helpers.start(self._keep_alive, "reaper", self.reaper.run)
                    async with anyio.create_task_group() as runs:
                        runs.start_soon(self._claim_loop, runs)
                        try:
                            yield self
                        finally:
                            with anyio.CancelScope(shield=True):
                                await self._drain()
                            runs.cancel_scope.cancel()
                finally:
                    for scope in self._helper_scopes:
                        scope.cancel()
        except BaseExceptionGroup as group:
            # The caller's own exception comes back wrapped by our task groups;
            # hand it back as it was raised, so `except StoreError:` still works.
            leaf = _sole_leaf(group)
            if leaf is None:
                raise
            raise leaf from leaf.__cause__
        finally:
            # After the reaper stopped, so no heartbeat can bring the row back.
            with anyio.CancelScope(shield=True):
                await self._registry(lambda worker: self._store.remove_worker(worker.id))

    async def _warn_of_a_namesake(self) -> None:
        """Say so when a live worker of another process has this worker's id. Leases are
        fenced by epoch, so the two share no run; but they share one row of the
        registry, which the first of them to stop removes."""
        me = self.registration
        try:
            workers = await self._store.list_workers()
        except LeasewardError:
            return
        for other in workers:
            if other.id == me.id and other.live and (other.host, other.pid) != (me.host, me.pid):
                self._log.warning("worker.id_in_use", host=other.host, pid=other.pid)

    async def _registry(self, change: Callable[[WorkerRegistration], Awaitable[None]]) -> None:
        """Register or remove this worker; a store fault is logged, never fatal: the
        reaper's next beat registers it again, and a row left behind shows as gone."""
        try:
            await change(self.registration)
        except LeasewardError as exc:
            self._log.warning("worker.registry_failed", error=exc.message)

    async def _keep_alive(
        self,
        name: str,
        body: Callable[..., Awaitable[None]],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run a helper actor, restarting it when it crashes; its mailbox survives."""
        started = False
        with anyio.CancelScope(shield=True) as scope:
            self._helper_scopes.append(scope)
            while True:
                try:
                    if started:
                        await body()
                    else:
                        started = True
                        await body(task_status=task_status)
                except Exception:
                    self._log.exception("actor.crashed", actor=name)
                    await anyio.sleep(RESTART_DELAY_SECONDS)
                    self._log.info("actor.restarted", actor=name)

    def wake(self) -> None:
        self.mailbox.send_nowait(Wake())

    async def _reaped(self, reaped: tuple[Reaped, ...]) -> None:
        await self.mailbox.send(LeasesReaped(tuple((r.run_id, r.epoch) for r in reaped)))
        if self.ended is not None:
            for run in reaped:
                if run.settlement.target.terminal:
                    self.ended(run.run_id, run.settlement)

    async def _claim_loop(self, runs: TaskGroup) -> None:
        settings = self.settings
        while self._claiming:
            room = settings.concurrency - self._claimed
            claimed: tuple[RunRecord, ...] = ()
            if self._can_claim():
                try:
                    # Shielded: a claim cut off by shutdown may have committed, and its
                    # runs would sit leased until they expire. Finished, they are
                    # started and, the scope being cancelled, released at once.
                    with anyio.CancelScope(shield=True):
                        sent_at = self._clock.monotonic()
                        claimed = await self.persister.claim(
                            ClaimRequest(
                                settings.worker_id,
                                min(room, CLAIM_BATCH),
                                settings.lease_seconds,
                                self._agents,
                                exclude=self._exclude(),
                            )
                        )
                except LeasewardError as exc:
                    self._faults.failed(self._log, "claim.failed", exc.message)
                else:
                    self._faults.answered("claim.failed")
                if claimed:
                    crash_point("claim")
                for record in claimed:
                    # Even when a drain began meanwhile: the actor releases the run
                    # at its first boundary, where an unstarted claim would sit leased.
                    self._start(runs, record, sent_at + settings.lease_seconds)
            if claimed and len(claimed) == min(room, CLAIM_BATCH) and self._can_claim():
                # The claim above is shielded: a cancelled loop stops here, not there.
                await anyio.lowlevel.checkpoint()
                continue
            await self._wait_for_mail()

    def _can_claim(self) -> bool:
        return self._claimed < self.settings.concurrency and self._starting <= STARTING_AT_MOST

    def _exclude(self) -> tuple[str, ...]:
        """The runs with an actor here: the store may have queued one again (reaped by
        another worker while its actor still runs), and one run must never execute
        twice at once in this process. Unsorted, from the count kept of them: with
        many runs in flight a claim must not pass over them one by one in Python."""
        return tuple(self._local_runs)

    async def _wait_for_mail(self) -> None:
        """Until mail comes, the store hears of new work (another process's submit or
        requeue), or the poll interval passes; then handle whatever mail there is."""
        poll = self.settings.poll_interval_seconds
        with anyio.move_on_after(poll):
            async with anyio.create_task_group() as waiting:
                waiting.start_soon(self._until_work, poll, waiting.cancel_scope)
                self._handle(await self.mailbox.receive())
                waiting.cancel_scope.cancel()
        while (message := self.mailbox.receive_nowait()) is not None:
            self._handle(message)

    async def _until_work(self, timeout: float, waiting: anyio.CancelScope) -> None:
        await self._store.wait_for_work(timeout)
        waiting.cancel()

    def _handle(self, message: SupervisorMessage) -> None:
        if isinstance(message, LeasesReaped):
            for run_id, epoch in message.leases:
                local = self._local.get((run_id, epoch))
                if local is not None:
                    # The store no longer counts this worker as the holder: stop it
                    # now, before it spends time on work it could not record anyway,
                    # a write included.
                    self._log.warning("lease.lost", run_id=run_id, by="reaper")
                    local.actor.cut_off()
                    local.scope.cancel()

    def _new_actor(self, record: RunRecord, lease_deadline: float, *, claimed: bool) -> RunActor:
        return RunActor(
            record,
            self._app.agent(record.agent),
            persist=self.persister.persist,
            load_steps=self._store.list_steps,
            load_requests=self._store.list_requests,
            settings=self.settings.run,
            clock=self._clock,
            worker_id=self.settings.worker_id,
            lease_deadline=lease_deadline,
            keeper=self.keeper,
            draining=self._draining,
            metrics=self.metrics,
            under_way=self._under_way if claimed else None,
            bounds=self._bounds,
        )

    def _start(self, runs: TaskGroup, record: RunRecord, lease_deadline: float) -> None:
        local = self._enter(record, lease_deadline, claimed=True)
        self._log.info("run.claimed", run_id=record.id, epoch=record.epoch, agent=record.agent)
        runs.start_soon(self._run_claimed, local)

    async def _run_claimed(self, local: _Local) -> None:
        try:
            await self._run_actor(local)
        except Exception:
            # A fault of one run is not the worker's: the other runs go on. This one's
            # lease is left to run out, and the reaper recovers it as it recovers the run
            # of a worker that died, by what its journal holds (an open intent included).
            self._log.exception("run.crashed", run_id=local.actor.run_id, epoch=local.actor.epoch)
            self.metrics.run_crashed()

    async def run_interactive(self, record: RunRecord, lease_deadline: float) -> Settlement | None:
        """Execute ``record``, a run started by this process's caller (``Runtime.run``),
        in the caller's task until it ends; returns the settlement its actor stored.

        It is one of this Supervisor's runs like those it claimed: a reap of its lease
        cancels it, a drain waits for it and then cancels it, stop_now() cuts off its
        write. A cancel of the caller's task reaches it as always.
        """
        return await self._run_actor(self._enter(record, lease_deadline, claimed=False))

    def _enter(self, record: RunRecord, lease_deadline: float, *, claimed: bool) -> _Local:
        actor = self._new_actor(record, lease_deadline, claimed=claimed)
        local = _Local(actor, anyio.CancelScope(), claimed, starting=claimed)
        self._local[(record.id, record.epoch)] = local
        self._local_runs[record.id] += 1
        self._claimed += claimed
        self._starting += claimed
        return local

    def _under_way(self, run_id: str, epoch: int) -> None:
        local = self._local.get((run_id, epoch))
        if local is None or not local.starting:
            return
        local.starting = False
        self._starting -= 1
        if self._starting == STARTING_AT_MOST:
            # The claim loop may be waiting for exactly this.
            self.mailbox.send_nowait(Wake())

    async def _run_actor(self, local: _Local) -> Settlement | None:
        actor = local.actor
        settlement: Settlement | None = None
        try:
            with local.scope:
                settlement = await actor.run()
        finally:
            self._under_way(actor.run_id, actor.epoch)
            if self._local.pop((actor.run_id, actor.epoch), None) is not None:
                self._local_runs[actor.run_id] -= 1
                if not self._local_runs[actor.run_id]:
                    del self._local_runs[actor.run_id]
                self._claimed -= local.claimed
            if local.claimed:
                self.mailbox.send_nowait(RunEnded(actor.run_id))
            self._run_ended.set()
            self._run_ended = anyio.Event()
            if self.ended is not None:
                self.ended(actor.run_id, settlement)
        return settlement

    async def _drain(self) -> None:
        """Stop claiming, let runs reach a step boundary, and release their leases.

        Past the drain's time, runs are cancelled: a provider or read-only call is cut
        off and its run released, but a write in flight is finished and recorded first,
        however long its own timeout lets it take (G13).
        """
        self._claiming = False
        self._draining.set()
        self.mailbox.send_nowait(Wake())
        if not self._local:
            return
        self._log.info("worker.draining", runs=len(self._local))
        # The reaper's next beat says so: the registry then shows this worker draining,
        # and no longer counts it as serving its agents.
        self.registration = attrs.evolve(self.registration, draining=True)
        self.reaper.worker = self.registration
        drain_seconds = 0.0 if self._stop_now else self.settings.drain_seconds
        with anyio.move_on_after(drain_seconds) as self._drain_scope:
            await self._until_idle()
        for local in list(self._local.values()):
            local.scope.cancel()
        if not self._stop_now:
            # After stop_now these writes are being cut off, as worker.cutting_off said:
            # a line saying they are finished would contradict it.
            for write in self.writes_in_flight():
                self._log.info("worker.finishing_write", **attrs.asdict(write))
        await self._until_idle()

    def writes_in_flight(self) -> tuple[WriteInFlight, ...]:
        return tuple(
            local.actor.writing for local in self._local.values() if local.actor.writing is not None
        )

    def stop_now(self) -> tuple[WriteInFlight, ...]:
        """Cut a drain short: runs still going are interrupted instead of awaited, writes
        in flight included, interactive runs' as well. Returns those writes, each logged
        before it is cut off."""
        self._stop_now = True
        cut = self.writes_in_flight()
        for write in cut:
            self._log.warning("worker.cutting_off", **attrs.asdict(write))
        for local in self._local.values():
            local.actor.cut_off()
        if self._drain_scope is not None:
            self._drain_scope.cancel()
        return cut

    async def _until_idle(self) -> None:
        while self._local:
            await self._run_ended.wait()

    @property
    def active_runs(self) -> int:
        return len(self._local)
