"""The messages actors exchange. All frozen; a request that needs an answer carries a Reply."""

from __future__ import annotations

import attrs

from leaseward.actors.mailbox import Reply
from leaseward.storage.protocol import BatchItem, BatchOutcome

__all__ = ["LeasesReaped", "Persist", "RunEnded", "SupervisorMessage", "Wake"]


@attrs.frozen
class Persist:
    """To the Persister: commit this item in the next batch and answer with its outcome."""

    item: BatchItem
    reply: Reply[BatchOutcome] = attrs.field(eq=False)


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
