"""The Runtime: executes runs through a Supervisor and its actors, and holds a Client
whose writes go through them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager, nullcontext, suppress
from datetime import timedelta
from typing import Any

import anyio

from leaseward.actors.lease_keeper import RENEWALS_PER_LEASE, default_margin
from leaseward.actors.metrics import Metrics
from leaseward.actors.persister import MAX_BATCH_ITEMS
from leaseward.actors.reaper import Reaped
from leaseward.actors.run_actor import RunSettings, WriteInFlight
from leaseward.actors.supervisor import Supervisor, SupervisorSettings
from leaseward.actors.tracing import TraceSettings
from leaseward.client import WAIT_POLL_SECONDS, Client, check_store_url, new_run
from leaseward.collector import collector_tuned
from leaseward.runtime.agents import App
from leaseward.runtime.clock import MAX_DURATION_SECONDS, Clock, SystemClock
from leaseward.runtime.decisions import WAITING_STATES
from leaseward.runtime.errors import ConfigurationError, WaitTimeout
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import Reason, RecoveryPolicy, RunMode, RunState
from leaseward.runtime.listing import RunCursor
from leaseward.runtime.messages import Usage
from leaseward.runtime.retention import ForgetKeysResult, PurgeResult
from leaseward.runtime.runs import RunInfo
from leaseward.runtime.settlements import Settlement
from leaseward.runtime.workers import WorkerInfo
from leaseward.storage.connect import open_store
from leaseward.storage.protocol import Store, unwrap
from leaseward.storage.store import PURGE_BATCH_RUNS
from leaseward.storage.url import pool_size_for
from leaseward.wakeups import SettleWakeups
from leaseward.worker_ids import check_worker_id, default_worker_id, worker_id_held
from leaseward.writer import SupervisorWriter

__all__ = [
    "CONCURRENCY",
    "DRAIN_SECONDS",
    "LEASE_SECONDS",
    "POLL_INTERVAL_SECONDS",
    "REAP_INTERVAL_SECONDS",
    "Runtime",
    "check_worker_id",
    "default_worker_id",
]

CONCURRENCY = 16
LEASE_SECONDS = 10.0
REAP_INTERVAL_SECONDS = 2.0
POLL_INTERVAL_SECONDS = 1.0
DRAIN_SECONDS = 10.0


def _positive(name: str, value: Any, *, integer: bool = False) -> None:
    number_type = int if integer else int | float
    if isinstance(value, bool) or not isinstance(value, number_type) or not value > 0:
        kind = "a positive integer" if integer else "a positive number"
        raise ConfigurationError(f"{name} must be {kind}, not {value!r}")


def _seconds(name: str, value: Any, *, zero: bool = False) -> None:
    """A span of time a setting gives: past a year (infinity included) it is a slip,
    which a deadline computed from it would overflow on."""
    number = not isinstance(value, bool) and isinstance(value, int | float)
    if not number or not (value >= 0 if zero else value > 0) or value > MAX_DURATION_SECONDS:
        least = "0 or more" if zero else "greater than 0"
        raise ConfigurationError(
            f"{name} must be {least} and at most {MAX_DURATION_SECONDS:.0f} seconds "
            f"(a year), not {value!r}"
        )


def _margin(given: float | None, lease_seconds: float) -> float:
    """The lease guard's margin: given, it must leave room for one failed renewal."""
    if given is None:
        return default_margin(lease_seconds)
    interval = lease_seconds / RENEWALS_PER_LEASE
    if isinstance(given, bool) or not isinstance(given, int | float) or not 0 <= given < interval:
        raise ConfigurationError(
            f"deadline_margin_seconds must be at least 0 and less than lease_seconds / "
            f"{RENEWALS_PER_LEASE} ({interval:g}), not {given!r}"
        )
    return float(given)


