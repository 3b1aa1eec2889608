"""An open Runtime raises CPython's first collection threshold, where the process has it
lower, and puts it back on exit; once the collector's oldest objects are many it freezes
them, and runs frozen while parked are still freed when they end; ``tune_collector=False``
leaves the collector alone."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import anyio
import pytest

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    RunState,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    collector,
    tool,
)
from leaseward.collector import RUNTIME_FIRST_THRESHOLD

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("interpreter_collector")]


async def test_an_open_runtime_raises_the_first_threshold_and_restores_it(
    tmp_path: Path,
) -> None:
    async with Runtime.open(f"sqlite:///{tmp_path / 'runs.db'}", App([])):
        assert gc.get_threshold() == (RUNTIME_FIRST_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


async def test_a_runtime_told_not_to_leaves_the_collector_alone(tmp_path: Path) -> None:
    async with Runtime.open(f"sqlite:///{tmp_path / 'runs.db'}", App([]), tune_collector=False):
        assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


async def test_an_open_runtime_freezes_long_lived_objects_once_they_are_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collector, "FREEZE_AT_OBJECTS", 1)
    async with Runtime.open(f"sqlite:///{tmp_path / 'runs.db'}", App([])):
        gc.collect(1)
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


async def test_a_runtime_told_not_to_freezes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collector, "FREEZE_AT_OBJECTS", 1)
    async with Runtime.open(f"sqlite:///{tmp_path / 'runs.db'}", App([]), tune_collector=False):
        gc.collect(1)
        assert gc.get_freeze_count() == 0


class _InTheCall:
    """An object that lives in a parked call's frame, as long as the run holds the call."""


async def test_runs_frozen_while_parked_are_freed_when_they_end_without_the_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collector, "FREEZE_AT_OBJECTS", 1)
    runs = 50
    all_parked, released = anyio.Event(), anyio.Event()
    watched: list[weakref.ref[_InTheCall]] = []

    @tool
    async def park(ctx: ToolContext) -> str:
        in_the_call = _InTheCall()
        watched.append(weakref.ref(in_the_call))
        if len(watched) == runs:
            all_parked.set()
        await released.wait()
        return "woke" if in_the_call else ""

    def script(request: ProviderRequest) -> ProviderReply:
        if any(message.role is Role.TOOL for message in request.messages):
            return ProviderReply(text="done")
        return ProviderReply(tool_calls=(ToolCall(park.name, {}, "park-0"),))

    app = App([Agent("parker", ScriptedProvider(script), tools=[park], max_steps=2)])
    async with Runtime.open(f"sqlite:///{tmp_path / 'runs.db'}", app, concurrency=runs) as rt:
        run_ids = await rt.submit_many("parker", [{"n": n} for n in range(runs)])
        with anyio.fail_after(30):
            await all_parked.wait()
        gc.collect(1)
        parked = {id(reference()) for reference in watched}
        assert len(parked) == runs and id(None) not in parked
        assert not any(id(tracked) in parked for tracked in gc.get_objects()), "not frozen"
        del parked
        gc.disable()
        try:
            released.set()
            infos = await rt.wait_all(run_ids, timeout=30)
            assert {info.state for info in infos} == {RunState.COMPLETED}
            # Freed by their reference counts alone: the collector is off, and they are
            # frozen, which no collection would walk anyway.
            assert [reference for reference in watched if reference() is not None] == []
        finally:
            gc.enable()
