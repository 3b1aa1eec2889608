"""SQLite writes a small batch's rows one statement a row, and a large batch's with one
statement a kind of change: the same batches must get the same answers and leave the
same store either way."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import msgspec
import pytest

from leaseward.runtime.clock import ManualClock
from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import Event, Reason, RunMode, StepKind, StepStatus
from leaseward.runtime.messages import ProviderReply, ToolCall
from leaseward.runtime.runs import NewRun
from leaseward.runtime.settlements import Settlement
from leaseward.storage import BatchItem, SQLStore, journal_items
from tests.integration.faults import Injection, faulty_store
from tests.integration.support import provider_step

pytestmark = pytest.mark.anyio

FORMS = ("rows", "sets")
SET_QUERIES = {"insert_step_set", "settle_step_set"}
RUNS = [str(uuid.UUID(int=n)) for n in range(5)]
ASK = ProviderReply(tool_calls=[ToolCall("charge", {"amount": 5}, "c1")])


def intent(seq: int, amount: int = 5) -> StepWrite:
    return StepWrite(
        seq=seq,
        kind=StepKind.TOOL,
        status=StepStatus.STARTED,
        tool="charge",
        call_id="c1",
        effect=ToolEffect.NON_IDEMPOTENT_WRITE,
        idempotency_key="k1",
        arguments_json=dump_json({"amount": amount}),
    )


def outcome_of(step: StepWrite, charged: int = 5) -> StepWrite:
    return msgspec.structs.replace(
        step, status=StepStatus.SUCCEEDED, output_json=dump_json({"charged": charged}), settles=True
    )


def batches() -> list[list[BatchItem]]:
    """Every kind of item a batch carries, with the answers each can get: stored, fenced
    (a stale epoch), stored with a cancel asked, refused (a contradiction, or an outcome
    with no open intent), sent again after a lost answer, and a settlement."""
    zero, one, two, three, four = RUNS
    first = [
        BatchItem(zero, 1, steps=(provider_step(0, ASK), intent(1)), lease_seconds=30.0),
        BatchItem(one, 1, steps=(provider_step(0, ASK), intent(1)), lease_seconds=30.0),
        BatchItem(two, 2, steps=(provider_step(0, ASK),), lease_seconds=30.0),
        BatchItem(three, 1, steps=(provider_step(0, ASK),), lease_seconds=20.0),
        BatchItem(four, 1, lease_seconds=10.0),
    ]
    second = [
        BatchItem(zero, 1, steps=(outcome_of(intent(1)),), lease_seconds=30.0),
        BatchItem(one, 1, steps=(intent(1, amount=6),), lease_seconds=30.0),
        BatchItem(two, 1, steps=(provider_step(0, ASK),), lease_seconds=30.0),
        BatchItem(three, 1, steps=(outcome_of(intent(1)),), lease_seconds=30.0),
        BatchItem(
            four, 1, settlement=Settlement(Event.COMPLETE, Reason.COMPLETED, result_json='"ok"')
        ),
    ]
    third = [
        BatchItem(zero, 1, steps=(outcome_of(intent(1)),), lease_seconds=30.0),
        BatchItem(one, 1, steps=(outcome_of(intent(1)),), lease_seconds=30.0),
        BatchItem(four, 1, lease_seconds=30.0),
    ]
    fourth = [BatchItem(zero, 1, steps=(outcome_of(intent(1), charged=6),), lease_seconds=30.0)]
    return [first, first, second, third, fourth]


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[dict[str, tuple[SQLStore, Injection]]]:
    """A SQLite store for each form, with its runs claimed and a cancel asked for one, and
    a count of the set statements it sends."""
    opened: dict[str, tuple[SQLStore, Injection]] = {}
    try:
        for form in FORMS:
            store, executor = await faulty_store(
                f"sqlite:///{tmp_path / f'{form}.db'}", clock=ManualClock()
            )
            opened[form] = (store, executor.inject(lambda statement: statement.name in SET_QUERIES))
            for run_id in RUNS:
                await store.create_run(
                    NewRun(id=run_id, agent="a", mode=RunMode.QUEUED, input_json='"x"')
                )
            assert len(await store.claim_runs("w", len(RUNS), 30.0, ["a"])) == len(RUNS)
            await store.request_cancel(RUNS[3])
        yield opened
    finally:
        for store, _ in opened.values():
            await store.aclose()


async def committed(
    form: str, store: SQLStore, items: Sequence[BatchItem], monkeypatch: pytest.MonkeyPatch
) -> list[CommitOutcome]:
    with monkeypatch.context() as patched:
        patched.setattr(journal_items, "SET_STATEMENTS_AT", 1 if form == "sets" else 10**9)
        return await store.commit_batch(items)


async def test_a_batch_written_row_by_row_or_in_sets_answers_and_stores_the_same(
    stores: dict[str, tuple[SQLStore, Injection]], monkeypatch: pytest.MonkeyPatch
) -> None:
    answers: dict[str, list[list[CommitOutcome]]] = {}
    for form, (store, _) in stores.items():
        answers[form] = [await committed(form, store, items, monkeypatch) for items in batches()]

    assert answers["rows"] == answers["sets"]
    first, again, second, third, fourth = answers["sets"]
    assert first == [Stored(), Stored(), Fenced(), Stored(cancel_requested=True), Stored()]
    assert again == first
    assert [type(outcome) for outcome in second] == [Stored, Refused, Stored, Refused, Stored]
    refused_contradiction, refused_outcome = second[1], second[3]
    assert isinstance(refused_contradiction, Refused) and refused_contradiction.data_error
    assert "already recorded differently" in refused_contradiction.error
    assert isinstance(refused_outcome, Refused) and "no open intent" in refused_outcome.error
    assert third == [Stored(), Stored(), Fenced()]
    [refused_change] = fourth
    assert isinstance(refused_change, Refused) and "no open intent" in refused_change.error

    (rows_store, by_rows), (sets_store, by_sets) = stores["rows"], stores["sets"]
    for run_id in RUNS:
        assert await rows_store.get_run(run_id) == await sets_store.get_run(run_id)
        assert await rows_store.list_steps(run_id) == await sets_store.list_steps(run_id)
    # Each form wrote as it says: the sets only in sets.
    assert by_rows.fired == 0 and by_sets.fired > 0
