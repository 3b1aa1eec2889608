"""The Persister's write requests, one kind at a time: what each adds to a batch, how much
of a batch it takes, what its asker gets from its share of the results, and what it
gets when the batch's transaction failed as a whole."""

from __future__ import annotations

from typing import Any

import pytest

from leaseward.actors import Reply
from leaseward.actors.messages import (
    Cancel,
    Claim,
    Persist,
    PersisterMessage,
    ReapRuns,
    Renew,
    Submit,
)
from leaseward.runtime.commits import Fenced, Refused, Stored, Unanswered
from leaseward.runtime.errors import CommitOutcomeUnknown, RunNotFound, StoreError
from leaseward.runtime.lifecycle import Event, RunMode, RunState
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.storage import (
    BatchItem,
    CancelOutcome,
    ClaimRequest,
    ExpiredRun,
    Reap,
    WriteBatch,
    WriteResults,
)


def new_run(n: int) -> NewRun:
    return NewRun(id=f"new-{n}", agent="a", mode=RunMode.QUEUED, input_json=str(n))


def record(run_id: str) -> RunRecord:
    return RunRecord(
        id=run_id,
        agent="a",
        mode=RunMode.QUEUED,
        state=RunState.QUEUED,
        reason=None,
        failure_class=None,
        input=None,
        result=None,
        error=None,
        epoch=0,
        requeues=0,
        lease_owner=None,
        lease_expires_at=None,
        available_at=0.0,
        cancel_requested=False,
        created_at=0.0,
        updated_at=0.0,
        finished_at=None,
    )


def reap(run_id: str) -> Reap:
    expired = ExpiredRun(run=record(run_id), last_effect=None, last_status=None, renewals=1)
    return Reap(expired, Settlement(Event.REQUEUE))


# A Reply is a future of the running loop: every request is made inside one.
pytestmark = pytest.mark.anyio

ITEMS = tuple(BatchItem(f"run-{n}", 1, lease_seconds=3.0) for n in range(3))
CLAIM = ClaimRequest("w", 4, 3.0, ("a",))


def every_kind() -> list[PersisterMessage]:
    return [
        Persist(ITEMS[0], Reply()),
        Renew(ITEMS[1:], Reply()),
        Submit((new_run(1), new_run(2), new_run(3)), Reply()),
        Claim(CLAIM, Reply()),
        Cancel("run-9", Reply()),
        ReapRuns((reap("run-7"), reap("run-8")), Reply()),
    ]


async def test_each_kind_asks_its_own_part_of_the_batch_and_takes_one_place_per_request() -> None:
    persist, renew, submit, claim, cancel, reaps = every_kind()
    assert (persist.writes, persist.size) == (WriteBatch(items=ITEMS[:1]), 1)
    assert (renew.writes, renew.size) == (WriteBatch(items=ITEMS[1:]), 2)
    # A submit of many runs counts each of them: a batch is bounded by its rows.
    assert (submit.writes.new_runs, submit.size) == ((new_run(1), new_run(2), new_run(3)), 3)
    assert (claim.writes, claim.size) == (WriteBatch(claims=(CLAIM,)), 1)
    assert (cancel.writes, cancel.size) == (WriteBatch(cancels=("run-9",)), 1)
    assert (reaps.writes, reaps.size) == (WriteBatch(reaps=(reap("run-7"), reap("run-8"))), 2)


async def test_a_joined_batch_hands_each_request_back_exactly_its_share_of_the_results() -> None:
    requests = every_kind()
    parts = [request.writes for request in requests]
    batch = WriteBatch.joined(parts)
    assert len(batch) == sum(request.size for request in requests) == 10
    missing = RunNotFound("no run with id 'run-9'")
    results = WriteResults(
        new_runs=(record("new-1"), StoreError("refused"), record("new-3")),
        cancels=(missing,),
        items=(Stored(), Fenced(), Stored(cancel_requested=True)),
        reaps=(True, False),
        claims=((record("run-5"),),),
    )

    answers = [
        request.answer_from(share)
        for request, share in zip(requests, results.shares(parts), strict=True)
    ]

    assert answers == [
        Stored(),
        (Fenced(), Stored(cancel_requested=True)),
        results.new_runs,
        (record("run-5"),),
        missing,
        (True, False),
    ]


async def test_shares_in_the_batch_order_of_kinds_not_in_the_order_requests_came() -> None:
    first, second = Persist(ITEMS[0], Reply()), Persist(ITEMS[1], Reply())
    cancel = Cancel("run-9", Reply())
    parts = [first.writes, cancel.writes, second.writes]
    results = WriteResults(cancels=(CancelOutcome.REQUESTED,), items=(Fenced(), Stored()))

    shares = list(results.shares(parts))

    assert [first.answer_from(shares[0]), second.answer_from(shares[2])] == [Fenced(), Stored()]
    assert cancel.answer_from(shares[1]) is CancelOutcome.REQUESTED
    assert WriteResults.joined(shares) == results


@pytest.mark.parametrize(
    "results",
    [
        WriteResults(items=(Stored(),)),
        WriteResults(items=(Stored(), Stored(), Stored())),
        # As many results as requests, but one of the wrong kind.
        WriteResults(items=(Stored(),), cancels=(CancelOutcome.CANCELLED,)),
    ],
)
async def test_results_that_do_not_match_the_requests_one_for_one_are_refused(
    results: WriteResults,
) -> None:
    parts = [Persist(ITEMS[0], Reply()).writes, Persist(ITEMS[1], Reply()).writes]
    with pytest.raises(ValueError, match="results"):
        list(results.shares(parts))


@pytest.mark.parametrize(
    ("error", "unanswered", "outcome"),
    [
        (StoreError("disk I/O error"), False, Refused("disk I/O error")),
        (CommitOutcomeUnknown("connection lost"), True, Unanswered("connection lost")),
    ],
)
async def test_a_failed_batch_answers_each_kind_with_its_failure_value(
    error: StoreError, unanswered: bool, outcome: Any
) -> None:
    persist, renew, submit, claim, cancel, reaps = every_kind()
    assert persist.failure(error, unanswered=unanswered) == outcome
    assert renew.failure(error, unanswered=unanswered) == (outcome, outcome)
    assert submit.failure(error, unanswered=unanswered) == (error, error, error)
    assert claim.failure(error, unanswered=unanswered) is error
    assert cancel.failure(error, unanswered=unanswered) is error
    assert reaps.failure(error, unanswered=unanswered) == (error, error)


async def test_a_failed_commit_is_never_taken_for_a_refusal_of_the_items_data() -> None:
    refused = Persist(ITEMS[0], Reply()).failure(
        StoreError("text it cannot hold", data_error=True), unanswered=False
    )
    # The batch failed as a whole: the item itself may be fine, and is sent again.
    assert refused == Refused("text it cannot hold", data_error=False)
