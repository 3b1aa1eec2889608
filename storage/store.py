"""The store over any executor: one class that composes the store's concerns."""

from __future__ import annotations

from collections.abc import Sequence

from leaseward.runtime.clock import Clock
from leaseward.runtime.commits import CommitOutcome
from leaseward.runtime.human_requests import Decision, HumanRequest
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import RunState
from leaseward.runtime.listing import RunListing
from leaseward.runtime.retention import ForgetKeysResult, PurgedRun, PurgeResult
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.runtime.workers import WorkerInfo, WorkerRegistration
from leaseward.storage.concern import WORK_CHANNEL
from leaseward.storage.executor import Executor
from leaseward.storage.human_requests import HumanRequests
from leaseward.storage.journal import JournalWriter
from leaseward.storage.migrator import Migrator
from leaseward.storage.operator_actions import OperatorActions
from leaseward.storage.protocol import (
    BatchItem,
    CancelOutcome,
    ExpiredRequest,
    ExpiredRun,
    LeaseMark,
    WriteBatch,
    WriteResults,
)
from leaseward.storage.queries import load_queries
from leaseward.storage.reads import RunReads
from leaseward.storage.retention import PURGE_BATCH_RUNS, Retention
from leaseward.storage.workers import WorkerRegistry

__all__ = [
    "MOST_CONCURRENT_BATCHES",
    "PURGE_BATCH_RUNS",
    "SIDE_BY_SIDE_ROUND_TRIP_SECONDS",
    "WORK_CHANNEL",
    "SQLStore",
]

MOST_CONCURRENT_BATCHES = 2
# Below it, one batch at a time; from it on, two side by side. Measured with N=100 runs
# on two cores (`bench/pg_network.py`): a server on the same machine (0.1 ms) or behind
# a relay there (0.3 ms) made 7-20% more steps a second with one batch at a time, as
# a second batch's backend took the core the runs step on; a server 2.4 ms away made
# 30-40% more with two, as the runs answered by one stepped while the other travelled.
SIDE_BY_SIDE_ROUND_TRIP_SECONDS = 0.001


