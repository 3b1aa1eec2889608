"""Submits with an idempotency key create one run however often they are retried (G11).

Each test runs on both dialects. Racing submits come from separate connections (so
PostgreSQL really runs them at once) and from two processes released together.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

from leaseward import (
    App,
    Client,
    IdempotencyKeyConflict,
    InvalidInput,
    RunMode,
    RunState,
    Runtime,
    ToolContext,
    ToolEffect,
)
from leaseward.runtime.runs import MAX_IDEMPOTENCY_KEY_CHARS
from tests.integration.faults import FaultyExecutor, Statement, faulty_store, query
from tests.integration.support import Calls, one_call_agent
from tests.stores import created

pytestmark = pytest.mark.anyio


@pytest.fixture
def store_url(store_url: str) -> str:
    """The conftest store, created: these tests open a Client first, which creates none."""
    return created(store_url)


ROOT = Path(__file__).resolve().parents[2]
SUBMITTER = Path(__file__).with_name("keyed_submitter.py")
MAIL = {"to": "a@example.com", "subject": "receipt"}
FAST: dict[str, Any] = {"poll_interval_seconds": 0.02, "reap_interval_seconds": 0.05}


async def all_runs(client: Client) -> list[str]:
    return [run.id for run in await client.runs()]


async def test_the_same_key_twice_is_one_run(store_url: str) -> None:
    async with Client.open(store_url) as client:
        first = await client.submit("mailer", MAIL, idempotency_key="order-42")
        # The same object built in another key order is the same request.
        again = await client.submit(
            "mailer", {"subject": "receipt", "to": "a@example.com"}, idempotency_key="order-42"
        )
        assert again == first
        assert await all_runs(client) == [first]
        info = await client.get(first)
        assert (info.state, info.idempotency_key) == (RunState.QUEUED, "order-42")
        # The stored input keeps the caller's order: it is what the agent will see.
        record = await client.store.get_run(first)
        assert record is not None and list(record.input) == ["to", "subject"]

        other = await client.submit("mailer", MAIL, idempotency_key="order-43")
        unkeyed = [await client.submit("mailer", MAIL) for _ in range(2)]
        assert len({first, other, *unkeyed}) == 4
        assert (await client.get(unkeyed[0])).idempotency_key is None


@pytest.mark.parametrize(
    ("agent", "value", "fragment"),
    [
        ("mailer", {**MAIL, "to": "b@example.com"}, "a different input to 'mailer'"),
        ("mailer", None, "a different input to 'mailer'"),
        ("billing", MAIL, "agent 'mailer', not 'billing'"),
    ],
)
async def test_a_key_reused_for_another_agent_or_input_is_refused(
    store_url: str, agent: str, value: Any, fragment: str
) -> None:
    async with Client.open(store_url) as client:
        first = await client.submit("mailer", MAIL, idempotency_key="order-42")
        with pytest.raises(IdempotencyKeyConflict) as caught:
            await client.submit(agent, value, idempotency_key="order-42")
        assert caught.value.message == (
            f"the idempotency key 'order-42' was already used by run {first} for {fragment}"
        )
        assert await all_runs(client) == [first]


@pytest.mark.parametrize(("first", "second"), [(1, 1.0), (1, True), (0, False), ("1", 1)])
async def test_json_values_python_deems_equal_are_different_inputs(
    store_url: str, first: Any, second: Any
) -> None:
    async with Client.open(store_url) as client:
        await client.submit("mailer", first, idempotency_key="k")
        with pytest.raises(IdempotencyKeyConflict):
            await client.submit("mailer", second, idempotency_key="k")


@pytest.mark.parametrize("key", ["", "x" * (MAX_IDEMPOTENCY_KEY_CHARS + 1), 42, b"k"])
async def test_a_key_that_is_not_a_short_non_empty_string_is_invalid_input(
    store_url: str, key: Any
) -> None:
    async with Client.open(store_url) as client:
        with pytest.raises(InvalidInput, match="idempotency key"):
            await client.submit("mailer", MAIL, idempotency_key=key)
        longest = "é" * MAX_IDEMPOTENCY_KEY_CHARS
        run_id = await client.submit("mailer", MAIL, idempotency_key=longest)
        assert await all_runs(client) == [run_id]


async def test_submits_racing_on_one_key_from_many_connections_make_one_run(
    store_url: str,
) -> None:
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client.open(store_url)) for _ in range(8)]
        ids: list[str] = []

        async def submit(client: Client) -> None:
            ids.append(await client.submit("mailer", MAIL, idempotency_key="race"))

        async with anyio.create_task_group() as group:
            for client in clients:
                group.start_soon(submit, client)
        assert len(ids) == 8 and len(set(ids)) == 1
        assert await all_runs(clients[0]) == ids[:1]


def test_submits_racing_on_one_key_from_two_processes_make_one_run(store_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [
        subprocess.Popen(
            [sys.executable, str(SUBMITTER), store_url, "two-processes", "4"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline() == "ready\n", process.communicate(timeout=30)[1]
        outputs = []
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        for process in processes:
            out, err = process.communicate(timeout=60)
            assert process.returncode == 0, err
            outputs.append(out.split())
    finally:
        for process in processes:
            process.kill()
            process.wait()
    ids = {run_id for output in outputs for run_id in output}
    assert [len(output) for output in outputs] == [4, 4] and len(ids) == 1

    async def stored() -> list[str]:
        async with Client.open(store_url) as client:
            return await all_runs(client)

    assert anyio.run(stored) == list(ids)


async def test_the_key_outlives_its_run_and_returns_the_finished_run(store_url: str) -> None:
    calls = Calls()
    app = App([one_call_agent("mailer", ToolEffect.NON_IDEMPOTENT_WRITE, calls)])
    async with Runtime.open(store_url, app, **FAST) as rt:
        run_id = await rt.submit("mailer", MAIL, idempotency_key="order-42")
        assert (await rt.wait(run_id, timeout=10)).state is RunState.COMPLETED
        assert await rt.submit("mailer", MAIL, idempotency_key="order-42") == run_id
        # rt.run with the key of a finished queued run returns it as it is.
        info = await rt.run("mailer", MAIL, idempotency_key="order-42")
        assert (info.id, info.mode, info.state) == (run_id, RunMode.QUEUED, RunState.COMPLETED)
    async with Client.open(store_url) as client:
        assert await client.submit("mailer", MAIL, idempotency_key="order-42") == run_id
        assert await all_runs(client) == [run_id]
    assert len(calls) == 1


async def test_rt_run_with_a_key_twice_runs_the_agent_once(store_url: str) -> None:
    calls = Calls()
    app = App([one_call_agent("mailer", ToolEffect.NON_IDEMPOTENT_WRITE, calls)])
    async with Runtime.open(store_url, app, **FAST) as rt:
        first = await rt.run("mailer", MAIL, idempotency_key="request-7")
        again = await rt.run("mailer", MAIL, idempotency_key="request-7")
        assert again == first
        assert (first.mode, first.state, first.result) == (
            RunMode.INTERACTIVE,
            RunState.COMPLETED,
            "done",
        )
        assert first.idempotency_key == "request-7"
        assert await rt.submit("mailer", MAIL, idempotency_key="request-7") == first.id
        with pytest.raises(IdempotencyKeyConflict):
            await rt.run("mailer", {"to": "b@example.com"}, idempotency_key="request-7")
        assert await all_runs(rt.client) == [first.id]
    assert len(calls) == 1


def join_signal(executor: FaultyExecutor) -> anyio.Event:
    """Set once a submit committed that found a run already holding its key."""
    joined = anyio.Event()

    async def signal(statement: Statement) -> None:
        answered = {row["run_id"] for row in statement.answer or ()}
        if any(key["id"] not in answered for key in statement.rows("keys")):
            assert statement.transaction is not None

            async def committed() -> None:
                joined.set()

            statement.transaction.after_commit(committed)

    executor.inject(query("insert_keys"), after=signal)
    return joined


async def test_rt_run_with_the_key_of_a_run_in_progress_waits_for_it(store_url: str) -> None:
    calls = Calls()
    in_call = anyio.Event()
    release = anyio.Event()

    async def hold(ctx: ToolContext) -> None:
        in_call.set()
        await release.wait()

    app = App([one_call_agent("mailer", ToolEffect.NON_IDEMPOTENT_WRITE, calls, body=hold)])
    store, executor = await faulty_store(store_url)
    joined = join_signal(executor)
    results: list[Any] = []

    async def run() -> None:
        results.append(await rt.run("mailer", MAIL, idempotency_key="request-7"))

    try:
        async with Runtime.open(store, app, **FAST) as rt, anyio.create_task_group() as group:
            group.start_soon(run)
            await in_call.wait()
            group.start_soon(run)
            # The second call found the first one's run while its write was in flight.
            await joined.wait()
            (run_id,) = await all_runs(rt.client)
            assert (await rt.get(run_id)).state is RunState.RUNNING
            release.set()
    finally:
        await store.aclose()
    first, second = results
    assert first == second and first.state is RunState.COMPLETED
    assert len(calls) == 1
