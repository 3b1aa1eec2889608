"""The guarantees, as invariants over one simulated world: checked after every transition.

The ledger is the tools' own account of every call made, written when the call
started, independent of the journal; each check compares it with the store.
"""

from __future__ import annotations

from collections import Counter

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import arguments_digest, load_json
from leaseward.runtime.human_requests import Decision
from leaseward.runtime.lifecycle import Reason, RunState, StepStatus

from .scenario import KEY
from .world import World

__all__ = ["violation"]

_SETTLED = (StepStatus.SUCCEEDED, StepStatus.FAILED)


def violation(world: World) -> str | None:
    """The first guarantee the world breaks, in words; None if it keeps them all."""
    for check in (
        _twice,
        _without_intent,
        _lease_not_held,
        _older_epoch_after_newer,
        _approvals,
        _completed_over_unrecorded_write,
        _keys,
        _lost,
        _dead_lettered_unstarted,
    ):
        found = check(world)
        if found is not None:
            return found
    return None


def _twice(world: World) -> str | None:
    counts = Counter(
        (e.run_id, e.call_id) for e in world.ledger if e.effect is ToolEffect.NON_IDEMPOTENT_WRITE
    )
    for (run_id, call_id), count in counts.items():
        if count > 1:
            return f"G2: the NON_IDEMPOTENT_WRITE {call_id} of {run_id} executed {count} times"
    return None


def _without_intent(world: World) -> str | None:
    for e in world.ledger:
        needs_intent = (e.effect is not None and e.effect.is_write) or e.approval is not None
        if needs_intent and not e.intent_durable:
            return (
                f"G3: {e.worker} executed {e.call_id} of {e.run_id} (epoch "
                f"{e.epoch}) without a durable intent"
            )
    return None


def _lease_not_held(world: World) -> str | None:
    for e in world.ledger:
        if not e.lease_held:
            return (
                f"G6/G7: {e.worker} started {e.call_id} of {e.run_id} at epoch {e.epoch}, "
                "a lease the store no longer holds"
            )
    return None


def _older_epoch_after_newer(world: World) -> str | None:
    newest: dict[str, tuple[int, str]] = {}
    for e in world.ledger:
        before = newest.get(e.run_id)
        if before is not None and e.epoch < before[0]:
            return (
                f"G6: {e.worker} executed {e.call_id} of {e.run_id} at epoch {e.epoch} after "
                f"{before[1]} had executed calls of it at epoch {before[0]}: two workers at once"
            )
        if before is None or e.epoch > before[0]:
            newest[e.run_id] = (e.epoch, e.worker)
    return None


def _approvals(world: World) -> str | None:
    executed: Counter[tuple[str, str]] = Counter()
    for e in world.ledger:
        if e.approval is None:
            continue
        executed[(e.run_id, e.call_id)] += 1
        decision, decided_at, expires_at, digest = e.approval
        where = f"{e.call_id} of {e.run_id}"
        if decision is not Decision.APPROVED:
            shown = "no decision" if decision is None else decision.value
            return f"G12: {where} executed with {shown}"
        if decided_at is not None and expires_at is not None and decided_at > expires_at:
            return f"G12: {where} executed on an approval given after its expiry"
        if digest != arguments_digest(load_json(e.arguments_json)):
            return f"G12: {where} executed with other arguments than were approved"
        if executed[(e.run_id, e.call_id)] > 1:
            return f"G12: the approval of {where} executed twice"
    return None


def _completed_over_unrecorded_write(world: World) -> str | None:
    for run_id, run in world.store.runs.items():
        if run.state is not RunState.COMPLETED:
            continue
        journal = world.store.steps[run_id].values()
        for e in world.ledger:
            if e.run_id != run_id or e.effect is None or not e.effect.is_write:
                continue
            if not any(row.call_id == e.call_id and row.status in _SETTLED for row in journal):
                return f"G4: {run_id} completed over {e.call_id}, a write with no durable outcome"
    return None


def _keys(world: World) -> str | None:
    runs = world.accepted.get(KEY, [])
    if len(runs) > 1:
        return f"G11: the idempotency key {KEY} made {len(runs)} runs: {', '.join(runs)}"
    return None


def _lost(world: World) -> str | None:
    for runs in world.accepted.values():
        for run_id in runs:
            if run_id not in world.store.runs and run_id not in world.purged:
                return f"G1: {run_id} was accepted and is gone"
    return None


def _dead_lettered_unstarted(world: World) -> str | None:
    for run_id, run in world.store.runs.items():
        if run.state is not RunState.DEAD_LETTERED or run.reason is not Reason.INTERRUPTED_WRITE:
            continue
        row = world.store.last_step(run_id)
        if row is not None and (run_id, row.seq, row.epoch) in world.abandoned:
            return (
                f"issue 18 item 6: {run_id} dead-lettered interrupted_write over the intent at "
                f"seq {row.seq}, whose call its attempt knew had never started"
            )
    return None