@asynccontextmanager
async def _tool_sources(app: App) -> AsyncIterator[None]:
    """The app's MCP servers listed and connected, for as long as the block runs."""
    if not any(agent.sources for agent in app.agents):
        yield
        return
    try:
        # Only apps with MCP servers need the mcp package (the ``mcp`` extra).
        from leaseward.mcp.sources import serving_sources
    except ImportError as exc:
        raise ConfigurationError(
            f"the app's agents use MCP servers, and the mcp package is missing ({exc}): "
            "install leaseward[mcp]"
        ) from exc
    async with serving_sources(app):
        yield


class Runtime:
    """Executes the app's agents from a durable queue, and interactively on request.

    It offers every operation of a Client too, by handing it to ``client``: a Client
    whose new runs and cancels go through this runtime's Persister, and whose
    waiters wake as soon as this runtime settles their run.
    """

    def __init__(self, store: Store, app: App, supervisor: Supervisor, clock: Clock) -> None:
        self.app = app
        self.supervisor = supervisor
        self._clock = clock
        self._writer = SupervisorWriter(supervisor)
        self._wakeups = SettleWakeups()
        self.client = Client(store, app=app, writer=self._writer, wakeups=self._wakeups)
        supervisor.ended = self._ended

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        store: str | Store,
        app: App,
        concurrency: int = CONCURRENCY,
        lease_seconds: float = LEASE_SECONDS,
        reap_interval_seconds: float = REAP_INTERVAL_SECONDS,
        *,
        worker_id: str | None = None,
        clock: Clock | None = None,
        poll_interval_seconds: float = POLL_INTERVAL_SECONDS,
        drain_seconds: float = DRAIN_SECONDS,
        deadline_margin_seconds: float | None = None,
        recovery: RecoveryPolicy | None = None,
        group_commit: bool = True,
        max_batch: int = MAX_BATCH_ITEMS,
        metrics: Metrics | None = None,
        trace_content: bool = False,
        tune_collector: bool = True,
    ) -> AsyncIterator[Runtime]:
        """Open the store (a URL, or a Store you own), start the actors, drain on exit.

        Leaving, normally or by a cancel from outside, stops claiming and releases each
        run at its next step boundary without spending a retry. Past ``drain_seconds``
        (at once, for a cancel from outside) provider and read-only calls are cancelled
        and their runs released; a write call in flight is never cut off by either: it
        finishes, within its own timeout, and is recorded first. See stop_now().
        An interactive run still going then (``run`` called from another task) is
        waited for as long, and then fails as interrupted, its write finished first.

        ``worker_id`` names the worker in leases, logs and ``workers()``; by default
        host:pid, or host:pid/2 (/3, and so on) while another Runtime of this process
        is open under that.

        ``trace_content`` puts tool arguments and results (bounded) on the tool spans
        of a configured OpenTelemetry SDK; they may hold personal data, so it is off.

        ``tune_collector`` raises CPython's first garbage-collection threshold to
        10,000 while the Runtime is open, where the process has it lower (the
        default of CPython 3.11 is 700), and puts it back on exit: at the default, the
        collector walks every run in flight over and over, 15-20% of a worker's time
        at 1,000 runs. Once the collector's oldest generation holds 100,000 objects,
        it also freezes what survives each middle collection, so that no full
        collection holds the event loop (and the renewal of every lease) for a walk
        of every run parked in a call: most of a second at 10,000 runs. Frozen
        objects are still freed by their reference counts, and given back to the
        collector when the last Runtime closes (``leaseward.collector`` says why).
        False leaves the process's collector as it is.
        """
        if not isinstance(app, App):
            raise ConfigurationError(f"app must be an App, not {type(app).__name__}")
        if isinstance(store, str) or not hasattr(store, "commit"):
            check_store_url(store)
        _positive("concurrency", concurrency, integer=True)
        _positive("max_batch", max_batch, integer=True)
        _seconds("lease_seconds", lease_seconds)
        _seconds("reap_interval_seconds", reap_interval_seconds)
        _seconds("poll_interval_seconds", poll_interval_seconds)
        if reap_interval_seconds >= lease_seconds:
            # A reaper that looks less often than a lease lasts leaves a dead worker's
            # runs waiting for it longer than the lease that was meant to bound that.
            raise ConfigurationError(
                f"reap_interval_seconds ({reap_interval_seconds:g}) must be shorter than "
                f"lease_seconds ({lease_seconds:g}): a dead worker's runs wait up to "
                "lease_seconds + reap_interval_seconds to be recovered"
            )
        _seconds("drain_seconds", drain_seconds, zero=True)
        if worker_id is not None:
            check_worker_id(worker_id)
        if recovery is not None and not isinstance(recovery, RecoveryPolicy):
            raise ConfigurationError(f"recovery must be a RecoveryPolicy, not {recovery!r}")
        if metrics is not None and not isinstance(metrics, Metrics):
            raise ConfigurationError(f"metrics must be a Metrics, not {metrics!r}")
        if clock is not None and not all(
            callable(getattr(clock, name, None)) for name in ("now", "monotonic")
        ):
            raise ConfigurationError(
                f"clock must be a Clock (now() and monotonic()), such as SystemClock(), "
                f"not {clock!r}"
            )
        for name, flag in (
            ("group_commit", group_commit),
            ("trace_content", trace_content),
            ("tune_collector", tune_collector),
        ):
            if not isinstance(flag, bool):
                # Taken for its truth, "no" would turn it on.
                raise ConfigurationError(f"{name} must be True or False, not {flag!r}")
        margin = _margin(deadline_margin_seconds, lease_seconds)
        clock = clock or SystemClock()
        with worker_id_held(worker_id) as held_id:
            settings = SupervisorSettings(
                worker_id=held_id,
                concurrency=concurrency,
                lease_seconds=float(lease_seconds),
                reap_interval_seconds=float(reap_interval_seconds),
                poll_interval_seconds=float(poll_interval_seconds),
                drain_seconds=float(drain_seconds),
                run=RunSettings(
                    lease_seconds=float(lease_seconds),
                    deadline_margin_seconds=margin,
                    policy=recovery or RecoveryPolicy(),
                    tracing=TraceSettings(capture_content=trace_content),
                ),
                group_commit=group_commit,
                max_batch=max_batch,
            )
            owned = isinstance(store, str)
            opened = (
                await open_store(store, clock=clock, pool_size=pool_size_for(concurrency))
                if isinstance(store, str)
                else store
            )
            try:
                with collector_tuned() if tune_collector else nullcontext():
                    async with _tool_sources(app):
                        supervisor = Supervisor(opened, app, settings, clock, metrics=metrics)
                        async with supervisor.running():
                            runtime = cls(opened, app, supervisor, clock)
                            try:
                                yield runtime
                            finally:
                                # Before the drain, while the Persister still answers what
                                # was sent to it: nothing sent after could be answered.
                                runtime._writer.closed = True
            finally:
                if owned:
                    with anyio.CancelScope(shield=True):
                        await opened.aclose()

    def _ended(self, run_id: str, settlement: Settlement | None) -> None:
        if settlement is not None and settlement.target.terminal:
            self._wakeups.settled(run_id)

    @property
    def worker_id(self) -> str:
        return self.supervisor.settings.worker_id

    async def run(self, agent: str, input: Any, *, idempotency_key: str | None = None) -> RunInfo:
        """Run ``agent`` now, in this task, and return the finished run.

        The run is journaled and leased like any other, but never retried: any
        failure settles it ``failed``. A run that comes to a call waiting for a
        person is returned in ``waiting_for_approval`` or ``waiting_for_input``,
        holding nothing; once decided, it resumes through the queue (still never
        retried), and ``wait`` gives its end.

        With an ``idempotency_key`` that a run already has (from ``run`` or
        ``submit``, in any process), the agent is not run again: that run is
        returned once it is finished or waits for a person, waited for until then. If that run
        was purged since, this raises RunPurged: it names the run, when it was
        purged and how it had ended, and the agent does not run again (its result
        is gone, and running it again could repeat its writes). A key already
        used for another agent or input raises IdempotencyKeyConflict.
        """
        settings = self.supervisor.settings
        new = new_run(
            agent,
            input,
            RunMode.INTERACTIVE,
            app=self.app,
            lease_owner=settings.worker_id,
            lease_seconds=settings.lease_seconds,
            idempotency_key=idempotency_key,
        )
        sent_at = self._clock.monotonic()
        [result] = await self._writer.create_runs([new])
        record = unwrap(result)
        if record.id != new.id:
            # Joined rather than refused: a retried request gets what the first one
            # gets. The wait ends even if that run's worker died: a reaper settles it.
            return await self._finished_or_waiting(record.id)
        await self.supervisor.run_interactive(record, sent_at + settings.lease_seconds)
        self._wakeups.settled(record.id)
        return await self.get(record.id)

    async def _finished_or_waiting(self, run_id: str) -> RunInfo:
        """The run once it is finished or waits for a person, as ``run`` returns its own:
        a retry must not wait days for a decision that the first call did not."""
        while True:
            info = await self.get(run_id)
            if info.state.terminal or info.state in WAITING_STATES:
                return info
            # A settlement here wakes this at once; a park is seen at the next poll.
            with suppress(WaitTimeout):
                return await self.wait(run_id, timeout=WAIT_POLL_SECONDS)

    def stop_now(self) -> tuple[WriteInFlight, ...]:
        """Stop without waiting for writes: the second signal of a daemon.

        Leaving ``Runtime.open`` (or a cancel of it from outside) lets every write
        call in flight finish and be recorded first, each within its own timeout.
        After this, leaving cuts them off: it returns them (each logged at WARNING),
        and their runs are settled as interrupted, a non-idempotent write's
        dead-lettered; interactive runs (``run``) are cut off alike, and fail. Call it
        from another task while leaving waits.
        """
        return self.supervisor.stop_now()

    async def reap_once(self) -> tuple[Reaped, ...]:
        """One reaper pass now, instead of waiting for the timer."""
        self._writer.check_open()
        return await self.supervisor.reaper.reap_once()

    # The Client's operations, on this runtime's Client.

    @property
    def store(self) -> Store:
        return self.client.store

    async def submit(self, agent: str, input: Any, *, idempotency_key: str | None = None) -> str:
        """Queue a run (see ``Client.submit``); this runtime is woken to claim it."""
        return await self.client.submit(agent, input, idempotency_key=idempotency_key)

    async def submit_many(self, agent: str, inputs: Iterable[Any]) -> list[str]:
        """Queue a run per input in one write (see ``Client.submit_many``)."""
        return await self.client.submit_many(agent, inputs)

    async def get(self, run_id: str) -> RunInfo:
        """The run as it is now (see ``Client.get``)."""
        return await self.client.get(run_id)

    async def runs(
        self,
        *,
        state: RunState | None = None,
        agent: str | None = None,
        reason: Reason | None = None,
        mode: RunMode | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        search: str | None = None,
        after: RunCursor | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        """Runs, newest first, filtered and paged (see ``Client.runs``)."""
        return await self.client.runs(
            state=state,
            agent=agent,
            reason=reason,
            mode=mode,
            created_after=created_after,
            created_before=created_before,
            search=search,
            after=after,
            limit=limit,
        )

    async def run_counts(self) -> dict[RunState, int]:
        """How many runs are in each state (see ``Client.run_counts``)."""
        return await self.client.run_counts()

    async def run_id_for_key(self, idempotency_key: str) -> str | None:
        """The id of the run that holds an idempotency key (see ``Client.run_id_for_key``)."""
        return await self.client.run_id_for_key(idempotency_key)

    async def dead_letters(
        self, *, reason: Reason | None = None, limit: int = 100
    ) -> list[RunInfo]:
        """Dead-lettered runs, newest first (see ``Client.dead_letters``)."""
        return await self.client.dead_letters(reason=reason, limit=limit)

    async def redrive(self, run_id: str) -> RunInfo:
        """Requeue a dead-lettered run (see ``Client.redrive``)."""
        return await self.client.redrive(run_id)

    async def resolve(
        self,
        run_id: str,
        *,
        applied: bool,
        operator: str | None = None,
        note: str | None = None,
        step: int | None = None,
    ) -> RunInfo:
        """Record whether an interrupted write applied (see ``Client.resolve``)."""
        return await self.client.resolve(
            run_id, applied=applied, operator=operator, note=note, step=step
        )

    async def approve(
        self,
        run_id: str,
        call_id: str | None = None,
        *,
        operator: str | None = None,
        note: str | None = None,
        digest: str | None = None,
    ) -> RunInfo:
        """Approve one call that waits for approval (see ``Client.approve``)."""
        return await self.client.approve(
            run_id, call_id, operator=operator, note=note, digest=digest
        )

    async def reject(
        self,
        run_id: str,
        call_id: str | None = None,
        *,
        reason: str,
        operator: str | None = None,
    ) -> RunInfo:
        """Reject one call that waits for approval (see ``Client.reject``)."""
        return await self.client.reject(run_id, call_id, reason=reason, operator=operator)

    async def send_input(
        self,
        run_id: str,
        value: Any,
        *,
        call_id: str | None = None,
        operator: str | None = None,
    ) -> RunInfo:
        """Answer a run waiting for input (see ``Client.send_input``)."""
        return await self.client.send_input(run_id, value, call_id=call_id, operator=operator)

    async def approvals(self, *, limit: int = 100) -> list[HumanRequest]:
        """The requests that wait for a person (see ``Client.approvals``)."""
        return await self.client.approvals(limit=limit)

    async def requests(self, run_id: str) -> list[HumanRequest]:
        """Every request for a person the run made (see ``Client.requests``)."""
        return await self.client.requests(run_id)

    async def steps(self, run_id: str) -> list[StepInfo]:
        """The run's journal, oldest step first (see ``Client.steps``)."""
        return await self.client.steps(run_id)

    async def usage(self, run_id: str) -> Usage:
        """The tokens of the run's provider turns (see ``Client.usage``)."""
        return await self.client.usage(run_id)

    async def wait(self, run_id: str, timeout: float | None = None) -> RunInfo:
        """Wait until the run is terminal (see ``Client.wait``); a run this runtime
        settles wakes its waiters at once."""
        self._writer.check_loop()
        return await self.client.wait(run_id, timeout)

    async def wait_all(self, run_ids: Sequence[str], timeout: float | None = None) -> list[RunInfo]:
        """Wait until every one of the runs is terminal (see ``Client.wait_all``); their
        infos, in the order given."""
        self._writer.check_loop()
        return await self.client.wait_all(run_ids, timeout)

    async def workers(self) -> list[WorkerInfo]:
        """The registered workers (see ``Client.workers``)."""
        return await self.client.workers()

    async def served_agents(self) -> frozenset[str]:
        """The agents some live worker serves (see ``Client.served_agents``)."""
        return await self.client.served_agents()

    async def purge(
        self,
        *,
        finished_before: timedelta,
        state: RunState | None = None,
        include_dead_letters: bool = False,
        dry_run: bool = False,
        batch_runs: int = PURGE_BATCH_RUNS,
    ) -> PurgeResult:
        """Delete finished runs and their journals (see ``Client.purge``)."""
        return await self.client.purge(
            finished_before=finished_before,
            state=state,
            include_dead_letters=include_dead_letters,
            dry_run=dry_run,
            batch_runs=batch_runs,
        )

    async def forget_keys(
        self,
        *,
        older_than: timedelta,
        dry_run: bool = False,
        batch_keys: int = PURGE_BATCH_RUNS,
        after_purge: PurgeResult | None = None,
    ) -> ForgetKeysResult:
        """Forget the idempotency keys of purged runs (see ``Client.forget_keys``)."""
        return await self.client.forget_keys(
            older_than=older_than,
            dry_run=dry_run,
            batch_keys=batch_keys,
            after_purge=after_purge,
        )

    async def cancel(self, run_id: str) -> bool:
        """Cancel a run (see ``Client.cancel``); False when it had already finished."""
        return await self.client.cancel(run_id)
