"""What one check explores: the calls of the run, the workers, how many faults and
operator actions a path may take, and which known holes are put back."""

from __future__ import annotations

import attrs

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.lifecycle import RecoveryPolicy, RunState

from .store import StoreHoles

__all__ = [
    "ADMISSION",
    "AGENT",
    "APPROVAL_TIMEOUT",
    "INPUT_JSON",
    "KEY",
    "LEASE",
    "POLICY",
    "PURGE_AGE",
    "STORE_STEP",
    "TERMINAL",
    "Budget",
    "Call",
    "Holes",
    "Scenario",
]

LEASE = 3
"""Units a claim or renewal grants."""
ADMISSION = 1
"""Units a lease must have left for a call to start (the keeper's interval and margin)."""
APPROVAL_TIMEOUT = 2
"""Units an approval request waits before it expires."""
STORE_STEP = 10
"""How far a step of the store's clock jumps."""
PURGE_AGE = 0.5
AGENT = "payer"
KEY = "order-1"
INPUT_JSON = dump_json({"order": 1})
# Retries wait for nothing: a requeued run is claimable at once, so that interleavings
# of retries fit in a small bound.
POLICY = RecoveryPolicy(backoff_base_seconds=0.0)
TERMINAL = (RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED, RunState.DEAD_LETTERED)


@attrs.frozen(slots=False)
class Call:
    """One call the scripted provider's first turn asks for."""

    name: str
    effect: ToolEffect
    needs_approval: bool = False

    @property
    def call_id(self) -> str:
        return f"call-{self.name}"

    @property
    def arguments_json(self) -> str:
        return dump_json({"what": self.name})


FAULT_KINDS = (
    "crashes",
    "pauses",
    "ticks",
    "lost_answers",
    "delayed_answers",
    "refusals",
    "data_errors",
    "failed_read_backs",
    "store_steps",
    "stops",
)


@attrs.frozen(slots=False)
class Budget:
    """How many transitions of each kind of fault or action one path may take."""

    crashes: int = 0
    pauses: int = 0
    ticks: int = 0
    lost_answers: int = 0
    delayed_answers: int = 0
    refusals: int = 0
    data_errors: int = 0
    failed_read_backs: int = 0
    store_steps: int = 0
    stops: int = 0
    decisions: int = 0
    cancels: int = 0
    resolutions: int = 0
    redrives: int = 0
    purges: int = 0
    resubmits: int = 0
    total: int | None = None
    """How many faults (not operator actions) one path may take together; None: as many
    as each kind allows."""

    @property
    def faults(self) -> tuple[str, ...]:
        return FAULT_KINDS

    def describe(self) -> str:
        kinds = {name: value for name, value in attrs.asdict(self).items() if name != "total"}
        each = ", ".join(f"{name} {value}" for name, value in kinds.items() if value)
        if self.total is None:
            return each
        return f"{each}; at most {self.total} faults in all"


@attrs.frozen(slots=False)
class Holes:
    """Bugs of the protocol, the reaper or the store that reviews found, put back."""

    skip_admission: bool = False
    """(1) A call starts whatever the lease has left after a pause (in the machine)."""
    lease_from_answer: bool = False
    """(2) The worker measures a lease from when a commit's answer came, not from when it
    was sent: a commit that waited for a lock past the lease renews nothing in time."""
    unanswered_as_stored: bool = False
    """(3) A commit whose answer was lost is taken as stored, without reading back (in
    the machine)."""
    read_back_renews: bool = False
    """(4) A read-back that finds records stored is taken for a renewal (in the machine)."""
    purge_forgets_keys: bool = False
    """(5) A purge deletes the idempotency keys of the runs it deletes."""
    late_decisions: bool = False
    """(6) A decision after its request's expiry is accepted by the store, and the call
    it approved executed by the machine (each stops it alone today)."""
    reap_by_store_clock: bool = False
    """(7) The reaper reaps a lease whose expiry passed on the store's wall clock."""
    keep_intent_on_stop: bool = False
    """(8) A stop between an intent's commit and its call leaves the intent in the journal
    (in the machine)."""

    def store_holes(self) -> StoreHoles:
        return StoreHoles(
            purge_forgets_keys=self.purge_forgets_keys, late_decisions=self.late_decisions
        )


@attrs.frozen(slots=False)
class Scenario:
    calls: tuple[Call, ...]
    workers: int = 2
    budget: Budget = Budget()
    holes: Holes = Holes()
