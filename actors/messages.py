"""The messages actors exchange. All frozen; a request that needs an answer carries a Reply."""

from __future__ import annotations

import attrs

from leaseward.actors.mailbox import Reply
from leaseward.runtime.errors import LeasewardError
from leaseward.runtime.model import NewRun, RunRecord
from leaseward.storage.protocol import BatchItem, BatchOutcome, CancelOutcome, ClaimRequest, Reap

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
]


@attrs.frozen
class Persist:
    """To the Persister: commit this item in the next batch and answer with its outcome."""

    item: BatchItem
    reply: Reply[BatchOutcome] = attrs.field(eq=False)


@attrs.frozen
class Renew:
    """To the Persister: renew these leases together; one outcome each, in order."""

    items: tuple[BatchItem, ...]
    reply: Reply[tuple[BatchOutcome, ...]] = attrs.field(eq=False)


@attrs.frozen
class Submit:
    """To the Persister: store these new runs; one result per run, in order."""

    runs: tuple[NewRun, ...]
    reply: Reply[tuple[RunRecord | LeasewardError, ...]] = attrs.field(eq=False)


@attrs.frozen
class Claim:
    """To the Persister: lease ready runs (the result, or the error that refused it)."""

    request: ClaimRequest
    reply: Reply[tuple[RunRecord, ...] | LeasewardError] = attrs.field(eq=False)


@attrs.frozen
class Cancel:
    """To the Persister: cancel a run, or ask its holder to stop."""

    run_id: str
    reply: Reply[CancelOutcome | LeasewardError] = attrs.field(eq=False)


@attrs.frozen
class ReapRuns:
    """To the Persister: settle these expired runs; one result per reap, in order."""

    reaps: tuple[Reap, ...]
    reply: Reply[tuple[bool | LeasewardError, ...]] = attrs.field(eq=False)


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
