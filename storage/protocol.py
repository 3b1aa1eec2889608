"""The store protocol: what the actors and the shell may ask of any store."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar

import attrs
import msgspec

from leaseward.runtime.commits import CommitOutcome
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.errors import LeasewardError
from leaseward.runtime.human_requests import Decision, HumanRequest
from leaseward.runtime.journal import StepInfo, StepWrite
from leaseward.runtime.lifecycle import RunState, StepStatus
from leaseward.runtime.listing import RunListing
from leaseward.runtime.retention import ForgetKeysResult, PurgedRun, PurgeResult
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.runtime.workers import WorkerInfo, WorkerRegistration

__all__ = [
    "BatchItem",
    "CancelOutcome",
    "ClaimRequest",
    "ExpiredRequest",
    "ExpiredRun",
    "LeaseMark",
    "Reap",
    "Store",
    "WriteBatch",
    "WriteResults",
    "unwrap",
]

T = TypeVar("T")


def unwrap(result: T | LeasewardError) -> T:
    """A request's result from WriteResults, its error raised as a direct call would."""
    if isinstance(result, LeasewardError):
        raise result
    return result


class BatchItem(msgspec.Struct, frozen=True):
    """One run's share of a group commit: journal changes, a lease renewal, maybe a settle.

    Everything in an item is fenced by ``epoch``: if the run is no longer
    ``running`` under that epoch, nothing of the item is written. A frozen msgspec
    Struct, as the journal changes it carries: every commit of a run makes one.
    """

    run_id: str
    epoch: int
    steps: tuple[StepWrite, ...] = ()
    lease_seconds: float = 0.0
    settlement: Settlement | None = None
    passes_a_held_row: bool = False
    """A renewal alone (no steps, no settlement) that does not wait for its run's row
    while another transaction holds it: it is refused as a passing fault instead. The
    keeper's renewals are: written in one statement, one row held elsewhere for longer
    than the lease would otherwise let every lease of the worker run out."""


@attrs.frozen
class LeaseMark:
    """A running run's lease as a reaper sees it, and what it was last granted.

    Every claim and renewal opens a new epoch or bumps ``renewals``: a mark that
    stays equal stays unrenewed, whatever any clock says.
    """

    run_id: str
    epoch: int
    renewals: int
    lease_seconds: float


@attrs.frozen
class ExpiredRun:
    """A run whose lease a reaper saw unrenewed for as long as it was granted."""

    run: RunRecord
    last_effect: ToolEffect | None
    last_status: StepStatus | None
    renewals: int
    """The renewals of the lease the reaper saw: its reap is fenced on them."""


@attrs.frozen
class ExpiredRequest:
    """An approval request nobody decided in time, now rejected as expired."""

    run_id: str
    seq: int
    call_id: str
    tool: str
    requeued: bool
    """Whether it was its run's last undecided request, so the run went back to the queue."""


class CancelOutcome(enum.StrEnum):
    CANCELLED = "cancelled"
    REQUESTED = "requested"
    ALREADY_FINISHED = "already_finished"


@attrs.frozen
class ClaimRequest:
    """Lease up to ``limit`` ready runs of ``agents``, oldest first, leaving ``exclude`` alone."""

    worker_id: str
    limit: int
    lease_seconds: float
    agents: tuple[str, ...]
    exclude: tuple[str, ...] = ()


@attrs.frozen
class Reap:
    """Settle an expired run, fenced on its epoch and on its lease not renewed since."""

    expired: ExpiredRun
    settlement: Settlement


