"""An open Runtime raises CPython's first collection threshold, where the process has it
lower, and puts it back on exit; ``tune_collector=False`` leaves the collector alone."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from leaseward import App, Runtime, collector
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
