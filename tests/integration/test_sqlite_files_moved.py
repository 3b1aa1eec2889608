"""A SQLite store whose files are deleted or replaced under a running worker: SQLite goes
on writing through the descriptors it holds, where no other process reads, so a write's
journal would be no record of it. The worker refuses every statement from its next
write transaction on, and the write that met it is not told "stored"."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

from leaseward import Runtime, StoreError, ToolContext, ToolEffect
from tests.integration.support import Calls, app_of, capture_logs, one_call_agent, until

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.05}


async def test_a_deleted_write_ahead_log_fails_the_write_in_flight_closed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    calls = Calls()
    in_call, go_on = anyio.Event(), anyio.Event()

    async def held(ctx: ToolContext) -> None:
        in_call.set()
        await go_on.wait()

    app = app_of(one_call_agent("charge", ToolEffect.NON_IDEMPOTENT_WRITE, calls, body=held))
    with capture_logs() as logs:
        async with Runtime.open(f"sqlite:///{path}", app, **FAST) as rt:
            run_id = await rt.submit("charge", {})
            with anyio.fail_after(10):
                await in_call.wait()
            # The intent is committed; the call is in flight.
            os.remove(f"{path}-wal")
            go_on.set()
            await until(
                lambda: any(entry["event"] == "persister.batch_failed" for entry in logs), 10
            )
            with pytest.raises(StoreError, match="write-ahead log \\(-wal\\) was deleted"):
                await rt.submit("charge", {})
            with pytest.raises(StoreError, match="every statement is refused"):
                await rt.get(run_id)
            rt.stop_now()
    assert len(calls) == 1
    failed = [entry for entry in logs if entry["event"] == "persister.batch_failed"]
    assert "was deleted while this process had it open" in failed[0]["error"]
    [lost] = [entry for entry in logs if entry["event"] == "store.files_lost"]
    assert lost["log_level"] == "error" and lost["store"] == str(path)
    assert not any(
        entry["event"] == "run.settled" and entry.get("transition") == "complete" for entry in logs
    )


async def test_a_database_file_replaced_under_a_worker_refuses_the_next_submit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    calls = Calls()
    app = app_of(one_call_agent("charge", ToolEffect.NON_IDEMPOTENT_WRITE, calls))
    async with Runtime.open(f"sqlite:///{path}", app, **FAST) as rt:
        first = await rt.submit("charge", {})
        assert (await rt.wait(first, timeout=10)).state.value == "completed"
        # A restore from a copy taken now: the same runs, another file.
        copy = tmp_path / "copy.db"
        with closing(sqlite3.connect(path)) as source, closing(sqlite3.connect(copy)) as target:
            source.backup(target)
        os.replace(copy, path)
        with pytest.raises(StoreError, match="database file was replaced by another file"):
            await rt.submit("charge", {})
    assert len(calls) == 1
    # A worker started again on the file now there works on it.
    async with Runtime.open(f"sqlite:///{path}", app, **FAST) as rt:
        again = await rt.submit("charge", {})
        assert (await rt.wait(again, timeout=10)).state.value == "completed"
    assert len(calls) == 2


async def test_a_database_file_removed_under_a_worker_refuses_the_next_submit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    calls = Calls()
    app = app_of(one_call_agent("charge", ToolEffect.NON_IDEMPOTENT_WRITE, calls))
    async with Runtime.open(f"sqlite:///{path}", app, **FAST) as rt:
        os.remove(path)
        with pytest.raises(StoreError, match="database file was removed"):
            await rt.submit("charge", {})
    assert len(calls) == 0