class SQLStore:
    """A store over any executor: each concern in its module, SQL in the dialect's query file.

    No absolute time is computed here. The queries get durations
    (``lease_seconds``, ``delay_seconds``) and flags (``terminal``, ``finished``)
    and add them to the dialect's "now": the injected clock's reading passed as
    ``:now`` (SQLite), or the database clock (PostgreSQL, whose queries ignore
    ``:now``). No reap depends on any of these clocks: a reaper goes by the lease
    marks it watched (``running_leases``) and fences its reap on them.
    """

    def __init__(self, executor: Executor, clock: Clock) -> None:
        self._executor = executor
        queries = load_queries(executor.dialect)
        self._schema = Migrator(executor, queries, clock)
        self._journal = JournalWriter(executor, queries, clock)
        self._reads = RunReads(executor, queries, clock)
        self._requests = HumanRequests(executor, queries, clock)
        self._operator = OperatorActions(executor, queries, clock)
        self._workers = WorkerRegistry(executor, queries, clock)
        self._retention = Retention(executor, queries, clock)

    @property
    def concurrent_batches(self) -> int:
        """Two batches side by side for a server whose round trip was measured slow, or
        could not be measured; one for a server near enough that a second batch would
        only take CPU from the runs, and for SQLite, which has one writer."""
        if self._executor.dialect != "postgresql":
            return 1
        trip = self._executor.round_trip_seconds
        if trip is not None and trip < SIDE_BY_SIDE_ROUND_TRIP_SECONDS:
            return 1
        return MOST_CONCURRENT_BATCHES

    @property
    def renews_apart(self) -> bool:
        return self._journal.renews_apart

    # -- schema ---------------------------------------------------------------------------

    async def migrate(self) -> int:
        return await self._schema.migrate()

    async def schema_present(self) -> bool:
        return await self._schema.schema_present()

    async def schema_version(self) -> int:
        return await self._schema.schema_version()

    # -- writes: every one goes through commit(), one transaction per batch ---------------

    async def commit(self, batch: WriteBatch) -> WriteResults:
        return await self._journal.commit(batch)

    async def rehearse(self) -> None:
        # As many batches as may go side by side (how many will is known only once the
        # round trip is measured, here), a claim or a submit beside them, and a read.
        await self._executor.rehearse(
            self._journal.rehearsal, connections=MOST_CONCURRENT_BATCHES + 2
        )

    def commit_at_once(
        self, batch: WriteBatch, *, wait_seconds: float = 0.0
    ) -> WriteResults | None:
        return self._journal.commit_at_once(batch, wait_seconds=wait_seconds)

    async def create_run(self, new: NewRun) -> RunRecord:
        return await self._journal.create_run(new)

    async def claim_runs(
        self,
        worker_id: str,
        limit: int,
        lease_seconds: float,
        agents: Sequence[str],
        exclude: Sequence[str] = (),
    ) -> list[RunRecord]:
        return await self._journal.claim_runs(worker_id, limit, lease_seconds, agents, exclude)

    async def commit_batch(self, items: Sequence[BatchItem]) -> list[CommitOutcome]:
        return await self._journal.commit_batch(items)

    async def request_cancel(self, run_id: str) -> CancelOutcome:
        return await self._journal.request_cancel(run_id)

    async def reap(self, expired: ExpiredRun, settlement: Settlement) -> bool:
        return await self._journal.reap(expired, settlement)

    # -- reads ----------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._reads.get_run(run_id)

    async def get_runs(
        self, run_ids: Sequence[str], *, finished_only: bool = False
    ) -> list[RunRecord]:
        return await self._reads.get_runs(run_ids, finished_only=finished_only)

    async def list_runs(self, listing: RunListing | None = None) -> list[RunRecord]:
        return await self._reads.list_runs(listing)

    async def count_runs(self) -> dict[RunState, int]:
        return await self._reads.count_runs()

    async def list_steps(self, run_id: str) -> list[StepInfo]:
        return await self._reads.list_steps(run_id)

    async def running_leases(self) -> list[LeaseMark]:
        return await self._reads.running_leases()

    async def expired_runs(self, leases: Sequence[LeaseMark]) -> list[ExpiredRun]:
        return await self._reads.expired_runs(leases)

    # -- requests for a person ------------------------------------------------------------

    async def list_requests(self, run_id: str) -> list[HumanRequest]:
        return await self._requests.list_requests(run_id)

    async def pending_requests(self, limit: int = 100) -> list[HumanRequest]:
        return await self._requests.pending_requests(limit)

    async def decide(
        self,
        run_id: str,
        call_id: str | None,
        decision: Decision,
        *,
        operator: str,
        note: str | None = None,
        value_json: str | None = None,
        digest: str | None = None,
    ) -> tuple[HumanRequest, RunRecord]:
        return await self._requests.decide(
            run_id,
            call_id,
            decision,
            operator=operator,
            note=note,
            value_json=value_json,
            digest=digest,
        )

    async def expire_requests(self, limit: int) -> list[ExpiredRequest]:
        return await self._requests.expire_requests(limit)

    # -- operator actions -----------------------------------------------------------------

    async def redrive(self, run_id: str) -> RunRecord:
        return await self._operator.redrive(run_id)

    async def resolve(
        self,
        run_id: str,
        *,
        applied: bool,
        operator: str,
        note: str | None = None,
        step: int | None = None,
    ) -> RunRecord:
        return await self._operator.resolve(
            run_id, applied=applied, operator=operator, note=note, step=step
        )

    # -- workers --------------------------------------------------------------------------

    async def register_worker(self, worker: WorkerRegistration) -> None:
        await self._workers.register_worker(worker)

    async def heartbeat_worker(self, worker: WorkerRegistration) -> None:
        await self._workers.heartbeat_worker(worker)

    async def remove_worker(self, worker_id: str) -> None:
        await self._workers.remove_worker(worker_id)

    async def list_workers(self) -> list[WorkerInfo]:
        return await self._workers.list_workers()

    # -- retention ------------------------------------------------------------------------

    async def purge_finished(
        self,
        states: Sequence[RunState],
        older_than_seconds: float,
        *,
        dry_run: bool = False,
        batch_runs: int = PURGE_BATCH_RUNS,
    ) -> PurgeResult:
        return await self._retention.purge_finished(
            states, older_than_seconds, dry_run=dry_run, batch_runs=batch_runs
        )

    async def purged_run(self, run_id: str) -> PurgedRun | None:
        return await self._retention.purged_run(run_id)

    async def keyed_run_id(self, idempotency_key: str) -> str | None:
        return await self._retention.keyed_run_id(idempotency_key)

    async def forget_keys(
        self,
        older_than_seconds: float,
        *,
        dry_run: bool = False,
        batch_keys: int = PURGE_BATCH_RUNS,
        after_purge: PurgeResult | None = None,
    ) -> ForgetKeysResult:
        return await self._retention.forget_keys(
            older_than_seconds, dry_run=dry_run, batch_keys=batch_keys, after_purge=after_purge
        )

    # -- the executor's own ---------------------------------------------------------------

    async def wait_for_work(self, timeout: float) -> None:
        await self._executor.wait_for_notification(WORK_CHANNEL, timeout)

    async def aclose(self) -> None:
        await self._executor.aclose()