@attrs.frozen
class WriteBatch:
    """Writes of every kind, committed together in one transaction (group commit).

    They are applied in this order: new runs, cancels, journal items, reaps,
    claims, so a claim in the batch can lease a run submitted in it.
    """

    new_runs: tuple[NewRun, ...] = ()
    cancels: tuple[str, ...] = ()
    items: tuple[BatchItem, ...] = ()
    reaps: tuple[Reap, ...] = ()
    claims: tuple[ClaimRequest, ...] = ()

    @classmethod
    def joined(cls, parts: Sequence[WriteBatch]) -> WriteBatch:
        """Every request of ``parts`` in one batch, each kind in the order of the parts."""
        return cls(
            new_runs=tuple(new for part in parts for new in part.new_runs),
            cancels=tuple(run_id for part in parts for run_id in part.cancels),
            items=tuple(item for part in parts for item in part.items),
            reaps=tuple(reap for part in parts for reap in part.reaps),
            claims=tuple(claim for part in parts for claim in part.claims),
        )

    def _counts(self) -> tuple[int, int, int, int, int]:
        return (
            len(self.new_runs),
            len(self.cancels),
            len(self.items),
            len(self.reaps),
            len(self.claims),
        )

    def __len__(self) -> int:
        return sum(self._counts())


@attrs.frozen
class WriteResults:
    """One result per request of a WriteBatch, kind by kind and in order.

    A request refused on its own (an unknown run to cancel, an idempotency key
    used for other work, data the store cannot take) has the error as its
    result; the others in the batch are unaffected. Journal items answer with a
    CommitOutcome, which carries its own error.
    """

    new_runs: tuple[RunRecord | LeasewardError, ...] = ()
    cancels: tuple[CancelOutcome | LeasewardError, ...] = ()
    items: tuple[CommitOutcome, ...] = ()
    reaps: tuple[bool | LeasewardError, ...] = ()
    claims: tuple[tuple[RunRecord, ...] | LeasewardError, ...] = ()

    @classmethod
    def joined(cls, parts: Sequence[WriteResults]) -> WriteResults:
        """The results of ``parts`` as those of their batches joined (WriteBatch.joined)."""
        return cls(
            new_runs=tuple(result for part in parts for result in part.new_runs),
            cancels=tuple(result for part in parts for result in part.cancels),
            items=tuple(result for part in parts for result in part.items),
            reaps=tuple(result for part in parts for result in part.reaps),
            claims=tuple(result for part in parts for result in part.claims),
        )

    def shares(self, parts: Sequence[WriteBatch]) -> Iterator[WriteResults]:
        """These results, of ``WriteBatch.joined(parts)``, split back into one per part.

        Raises ValueError unless they hold exactly one result per request of each kind.
        """
        wanted = tuple(map(sum, zip(*(part._counts() for part in parts), strict=True)))
        if self._counts() != (wanted or (0, 0, 0, 0, 0)):
            raise ValueError(f"results {self._counts()} for requests {wanted} of each kind")
        new_runs = cancels = items = reaps = claims = 0
        for part in parts:
            yield WriteResults(
                new_runs=self.new_runs[new_runs : new_runs + len(part.new_runs)],
                cancels=self.cancels[cancels : cancels + len(part.cancels)],
                items=self.items[items : items + len(part.items)],
                reaps=self.reaps[reaps : reaps + len(part.reaps)],
                claims=self.claims[claims : claims + len(part.claims)],
            )
            new_runs += len(part.new_runs)
            cancels += len(part.cancels)
            items += len(part.items)
            reaps += len(part.reaps)
            claims += len(part.claims)

    def _counts(self) -> tuple[int, int, int, int, int]:
        return (
            len(self.new_runs),
            len(self.cancels),
            len(self.items),
            len(self.reaps),
            len(self.claims),
        )

    def __len__(self) -> int:
        return sum(self._counts())


