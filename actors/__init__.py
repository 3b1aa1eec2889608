"""The actors: mailboxes, messages, Supervisor, RunActor, Persister, LeaseReaper, metrics,
and the count of store failures their logs share."""

from leaseward.actors.bounds import SharedBounds
from leaseward.actors.lease_keeper import KeeperStats, Lease, LeaseKeeper, default_margin
from leaseward.actors.mailbox import Mailbox, Reply
from leaseward.actors.messages import (
    LeasesReaped,
    Persist,
    Renew,
    RunEnded,
    SupervisorMessage,
    Wake,
)
from leaseward.actors.metrics import Metrics
from leaseward.actors.persister import MAX_BATCH_ITEMS, Persister, PersisterStats
from leaseward.actors.reaper import REAP_BATCH, LeaseReaper, Reaped, plan_reap
from leaseward.actors.run_actor import RunActor, RunSettings, WriteInFlight
from leaseward.actors.store_faults import REPEATS_LOGGED_EVERY_SECONDS, StoreFaults
from leaseward.actors.supervisor import (
    CLAIM_BATCH,
    WORKER_GONE_AFTER_BEATS,
    WORKER_GONE_AFTER_MIN_SECONDS,
    Supervisor,
    SupervisorSettings,
    stale_after_seconds,
)

__all__ = [
    "CLAIM_BATCH",
    "MAX_BATCH_ITEMS",
    "REAP_BATCH",
    "REPEATS_LOGGED_EVERY_SECONDS",
    "WORKER_GONE_AFTER_BEATS",
    "WORKER_GONE_AFTER_MIN_SECONDS",
    "KeeperStats",
    "Lease",
    "LeaseKeeper",
    "LeaseReaper",
    "LeasesReaped",
    "Mailbox",
    "Metrics",
    "Persist",
    "Persister",
    "PersisterStats",
    "Reaped",
    "Renew",
    "Reply",
    "RunActor",
    "RunEnded",
    "RunSettings",
    "SharedBounds",
    "StoreFaults",
    "Supervisor",
    "SupervisorMessage",
    "SupervisorSettings",
    "Wake",
    "WriteInFlight",
    "default_margin",
    "plan_reap",
    "stale_after_seconds",
]
