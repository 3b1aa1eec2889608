"""A settlement the store fails to take once is sent again, not left to the reaper."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from support import Calls, FaultyStore, app_of, capture_logs, events, one_call_agent

from leaseward import RunState, Runtime, ToolEffect
from leaseward.storage import BatchItem, open_store

pytestmark = pytest.mark.anyio

# A reaper so slow that only a retried settlement can finish the run within the test.
SLOW_REAPER: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 60}


def first_settlement() -> Any:
    refused: list[BatchItem] = []

    def fault(item: BatchItem) -> bool:
        if item.settlement is not None and not refused:
            refused.append(item)
            return True
        return False

    return fault


async def test_a_settlement_refused_once_is_sent_again(store_url: str) -> None:
    store = FaultyStore(await open_store(store_url), first_settlement())
    calls = Calls()
    app = app_of(one_call_agent("payer", ToolEffect.NON_IDEMPOTENT_WRITE, calls))
    try:
        with capture_logs() as logs:
            async with Runtime.open(store, app, **SLOW_REAPER) as rt:  # type: ignore[arg-type]
                run_id = await rt.submit("payer", None)
                with anyio.fail_after(10):
                    info = await rt.wait(run_id)
    finally:
        await store.aclose()
    assert len(store.refused) == 1 and store.refused[0].settlement is not None
    assert info.state is RunState.COMPLETED
    assert len(calls) == 1
    assert "run.settle_retried" in events(logs)
    assert "run.settle_failed" not in events(logs)
