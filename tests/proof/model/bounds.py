"""The bounds the checker runs at: a small one in ``make test``, a deep one in
``make check-model``, and the smallest that shows each hole put back."""

from __future__ import annotations

import attrs

from leaseward.runtime.effects import ToolEffect

from .scenario import Budget, Call, Holes, Scenario

__all__ = ["DEEP", "DEEP_DEPTH", "HOLES", "SMALL", "SMALL_DEPTH"]

LOOKUP = Call("lookup", ToolEffect.READ_ONLY)
STAMP = Call("stamp", ToolEffect.IDEMPOTENT_WRITE)
CHARGE = Call("charge", ToolEffect.NON_IDEMPOTENT_WRITE)
APPROVED_CHARGE = attrs.evolve(CHARGE, needs_approval=True)

SMALL = Scenario(calls=(CHARGE,), workers=2, budget=Budget(crashes=1, pauses=1))
SMALL_DEPTH = 40

# Every fault kind and operator action is open to every path, one fault a path: the
# depth reaches a run parked for approval, approved and completed by the shortest path.
DEEP = Scenario(
    calls=(LOOKUP, STAMP, APPROVED_CHARGE),
    workers=2,
    budget=Budget(
        crashes=1,
        pauses=1,
        ticks=1,
        lost_answers=1,
        delayed_answers=1,
        refusals=1,
        data_errors=1,
        failed_read_backs=1,
        store_steps=1,
        stops=1,
        decisions=1,
        cancels=1,
        resolutions=1,
        redrives=1,
        purges=1,
        resubmits=1,
        total=1,
    ),
)
DEEP_DEPTH = 19

# Each hole put back, with the smallest world that shows it and the guarantee it breaks.
HOLES: dict[str, tuple[Scenario, str]] = {
    "paused worker between intent and call": (
        Scenario((CHARGE,), 1, Budget(pauses=1), Holes(skip_admission=True)),
        "G6/G7",
    ),
    "lock wait that outlives the lease": (
        Scenario((CHARGE,), 1, Budget(pauses=1, delayed_answers=1), Holes(lease_from_answer=True)),
        "G6/G7",
    ),
    "lost COMMIT answer taken as stored": (
        Scenario((CHARGE,), 1, Budget(lost_answers=1), Holes(unanswered_as_stored=True)),
        "G3",
    ),
    "read-back taken as a renewal": (
        Scenario(
            (LOOKUP,),
            1,
            Budget(lost_answers=1, failed_read_backs=1, pauses=1),
            Holes(read_back_renews=True),
        ),
        "G6/G7",
    ),
    "purge that forgets keys": (
        Scenario(
            (CHARGE,), 1, Budget(ticks=1, purges=1, resubmits=1), Holes(purge_forgets_keys=True)
        ),
        "G11",
    ),
    "late approval": (
        Scenario(
            (APPROVED_CHARGE,), 1, Budget(decisions=1, store_steps=1), Holes(late_decisions=True)
        ),
        "G12",
    ),
    "clock step reaping by the store's wall clock": (
        Scenario((CHARGE,), 1, Budget(store_steps=1), Holes(reap_by_store_clock=True)),
        "G6/G7",
    ),
    "stop during an intent commit": (
        Scenario((CHARGE,), 1, Budget(stops=1), Holes(keep_intent_on_stop=True)),
        "issue 18 item 6",
    ),
}
