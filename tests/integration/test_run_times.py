"""A run read through a client comes with the store's clock, which its lease and retry
times compare with, on each dialect (what `show` says about leases rests on it)."""

from __future__ import annotations

import time

import attrs
import pytest

from leaseward import Client, RunState
from leaseward.storage import open_store
from tests.stores import created

pytestmark = pytest.mark.anyio


async def test_a_claimed_run_is_read_with_its_lease_and_the_stores_clock(store_url: str) -> None:
    async with Client.open(created(store_url)) as client:
        run_id = await client.submit("greeter", "hi")
        queued = await client.get(run_id)
        store = await open_store(store_url, must_exist=True)
        try:
            (claimed,) = await store.claim_runs("w-1", 1, 30.0, ["greeter"])
        finally:
            await store.aclose()
        running = await client.get(run_id)

    assert queued.state is RunState.QUEUED and queued.lease_owner is None
    assert queued.read_at is not None and queued.available_at is not None
    assert queued.available_at <= queued.read_at
    assert (running.state, running.lease_owner, running.epoch) == (RunState.RUNNING, "w-1", 1)
    assert running.lease_expires_at == claimed.lease_expires_at
    assert running.read_at is not None and abs(running.read_at - time.time()) < 5
    assert running.lease_expires_at is not None
    assert 25 < running.lease_expires_at - running.read_at <= 30
    # The clock of the read is no part of what the run is.
    assert attrs.evolve(running, read_at=None) == running
