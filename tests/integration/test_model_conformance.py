"""The bridge between the model checker's simulated store and the real ones.

Each scenario is a table of operations and the decision each must get (stored,
fenced, refused; reaped or not; a decision taken or refused as late; a submit
answered with its run, or refused as purged). It runs against the simulated store
of tests/proof/model and against SQLite and PostgreSQL through the public Store
API, and all three must agree with the table, and on the runs, journals and
requests they end with. Whatever the checker proves of the simulation holds of the
real stores only as far as these tables reach: a rule added to the SQL store
needs its row here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import msgspec
import pytest

from leaseward.actors.reaper import plan_reap
from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored, Unanswered
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import arguments_digest, dump_json, request_digest
from leaseward.runtime.errors import (
    IdempotencyKeyConflict,
    IllegalTransition,
    RequestExpired,
    RequestNotFound,
    RunPurged,
)
from leaseward.runtime.human_requests import Decision, NewRequest, RequestKind
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import (
    Event,
    Reason,
    RecoveryPolicy,
    RunMode,
    RunState,
    StepKind,
    StepStatus,
)
from leaseward.runtime.runs import NewRun
from leaseward.runtime.settlements import Settlement
from leaseward.storage import SQLStore
from leaseward.storage.protocol import BatchItem, ExpiredRun, LeaseMark

# The conformance suite's fixtures: a store of each dialect on a clock the test moves.
from tests.integration.test_store_conformance import StoreClock, clock, store  # noqa: F401
from tests.proof.model.store import SimStore

pytestmark = pytest.mark.anyio

AGENT = "payer"
ARGUMENTS = {"amount": 5}
POLICY = RecoveryPolicy()
TERMINAL = tuple(state for state in RunState if state.terminal)


def _intent(seq: int, arguments: Any = ARGUMENTS) -> StepWrite:
    return StepWrite(
        seq=seq,
        kind=StepKind.TOOL,
        status=StepStatus.STARTED,
        tool="charge",
        call_id=f"c{seq}",
        effect=ToolEffect.NON_IDEMPOTENT_WRITE,
        idempotency_key=f"k{seq}",
        arguments_json=dump_json(arguments),
    )


STEPS: dict[str, Callable[[int], StepWrite]] = {
    "provider": lambda seq: StepWrite(
        seq=seq, kind=StepKind.PROVIDER, status=StepStatus.SUCCEEDED, output_json='{"turn":1}'
    ),
    "intent": _intent,
    "intent with other arguments": lambda seq: _intent(seq, {"amount": 6}),
    "outcome": lambda seq: msgspec.structs.replace(
        _intent(seq), status=StepStatus.SUCCEEDED, output_json='{"charged":5}', settles=True
    ),
    "other outcome": lambda seq: msgspec.structs.replace(
        _intent(seq), status=StepStatus.SUCCEEDED, output_json='{"charged":6}', settles=True
    ),
    "withdrawal": lambda seq: msgspec.structs.replace(_intent(seq), withdraws=True),
}

PARK = Settlement(
    Event.AWAIT_APPROVAL,
    requests=(
        NewRequest(
            seq=0,
            position=0,
            call_id="c1",
            kind=RequestKind.APPROVAL,
            tool="charge",
            effect=ToolEffect.NON_IDEMPOTENT_WRITE,
            arguments_json=dump_json(ARGUMENTS),
            arguments_digest=arguments_digest(ARGUMENTS),
            timeout_seconds=5.0,
        ),
    ),
)
SETTLEMENTS = {
    "complete": Settlement(Event.COMPLETE, Reason.COMPLETED, result_json='"ok"'),
    "release": Settlement(Event.RELEASE),
    "requeue": Settlement(Event.REQUEUE, spends_retry=True),
    "park": PARK,
    # The same call asked for again in a later turn: the newer request is the live one.
    "park again": attrs.evolve(PARK, requests=(attrs.evolve(PARK.requests[0], seq=2),)),
    "cancel": Settlement(Event.CANCEL_RUNNING, Reason.CANCELLED),
    "dead letter": Settlement(Event.DEAD_LETTER, Reason.INTERRUPTED_WRITE, error="interrupted"),
}


def new_run(run_id: str, key: str | None, value: int = 1) -> NewRun:
    return NewRun(
        id=run_id,
        agent=AGENT,
        mode=RunMode.QUEUED,
        input_json=dump_json(value),
        idempotency_key=key,
        request_digest=None if key is None else request_digest(AGENT, value),
    )


def decision_of(outcome: CommitOutcome) -> str:
    if isinstance(outcome, Stored):
        return "stored, cancel requested" if outcome.cancel_requested else "stored"
    if isinstance(outcome, Fenced):
        return "fenced"
    if isinstance(outcome, Refused):
        return "refused for its data" if outcome.data_error else "refused"
    assert isinstance(outcome, Unanswered)
    return "unanswered"


def refusal(exc: Exception) -> str:
    kinds = {
        RunPurged: "purged",
        IdempotencyKeyConflict: "conflict",
        RequestExpired: "expired",
        IllegalTransition: "illegal",
        RequestNotFound: "not found",
    }
    return next(words for kind, words in kinds.items() if isinstance(exc, kind))


class Target:
    """One store under test, driven op by op; the reaper's watched marks and fetched
    expired runs are kept here, as a reaper keeps them."""

    def __init__(self) -> None:
        self.marks: list[LeaseMark] = []
        self.expired: list[ExpiredRun] = []

    async def do(self, op: tuple[Any, ...]) -> str:
        name, *args = op
        try:
            operation: Callable[..., Awaitable[str]] = getattr(self, name.replace(" ", "_"))
            return await operation(*args)
        except (
            RunPurged,
            IdempotencyKeyConflict,
            RequestExpired,
            IllegalTransition,
            RequestNotFound,
        ) as exc:
            return refusal(exc)

    async def watch(self) -> str:
        self.marks = await self.running_leases()
        return f"{len(self.marks)} running"

    async def fetch_expired(self) -> str:
        self.expired = await self.expired_runs(self.marks)
        return f"{len(self.expired)} unrenewed"

    async def reap(self) -> str:
        results = [await self.reap_one(e, plan_reap(e, POLICY)) for e in self.expired]
        return ", ".join("reaped" if done else "not reaped" for done in results) or "none"

    async def running_leases(self) -> list[LeaseMark]:
        raise NotImplementedError

    async def expired_runs(self, marks: Sequence[LeaseMark]) -> list[ExpiredRun]:
        raise NotImplementedError

    async def reap_one(self, expired: ExpiredRun, settlement: Settlement) -> bool:
        raise NotImplementedError


class Simulated(Target):
    def __init__(self) -> None:
        super().__init__()
        self.store = SimStore()

    async def advance(self, seconds: float) -> str:
        self.store.now += seconds
        return "ok"

    async def submit(self, run_id: str, key: str | None, value: int = 1) -> str:
        return await self._created(self.store.create_run(new_run(run_id, key, value)).id, run_id)

    async def _created(self, got: str, asked: str) -> str:
        return f"created {got}" if got == asked else f"existing {got}"

    async def claim(self, lease: float) -> str:
        runs = self.store.claim_runs("w1", 1, lease)
        return f"claimed {runs[0].id} at epoch {runs[0].epoch}" if runs else "none"

    async def commit(
        self, run_id: str, epoch: int, steps: Sequence[tuple[str, int]], settle: str | None = None
    ) -> str:
        return decision_of(self.store.commit_item(_item(run_id, epoch, steps, settle)))

    async def cancel(self, run_id: str) -> str:
        return self.store.request_cancel(run_id)

    async def approve(self, run_id: str, call_id: str) -> str:
        self.store.decide(run_id, call_id, Decision.APPROVED)
        return "decided"

    async def reject(self, run_id: str, call_id: str) -> str:
        self.store.decide(run_id, call_id, Decision.REJECTED)
        return "decided"

    async def expire(self) -> str:
        return f"{self.store.expire_requests()} expired"

    async def redrive(self, run_id: str) -> str:
        self.store.redrive(run_id)
        return "requeued"

    async def resolve(self, run_id: str, applied: bool) -> str:
        self.store.resolve(run_id, applied=applied, operator="op")
        return "requeued"

    async def purge(self, older_than: float) -> str:
        return f"{self.store.purge_finished(TERMINAL, older_than)} purged"

    async def forget(self, older_than: float) -> str:
        return f"{self.store.forget_keys(older_than)} forgotten"

    async def running_leases(self) -> list[LeaseMark]:
        return self.store.running_leases()

    async def expired_runs(self, marks: Sequence[LeaseMark]) -> list[ExpiredRun]:
        return self.store.expired_runs(list(marks))

    async def reap_one(self, expired: ExpiredRun, settlement: Settlement) -> bool:
        return self.store.reap(expired, settlement)

    async def end(self, run_ids: Sequence[str]) -> list[Any]:
        return [
            _shape(
                self.store.get_run(run_id),
                self.store.list_steps(run_id),
                [(r.call_id, r.decision) for r in self.store.requests.get(run_id, [])],
            )
            for run_id in run_ids
        ]


class Real(Target):
    def __init__(self, sql_store: SQLStore, store_clock: StoreClock) -> None:
        super().__init__()
        self.store = sql_store
        self.clock = store_clock

    async def advance(self, seconds: float) -> str:
        await self.clock.advance(seconds)
        return "ok"

    async def submit(self, run_id: str, key: str | None, value: int = 1) -> str:
        got = (await self.store.create_run(new_run(run_id, key, value))).id
        return f"created {got}" if got == run_id else f"existing {got}"

    async def claim(self, lease: float) -> str:
        runs = await self.store.claim_runs("w1", 1, lease, [AGENT])
        return f"claimed {runs[0].id} at epoch {runs[0].epoch}" if runs else "none"

    async def commit(
        self, run_id: str, epoch: int, steps: Sequence[tuple[str, int]], settle: str | None = None
    ) -> str:
        (outcome,) = await self.store.commit_batch([_item(run_id, epoch, steps, settle)])
        return decision_of(outcome)

    async def cancel(self, run_id: str) -> str:
        return (await self.store.request_cancel(run_id)).value

    async def approve(self, run_id: str, call_id: str) -> str:
        await self.store.decide(run_id, call_id, Decision.APPROVED, operator="op")
        return "decided"

    async def reject(self, run_id: str, call_id: str) -> str:
        await self.store.decide(run_id, call_id, Decision.REJECTED, operator="op")
        return "decided"

    async def expire(self) -> str:
        return f"{len(await self.store.expire_requests(100))} expired"

    async def redrive(self, run_id: str) -> str:
        await self.store.redrive(run_id)
        return "requeued"

    async def resolve(self, run_id: str, applied: bool) -> str:
        await self.store.resolve(run_id, applied=applied, operator="op")
        return "requeued"

    async def purge(self, older_than: float) -> str:
        return f"{(await self.store.purge_finished(TERMINAL, older_than)).runs} purged"

    async def forget(self, older_than: float) -> str:
        return f"{(await self.store.forget_keys(older_than)).keys} forgotten"

    async def running_leases(self) -> list[LeaseMark]:
        return await self.store.running_leases()

    async def expired_runs(self, marks: Sequence[LeaseMark]) -> list[ExpiredRun]:
        return await self.store.expired_runs(marks)

    async def reap_one(self, expired: ExpiredRun, settlement: Settlement) -> bool:
        return await self.store.reap(expired, settlement)

    async def end(self, run_ids: Sequence[str]) -> list[Any]:
        return [
            _shape(
                await self.store.get_run(run_id),
                await self.store.list_steps(run_id),
                [(r.call_id, r.decision) for r in await self.store.list_requests(run_id)],
            )
            for run_id in run_ids
        ]


def _item(
    run_id: str, epoch: int, steps: Sequence[tuple[str, int]], settle: str | None
) -> BatchItem:
    return BatchItem(
        run_id=run_id,
        epoch=epoch,
        steps=tuple(STEPS[kind](seq) for kind, seq in steps),
        lease_seconds=0.0 if settle is not None else 5.0,
        settlement=None if settle is None else SETTLEMENTS[settle],
    )


def _shape(run: Any, steps: Sequence[Any], requests: Sequence[Any]) -> Any:
    """What both kinds of store must agree on at the end: times left out."""
    if run is None:
        return None
    return (
        (run.state, run.reason, run.epoch, run.requeues, run.cancel_requested, run.lease_owner),
        [(s.seq, s.epoch, s.kind, s.status, s.call_id, json.dumps(s.output)) for s in steps],
        list(requests),
    )


CLAIMED = [("submit", "r1", None), ("claim", 5.0)]
INTENT = ("commit", "r1", 1, [("intent", 1)])

# Each scenario: (name, [(operation, the decision it must get)]).
SCENARIOS: list[tuple[str, list[tuple[tuple[Any, ...], str]]]] = [
    (
        "a commit under an old or a future epoch is fenced",
        [
            (CLAIMED[0], "created r1"),
            (CLAIMED[1], "claimed r1 at epoch 1"),
            (("commit", "r1", 0, [("provider", 0)]), "fenced"),
            (("commit", "r1", 2, [("provider", 0)]), "fenced"),
            (("commit", "r1", 1, [("provider", 0)]), "stored"),
            (("commit", "r1", 1, [], "release"), "stored"),
            (("claim", 5.0), "claimed r1 at epoch 2"),
            (("commit", "r1", 1, [("intent", 1)]), "fenced"),
            (("commit", "r1", 2, [("intent", 1)]), "stored"),
        ],
    ),
    (
        "a commit after a reap is fenced, and the reap went by the journal's last row",
        [
            (CLAIMED[0], "created r1"),
            (CLAIMED[1], "claimed r1 at epoch 1"),
            (INTENT, "stored"),
            (("watch",), "1 running"),
            (("advance", 6.0), "ok"),
            (("fetch expired",), "1 unrenewed"),
            (("reap",), "reaped"),
            (("commit", "r1", 1, [("outcome", 1)]), "fenced"),
            (("claim", 5.0), "none"),
            (("redrive", "r1"), "illegal"),
        ],
    ),
    (
        "a lease past its expiry on the store's clock still holds until it is reaped",
        [
            (CLAIMED[0], "created r1"),
            (CLAIMED[1], "claimed r1 at epoch 1"),
            (("advance", 60.0), "ok"),
            (INTENT, "stored"),
            (("commit", "r1", 1, [("outcome", 1)]), "stored"),
        ],
    ),
    (
        "a renewal between the reaper's read and its reap wins",
        [
            (CLAIMED[0], "created r1"),
            (CLAIMED[1], "claimed r1 at epoch 1"),
            (("watch",), "1 running"),
            (("fetch expired",), "1 unrenewed"),
            (("commit", "r1", 1, []), "stored"),
            (("reap",), "not reaped"),
            (("fetch expired",), "0 unrenewed"),
            (("commit", "r1", 1, [("provider", 0)]), "stored"),
        ],
    ),
    (
        "a cancel of a running run is seen at its next commit; its settlement fences the rest",
        [
            (CLAIMED[0], "created r1"),
            (CLAIMED[1], "claimed r1 at epoch 1"),
            (("cancel", "r1"), "requested"),
            (("commit", "r1", 1, [("provider", 0)]), "stored, cancel requested"),
            (("commit", "r1", 1, [], "cancel"), "stored, cancel requested"),
            (("commit", "r1", 1, [("intent", 1)]), "fenced"),
            (("cancel", "r1"), "already_finished"),
            (("submit", "r2", None, 2), "created r2"),
            (("cancel", "r2"), "cancelled"),
            (("claim", 5.0), "none"),
        ],
    ),
    (
        "an intent sent again is stored once; sent with other arguments it is refused",
        [
            (CLAIMED[0], "created r1"),
            (CLAIMED[1], "claimed r1 at epoch 1"),
            (INTENT, "stored"),
            (INTENT, "stored"),
            (("commit", "r1", 1, [("intent with other arguments", 1)]), "refused for its data"),
            (("commit", "r1", 1, [("outcome", 1)]), "stored"),
            (("commit", "r1", 1, [("outcome", 1)]), "stored"),
            (("commit", "r1", 1, [("other outcome", 1)]), "refused for its data"),
            (("commit", "r1", 1, [("outcome", 2)]), "refused for its data"),
            # All or nothing: the provider row of a refused item is not stored.
            (("commit", "r1", 1, [("provider", 3), ("outcome", 2)]), "refused for its data"),
        ],
    ),
    (
        "a withdrawal removes an open intent, changes nothing without one, is refused after "
        "an outcome or at another epoch",
        [
            (CLAIMED[0], "created r1"),
            (CLAIMED[1], "claimed r1 at epoch 1"),
            (("commit", "r1", 1, [("withdrawal", 1)]), "stored"),
            (INTENT, "stored"),
            (("commit", "r1", 1, [("withdrawal", 1)]), "stored"),
            (("commit", "r1", 1, [("intent", 2)]), "stored"),
            (("commit", "r1", 1, [("outcome", 2)]), "stored"),
            (("commit", "r1", 1, [("withdrawal", 2)]), "refused"),
            (("commit", "r1", 1, [("intent", 3)], "release"), "stored"),
            (("claim", 5.0), "claimed r1 at epoch 2"),
            (("commit", "r1", 2, [("withdrawal", 3)]), "refused"),
        ],
    ),
    (
        "a decision at the expiry is in time; after it, refused as expired and the run requeued",
        [
            (CLAIMED[0], "created r1"),
            (CLAIMED[1], "claimed r1 at epoch 1"),
            (("commit", "r1", 1, [("provider", 0)], "park"), "stored"),
            (("advance", 5.0), "ok"),
            (("expire",), "0 expired"),
            (("approve", "r1", "c1"), "decided"),
            (("approve", "r1", "c1"), "illegal"),
            (("claim", 5.0), "claimed r1 at epoch 2"),
            (("commit", "r1", 2, [("provider", 2)], "park again"), "stored"),
            (("advance", 5.5), "ok"),
            (("approve", "r1", "c1"), "expired"),
            (("reject", "r1", "c1"), "expired"),
            (("claim", 5.0), "claimed r1 at epoch 3"),
        ],
    ),
    (
        "the reaper expires a request nobody decided, and a rejection in time is taken",
        [
            (CLAIMED[0], "created r1"),
            (CLAIMED[1], "claimed r1 at epoch 1"),
            (("commit", "r1", 1, [("provider", 0)], "park"), "stored"),
            (("approve", "r1", "c9"), "not found"),
            (("advance", 6.0), "ok"),
            (("expire",), "1 expired"),
            (("submit", "r2", None, 2), "created r2"),
            (("claim", 5.0), "claimed r1 at epoch 2"),
            (("claim", 5.0), "claimed r2 at epoch 1"),
            (("commit", "r2", 1, [("provider", 0)], "park"), "stored"),
            (("reject", "r2", "c1"), "decided"),
        ],
    ),
    (
        "a purged run's key names it; only forgetting the key lets a submit make a new run",
        [
            (("submit", "r1", "K"), "created r1"),
            (("submit", "r2", "K"), "existing r1"),
            (("submit", "r3", "K", 2), "conflict"),
            (("claim", 5.0), "claimed r1 at epoch 1"),
            (("commit", "r1", 1, [], "complete"), "stored"),
            (("purge", 0.5), "0 purged"),
            (("advance", 1.0), "ok"),
            (("purge", 0.5), "1 purged"),
            (("submit", "r4", "K"), "purged"),
            (("forget", 0.5), "1 forgotten"),
            (("submit", "r5", "K"), "created r5"),
        ],
    ),
    (
        "an interrupted write is resolved, not redriven; a recorded one is redriven",
        [
            (CLAIMED[0], "created r1"),
            (CLAIMED[1], "claimed r1 at epoch 1"),
            (INTENT, "stored"),
            (("commit", "r1", 1, [], "dead letter"), "stored"),
            (("redrive", "r1"), "illegal"),
            (("resolve", "r1", True), "requeued"),
            (("resolve", "r1", False), "illegal"),
            (("claim", 5.0), "claimed r1 at epoch 3"),
            (("commit", "r1", 3, [("intent", 2), ("outcome", 2)], "dead letter"), "stored"),
            (("resolve", "r1", True), "illegal"),
            (("redrive", "r1"), "requeued"),
            (("claim", 5.0), "claimed r1 at epoch 5"),
            (("commit", "r1", 5, [], "complete"), "stored"),
            (("redrive", "r1"), "illegal"),
        ],
    ),
    (
        "a settlement with requests stores them with the parked run; settling twice is fenced",
        [
            (CLAIMED[0], "created r1"),
            (CLAIMED[1], "claimed r1 at epoch 1"),
            (("commit", "r1", 1, [("provider", 0)], "park"), "stored"),
            (("commit", "r1", 1, [], "complete"), "fenced"),
            (("cancel", "r1"), "cancelled"),
            (("approve", "r1", "c1"), "illegal"),
        ],
    ),
]


async def play(target: Target, operations: Sequence[tuple[tuple[Any, ...], str]]) -> list[str]:
    return [await target.do(op) for op, _ in operations]


@pytest.mark.parametrize(
    "operations", [ops for _, ops in SCENARIOS], ids=[name for name, _ in SCENARIOS]
)
async def test_the_simulated_store_decides_as_the_real_one(
    store: SQLStore,  # noqa: F811 (the fixture imported above)
    clock: StoreClock,  # noqa: F811
    operations: list[tuple[tuple[Any, ...], str]],
) -> None:
    expected = [decision for _, decision in operations]
    simulated, real = Simulated(), Real(store, clock)
    assert await play(simulated, operations) == expected
    assert await play(real, operations) == expected
    run_ids = sorted({op[1] for op, _ in operations if op[0] == "submit"})
    assert await simulated.end(run_ids) == await real.end(run_ids)
