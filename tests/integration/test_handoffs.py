"""While a transaction runs on SQLite's connection thread, that thread waits at most
HANDOFF_SECONDS for the interpreter's lock; the process's own interval comes back after.
(CPython keeps the interval in whole microseconds: it reads back approximately.)"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from leaseward.storage.handoffs import HANDOFF_SECONDS, quick_handoffs
from leaseward.storage.sqlite import SQLiteExecutor, SQLiteOptions


@pytest.fixture
def interval() -> Iterator[float]:
    """The process's switch interval, put back whatever a test does to it."""
    original = sys.getswitchinterval()
    yield original
    sys.setswitchinterval(original)


@pytest.mark.anyio
async def test_a_transaction_on_the_connections_thread_gets_quick_handoffs(
    tmp_path: Path, interval: float
) -> None:
    executor = await SQLiteExecutor.connect(SQLiteOptions(str(tmp_path / "handoffs.db")))
    seen: list[float] = []

    async def work() -> None:
        seen.append(sys.getswitchinterval())
        await executor.execute("CREATE TABLE notes (text TEXT)")

    try:
        await executor.run_transaction(work)
    finally:
        await executor.aclose()
    assert seen == [pytest.approx(HANDOFF_SECONDS)]
    assert sys.getswitchinterval() == pytest.approx(interval)


def test_the_process_interval_comes_back_when_the_last_holder_is_done(interval: float) -> None:
    with ExitStack() as first:
        first.enter_context(quick_handoffs())
        second = ExitStack()
        second.enter_context(quick_handoffs())
        assert sys.getswitchinterval() == pytest.approx(HANDOFF_SECONDS)
    # The first let go before the second: the second still holds it short.
    assert sys.getswitchinterval() == pytest.approx(HANDOFF_SECONDS)
    second.close()
    assert sys.getswitchinterval() == pytest.approx(interval)


def test_a_shorter_interval_of_the_process_is_kept(interval: float) -> None:
    sys.setswitchinterval(HANDOFF_SECONDS / 2)
    with quick_handoffs():
        assert sys.getswitchinterval() == pytest.approx(HANDOFF_SECONDS / 2)
    assert sys.getswitchinterval() == pytest.approx(HANDOFF_SECONDS / 2)


def test_an_interval_of_the_process_survives_many_transactions_to_the_microsecond(
    interval: float,
) -> None:
    # 1,229 µs read back and set again as read truncates to 1,228: the drift to catch.
    sys.setswitchinterval(0.001229)
    own = sys.getswitchinterval()
    for _ in range(1000):
        with quick_handoffs():
            pass
    assert sys.getswitchinterval() == own
