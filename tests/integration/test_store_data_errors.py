"""Data a store cannot hold fails its own batch item only, and says so; storing a record
twice is a no-op, on each dialect (G4, G5)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import msgspec
import pytest

from leaseward import ProviderReply, StoreError, ToolCall
from leaseward.runtime.commits import Refused, Stored
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import Event, Reason, RunMode, StepKind, StepStatus
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.storage import BatchItem, SQLStore, open_store
from tests.integration.support import provider_step

pytestmark = pytest.mark.anyio

LONE_SURROGATE = "\ud83d"
ASK = ProviderReply(tool_calls=[ToolCall("charge", {"amount": 5}, "c1")])


@pytest.fixture
async def store(anyio_backend: str, store_url: str) -> AsyncIterator[SQLStore]:
    opened = await open_store(store_url)
    try:
        yield opened
    finally:
        await opened.aclose()


async def claimed(store: SQLStore) -> RunRecord:
    new = NewRun(id=str(uuid.uuid4()), agent="a", mode=RunMode.QUEUED, input_json="null")
    await store.create_run(new)
    (run,) = await store.claim_runs("w1", 1, 5.0, ["a"])
    assert run.id == new.id
    return run


def intent(seq: int) -> StepWrite:
    return StepWrite(
        seq=seq,
        kind=StepKind.TOOL,
        status=StepStatus.STARTED,
        tool="charge",
        call_id="c1",
        effect=ToolEffect.NON_IDEMPOTENT_WRITE,
        idempotency_key="k1",
        arguments_json='{"amount":5}',
    )


def outcome_of(step: StepWrite, output_json: str = '{"charged":5}') -> StepWrite:
    # As a run settles its intent: the intent's row, with its outcome.
    return msgspec.structs.replace(
        step, status=StepStatus.SUCCEEDED, output_json=output_json, settles=True
    )


@pytest.mark.parametrize(
    "text", [LONE_SURROGATE, f"text with a {LONE_SURROGATE} inside"], ids=["alone", "inside"]
)
async def test_text_the_driver_cannot_encode_is_a_data_error(store: SQLStore, text: str) -> None:
    run = await claimed(store)
    step = StepWrite(seq=0, kind=StepKind.PROVIDER, status=StepStatus.SUCCEEDED, output_json=text)

    (outcome,) = await store.commit_batch([BatchItem(run.id, run.epoch, steps=(step,))])

    assert isinstance(outcome, Refused) and outcome.data_error
    assert outcome.error
    assert await store.list_steps(run.id) == []


async def test_a_number_the_driver_cannot_bind_is_a_data_error(store: SQLStore) -> None:
    run = await claimed(store)

    (outcome,) = await store.commit_batch([BatchItem(run.id, 2**70)])

    assert isinstance(outcome, Refused) and outcome.data_error
    assert await store.get_run(run.id) == run


async def test_a_poisoned_item_leaves_the_eight_good_ones_of_its_batch_alone(
    store: SQLStore,
) -> None:
    runs = [await claimed(store) for _ in range(9)]
    writers = runs[:4]
    for run in writers:
        (stored,) = await store.commit_batch(
            [BatchItem(run.id, run.epoch, steps=(provider_step(0, ASK), intent(1)))]
        )
        assert isinstance(stored, Stored)
    poisoned = StepWrite(
        seq=0,
        kind=StepKind.PROVIDER,
        status=StepStatus.SUCCEEDED,
        output_json=f'{{"text":"{LONE_SURROGATE}","tool_calls":[]}}',
    )
    items = [
        # Write outcomes: calls that really happened and must be on record.
        *(BatchItem(run.id, run.epoch, steps=(outcome_of(intent(1)),)) for run in writers[:2]),
        BatchItem(runs[8].id, runs[8].epoch, steps=(poisoned,)),
        *(BatchItem(run.id, run.epoch, steps=(outcome_of(intent(1)),)) for run in writers[2:]),
        *(BatchItem(run.id, run.epoch, steps=(provider_step(0, ASK),)) for run in runs[4:6]),
        *(
            BatchItem(
                run.id,
                run.epoch,
                settlement=Settlement(Event.COMPLETE, Reason.COMPLETED, result_json='"ok"'),
            )
            for run in runs[6:8]
        ),
    ]

    outcomes = await store.commit_batch(items)

    refused = [o for item, o in zip(items, outcomes, strict=True) if item.run_id == runs[8].id]
    good = [o for item, o in zip(items, outcomes, strict=True) if item.run_id != runs[8].id]
    (only,) = refused
    assert isinstance(only, Refused) and only.data_error
    assert all(isinstance(o, Stored) for o in good), good
    assert await store.list_steps(runs[8].id) == []
    for run in writers:
        assert [s.status for s in await store.list_steps(run.id)] == [
            StepStatus.SUCCEEDED,
            StepStatus.SUCCEEDED,
        ]
    for run in runs[4:6]:
        assert [s.seq for s in await store.list_steps(run.id)] == [0]
    for run in runs[6:8]:
        finished = await store.get_run(run.id)
        assert finished is not None and finished.result == "ok"


async def test_storing_the_same_record_twice_is_a_no_op(store: SQLStore) -> None:
    run = await claimed(store)
    item = BatchItem(run.id, run.epoch, steps=(provider_step(0, ASK), intent(1)), lease_seconds=5)
    (first,) = await store.commit_batch([item])
    stored = await store.list_steps(run.id)

    (again,) = await store.commit_batch([item])

    assert isinstance(first, Stored) and isinstance(again, Stored)
    assert await store.list_steps(run.id) == stored


async def test_a_different_record_under_a_stored_seq_is_refused(store: SQLStore) -> None:
    run = await claimed(store)
    (first,) = await store.commit_batch(
        [BatchItem(run.id, run.epoch, steps=(provider_step(0, ASK),))]
    )
    stored = await store.list_steps(run.id)
    other = provider_step(0, ProviderReply(text="something else"))

    (refused,) = await store.commit_batch([BatchItem(run.id, run.epoch, steps=(other,))])

    assert isinstance(first, Stored)
    assert isinstance(refused, Refused) and refused.data_error
    assert "step 0" in (refused.error or "")
    assert await store.list_steps(run.id) == stored


async def test_settling_an_intent_again_with_the_same_outcome_is_a_no_op(
    store: SQLStore,
) -> None:
    run = await claimed(store)
    (stored,) = await store.commit_batch(
        [BatchItem(run.id, run.epoch, steps=(intent(0), outcome_of(intent(0))))]
    )
    journal = await store.list_steps(run.id)

    (again,) = await store.commit_batch(
        [BatchItem(run.id, run.epoch, steps=(outcome_of(intent(0)),))]
    )
    (different,) = await store.commit_batch(
        [BatchItem(run.id, run.epoch, steps=(outcome_of(intent(0), '{"charged":6}'),))]
    )

    assert isinstance(stored, Stored) and isinstance(again, Stored)
    assert isinstance(different, Refused) and different.data_error
    assert await store.list_steps(run.id) == journal


async def test_a_transient_store_fault_is_not_a_data_error() -> None:
    assert StoreError("disk I/O error").data_error is False
    assert StoreError("bad text", data_error=True).data_error is True
