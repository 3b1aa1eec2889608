"""The messages actors exchange. All frozen; a request that needs an answer carries a Reply.

Every message to the Persister is a write request, one class per kind, all on one
protocol (WriteRequest): the requests it holds for the store's batch, and the answer
its asker gets from the batch's results, or when the batch's transaction failed
as a whole. The Persister knows one kind only, the commonest: a batch of Persist
requests alone it joins and answers item by item.
"""

from __future__ import annotations

import abc
from typing import Generic, TypeVar

import attrs

from leaseward.actors.mailbox import Reply
from leaseward.runtime.commits import CommitOutcome, Refused, Unanswered
from leaseward.runtime.errors import LeasewardError
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.storage.protocol import (
    BatchItem,
    CancelOutcome,
    ClaimRequest,
    Reap,
    WriteBatch,
    WriteResults,
)

__all__ = [
    "Cancel",
    "Claim",
    "LeasesReaped",
    "Persist",
    "PersisterMessage",
    "ReapRuns",
    "Renew",
    "RunEnded",
    "Submit",
    "SupervisorMessage",
    "Wake",
    "WriteRequest",
]

T = TypeVar("T")


def _failed_commit(error: LeasewardError, *, unanswered: bool) -> CommitOutcome:
    """A journal item's outcome when its batch's transaction failed as a whole."""
    return Unanswered(error.message) if unanswered else Refused(error.message)


class WriteRequest(abc.ABC, Generic[T]):
    """A request to the Persister, answered once with a ``T``.

    A kind says what it asks of the store (``writes``), what its asker gets from
    its own share of the batch's results, and what it gets when the whole
    transaction failed: ``unanswered`` when the commit was sent and its answer
    lost, so that the batch may be stored.
    """

    reply: Reply[T]

    @property
    @abc.abstractmethod
    def writes(self) -> WriteBatch:
        """Its requests to the store, which the Persister joins with the batch's others."""

    @abc.abstractmethod
    def answer_from(self, results: WriteResults) -> T:
        """Its answer from its share of the results: one result per request of ``writes``."""

    @abc.abstractmethod
    def failure(self, error: LeasewardError, *, unanswered: bool) -> T:
        """Its answer when the batch's transaction failed with ``error``."""

    @property
    def size(self) -> int:
        """How much of a batch it takes: its requests to the store, never split."""
        return len(self.writes)

    def answer(self, results: WriteResults) -> None:
        self.reply.answer(self.answer_from(results))

    def fail(self, error: LeasewardError, *, unanswered: bool) -> None:
        self.reply.answer(self.failure(error, unanswered=unanswered))


@attrs.frozen
class Persist(WriteRequest[CommitOutcome]):
    """A run's journal item: commit it in the next batch and answer with its outcome."""

    item: BatchItem
    reply: Reply[CommitOutcome] = attrs.field(eq=False)

    @property
    def writes(self) -> WriteBatch:
        return WriteBatch(items=(self.item,))

    @property
    def size(self) -> int:
        # One item, known without building the batch: the commonest request of all.
        return 1

    def answer_from(self, results: WriteResults) -> CommitOutcome:
        (outcome,) = results.items
        return outcome

    def failure(self, error: LeasewardError, *, unanswered: bool) -> CommitOutcome:
        return _failed_commit(error, unanswered=unanswered)


@attrs.frozen
class Renew(WriteRequest[tuple[CommitOutcome, ...]]):
    """The LeaseKeeper's renewals, written together; one outcome each, in order."""

    items: tuple[BatchItem, ...]
    reply: Reply[tuple[CommitOutcome, ...]] = attrs.field(eq=False)

    @property
    def writes(self) -> WriteBatch:
        return WriteBatch(items=self.items)

    def answer_from(self, results: WriteResults) -> tuple[CommitOutcome, ...]:
        return results.items

    def failure(self, error: LeasewardError, *, unanswered: bool) -> tuple[CommitOutcome, ...]:
        return (_failed_commit(error, unanswered=unanswered),) * len(self.items)


@attrs.frozen
class Submit(WriteRequest[tuple[RunRecord | LeasewardError, ...]]):
    """Store these new runs; one result per run, in order."""

    runs: tuple[NewRun, ...]
    reply: Reply[tuple[RunRecord | LeasewardError, ...]] = attrs.field(eq=False)

    @property
    def writes(self) -> WriteBatch:
        return WriteBatch(new_runs=self.runs)

    def answer_from(self, results: WriteResults) -> tuple[RunRecord | LeasewardError, ...]:
        return results.new_runs

    def failure(
        self, error: LeasewardError, *, unanswered: bool
    ) -> tuple[RunRecord | LeasewardError, ...]:
        return (error,) * len(self.runs)


@attrs.frozen
class Claim(WriteRequest[tuple[RunRecord, ...] | LeasewardError]):
    """Lease ready runs (the result, or the error that refused it)."""

    request: ClaimRequest
    reply: Reply[tuple[RunRecord, ...] | LeasewardError] = attrs.field(eq=False)

    @property
    def writes(self) -> WriteBatch:
        return WriteBatch(claims=(self.request,))

    def answer_from(self, results: WriteResults) -> tuple[RunRecord, ...] | LeasewardError:
        (claimed,) = results.claims
        return claimed

    def failure(
        self, error: LeasewardError, *, unanswered: bool
    ) -> tuple[RunRecord, ...] | LeasewardError:
        return error


@attrs.frozen
class Cancel(WriteRequest[CancelOutcome | LeasewardError]):
    """Cancel a run, or ask its holder to stop."""

    run_id: str
    reply: Reply[CancelOutcome | LeasewardError] = attrs.field(eq=False)

    @property
    def writes(self) -> WriteBatch:
        return WriteBatch(cancels=(self.run_id,))

    def answer_from(self, results: WriteResults) -> CancelOutcome | LeasewardError:
        (outcome,) = results.cancels
        return outcome

    def failure(self, error: LeasewardError, *, unanswered: bool) -> CancelOutcome | LeasewardError:
        return error


@attrs.frozen
class ReapRuns(WriteRequest[tuple[bool | LeasewardError, ...]]):
    """Settle these expired runs; one result per reap, in order."""

    reaps: tuple[Reap, ...]
    reply: Reply[tuple[bool | LeasewardError, ...]] = attrs.field(eq=False)

    @property
    def writes(self) -> WriteBatch:
        return WriteBatch(reaps=self.reaps)

    def answer_from(self, results: WriteResults) -> tuple[bool | LeasewardError, ...]:
        return results.reaps

    def failure(
        self, error: LeasewardError, *, unanswered: bool
    ) -> tuple[bool | LeasewardError, ...]:
        return (error,) * len(self.reaps)


PersisterMessage = Persist | Renew | Submit | Claim | Cancel | ReapRuns


@attrs.frozen
class Wake:
    """To the Supervisor: new work may be claimable (a local submit or requeue)."""


@attrs.frozen
class RunEnded:
    """To the Supervisor: a RunActor finished and its slot is free."""

    run_id: str


@attrs.frozen
class LeasesReaped:
    """To the Supervisor, from the LeaseReaper: these (run id, epoch) leases were taken away.

    The epoch matters: by the time this arrives the same Supervisor may already
    hold the run again under a newer epoch, and that attempt is healthy.
    """

    leases: tuple[tuple[str, int], ...]


SupervisorMessage = Wake | RunEnded | LeasesReaped
