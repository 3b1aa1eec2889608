"""The actors: mailboxes, messages, Supervisor, RunActor, Persister, LeaseReaper, metrics."""

from actors.mailbox import Mailbox, Reply
from actors.messages import LeasesReaped, Persist, RunEnded, SupervisorMessage, Wake
from actors.metrics import Metrics
from actors.persister import MAX_BATCH_ITEMS, Persister, PersisterStats
from actors.reaper import REAP_BATCH, LeaseReaper, Reaped, plan_reap
from actors.run_actor import DEADLINE_MARGIN_SECONDS, RunActor, RunSettings
from actors.supervisor import CLAIM_BATCH, Supervisor, SupervisorSettings

__all__ = [
    "CLAIM_BATCH",
    "DEADLINE_MARGIN_SECONDS",
    "MAX_BATCH_ITEMS",
    "REAP_BATCH",
    "LeaseReaper",
    "LeasesReaped",
    "Mailbox",
    "Metrics",
    "Persist",
    "Persister",
    "PersisterStats",
    "Reaped",
    "Reply",
    "RunActor",
    "RunEnded",
    "RunSettings",
    "Supervisor",
    "SupervisorMessage",
    "SupervisorSettings",
    "Wake",
    "plan_reap",
]