class Store(Protocol):
    @property
    def concurrent_batches(self) -> int:
        """How many batches may commit side by side: one where the database has one
        writer (SQLite), more where each commits on a connection of its own and that
        gains more than it costs. Known once ``rehearse`` has run."""
        ...

    @property
    def renews_apart(self) -> bool:
        """Whether the keeper's renewals commit by themselves, beside the batches and
        never behind one: where a renewal passes a run's row that another transaction
        holds (PostgreSQL) instead of waiting for it, as a batch does."""
        ...

    async def migrate(self) -> int:
        """Bring the schema to the newest version; returns that version."""
        ...

    async def create_run(self, new: NewRun) -> RunRecord:
        """Store a new run, unless one already has ``new.idempotency_key``.

        That run is returned instead, whatever its state (its id is not
        ``new.id``), if it was made for the same agent and input; otherwise
        this raises IdempotencyKeyConflict. If that run was purged, this raises
        RunPurged, which names it. Either way nothing new is stored.
        """
        ...

    async def claim_runs(
        self,
        worker_id: str,
        limit: int,
        lease_seconds: float,
        agents: Sequence[str],
        exclude: Sequence[str] = (),
    ) -> list[RunRecord]:
        """Lease up to ``limit`` ready runs of the named agents, oldest first.

        Runs in ``exclude`` are left alone: the claimer still has a live actor on
        an earlier epoch of each, and must not run one run twice at once.
        """
        ...

    async def commit(self, batch: WriteBatch) -> WriteResults:
        """Commit every request of ``batch`` in one transaction (see WriteResults).

        Raises StoreError only when the transaction as a whole failed: then
        nothing of it is stored (or, for CommitOutcomeUnknown, maybe all of it).
        """
        ...

    def commit_at_once(
        self, batch: WriteBatch, *, wait_seconds: float = 0.0
    ) -> WriteResults | None:
        """``batch`` committed in one transaction before this returns, without a turn of
        the event loop; or None, with nothing stored, where that would wait (the writer
        busy past ``wait_seconds``, another process writing, a driver that only awaits)
        or failed.

        For one request that its caller would otherwise wait a whole group commit for:
        the caller holds the event loop while the disk syncs, and while the batch in
        flight, if there is one, ends.
        """
        ...

    async def commit_batch(self, items: Sequence[BatchItem]) -> list[CommitOutcome]:
        """Commit every item in one transaction; one outcome per item, in order."""
        ...

    async def rehearse(self) -> None:
        """Ready the store for a worker: a batch's, a submit's and a claim's statements
        run once over nothing, rolled back, on the connections batches commit on, so
        the first of them do not wait for the database to plan them. Changes nothing;
        a store with nothing to gain does nothing."""
        ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def get_runs(
        self, run_ids: Sequence[str], *, finished_only: bool = False
    ) -> list[RunRecord]:
        """The runs of ``run_ids`` that exist (that have finished, with ``finished_only``),
        read together, in no particular order."""
        ...

    async def list_runs(self, listing: RunListing | None = None) -> list[RunRecord]:
        """The page of runs ``listing`` names (all, newest first, up to 100, when None)."""
        ...

    async def list_steps(self, run_id: str) -> list[StepInfo]: ...

    async def count_runs(self) -> dict[RunState, int]:
        """How many runs are in each state."""
        ...

    async def request_cancel(self, run_id: str) -> CancelOutcome: ...

    async def running_leases(self) -> list[LeaseMark]:
        """The lease of every running run, for a reaper to watch; reads no clock."""
        ...

    async def expired_runs(self, leases: Sequence[LeaseMark]) -> list[ExpiredRun]:
        """The runs of ``leases`` still running under exactly these marks (not renewed,
        not claimed again, not settled since), with their last journal rows."""
        ...

    async def reap(self, expired: ExpiredRun, settlement: Settlement) -> bool:
        """Settle an expired run, fenced on its epoch and on its lease not renewed since."""
        ...

    async def redrive(self, run_id: str) -> RunRecord:
        """Put a dead-lettered run back in the queue: not_retryable, retries_exhausted, or
        interrupted_write when its journal records the interrupted call's outcome."""
        ...

    async def resolve(
        self,
        run_id: str,
        *,
        applied: bool,
        operator: str,
        note: str | None = None,
        step: int | None = None,
    ) -> RunRecord:
        """Record an operator's verdict on an interrupted write and requeue its run; with
        ``step``, only if the interrupted call is the one at that journal step
        (OtherCallInterrupted otherwise, changing nothing)."""
        ...

    async def list_requests(self, run_id: str) -> list[HumanRequest]:
        """Every request for a person the run made, decided or not, oldest first."""
        ...

    async def pending_requests(self, limit: int = 100) -> list[HumanRequest]:
        """Undecided requests of runs that wait for them, oldest first."""
        ...

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
        """Record a person's decision on one pending request, in one transaction; the run
        is requeued when none of its requests is left undecided.

        ``call_id`` None names the run's only pending request of that kind; ``digest``,
        the start of the arguments' digest the person was shown, decides only a request
        of those arguments (ArgumentsNotApproved otherwise). Raises
        RequestNotFound for a call with no such request, and IllegalTransition for a
        request already decided or a run no longer waiting for it; nothing changes then.
        A decision after the request's expiry (on the store's clock) raises
        RequestExpired once it has expired the run's expired requests in its own
        transaction, exactly as ``expire_requests`` would have.
        """
        ...

    async def expire_requests(self, limit: int) -> list[ExpiredRequest]:
        """Reject as expired the approval requests whose expiry passed (on the store's
        clock), and requeue the runs they leave with nothing undecided."""
        ...

    async def register_worker(self, worker: WorkerRegistration) -> None:
        """Record that a worker started: its row is created or replaced, started now."""
        ...

    async def heartbeat_worker(self, worker: WorkerRegistration) -> None:
        """Record that a worker is still alive (and re-register it if its row is gone)."""
        ...

    async def remove_worker(self, worker_id: str) -> None:
        """Forget a worker that stopped cleanly."""
        ...

    async def list_workers(self) -> list[WorkerInfo]:
        """Every registered worker, live or gone, its heartbeat's age on the store's clock."""
        ...

    async def purge_finished(
        self,
        states: Sequence[RunState],
        older_than_seconds: float,
        *,
        dry_run: bool = False,
        batch_runs: int = ...,
    ) -> PurgeResult:
        """Delete runs in these terminal states, with their journals, that finished more
        than ``older_than_seconds`` ago on the store's clock; ``batch_runs`` runs a
        transaction. With ``dry_run``, count them and change nothing.

        The idempotency key of a purged run is kept (``purged_run``, and a submit
        with it names the run): only ``forget_keys`` deletes keys."""
        ...

    async def purged_run(self, run_id: str) -> PurgedRun | None:
        """What a purge kept of a run that had an idempotency key; None for a run that
        was never purged, or had no key, or whose key was forgotten."""
        ...

    async def keyed_run_id(self, idempotency_key: str) -> str | None:
        """The id of the run that holds ``idempotency_key``, stored or purged; None for
        a key no run holds (never used, or forgotten). Changes nothing."""
        ...

    async def forget_keys(
        self,
        older_than_seconds: float,
        *,
        dry_run: bool = False,
        batch_keys: int = ...,
        after_purge: PurgeResult | None = None,
    ) -> ForgetKeysResult:
        """Delete the idempotency keys of purged runs first used more than
        ``older_than_seconds`` ago on the store's clock, ``batch_keys`` a transaction;
        a submit with one of them then creates a new run. The key of a run still
        stored is never forgotten. With ``dry_run``, count them and change nothing;
        ``after_purge``, a dry run's result of the purge made just before, counts the
        keys of the runs it would delete as purged."""
        ...

    async def wait_for_work(self, timeout: float) -> None:
        """Return when a run may have become claimable, or after ``timeout`` seconds.

        A store that can hear other processes submit or requeue (PostgreSQL's
        LISTEN/NOTIFY) returns early; one that cannot just waits out the timeout.
        Never raises a store fault: callers poll as the fallback.
        """
        ...

    async def aclose(self) -> None: ...
