"""While any Runtime is open, CPython's first collection threshold is at least
RUNTIME_FIRST_THRESHOLD; it is restored once the last one closes, unless the process
set it itself meanwhile, and a higher one the process chose is never lowered. Once the
oldest generation holds FREEZE_AT_OBJECTS, what survives a middle collection is frozen,
and given back when the last one closes."""

from __future__ import annotations

import gc
import weakref

import pytest

from leaseward import collector
from leaseward.collector import RUNTIME_FIRST_THRESHOLD, collector_tuned

pytestmark = pytest.mark.usefixtures("interpreter_collector")


def test_the_threshold_is_raised_inside_and_restored_after() -> None:
    with collector_tuned():
        assert gc.get_threshold() == (RUNTIME_FIRST_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_the_last_of_nested_holders_restores_it() -> None:
    with collector_tuned():
        with collector_tuned():
            assert gc.get_threshold()[0] == RUNTIME_FIRST_THRESHOLD
        assert gc.get_threshold()[0] == RUNTIME_FIRST_THRESHOLD
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_the_process_chose_is_left_alone() -> None:
    gc.set_threshold(50_000, 20, 20)
    with collector_tuned():
        assert gc.get_threshold() == (50_000, 20, 20)
    assert gc.get_threshold() == (50_000, 20, 20)


def test_a_threshold_the_process_changed_meanwhile_is_kept() -> None:
    with collector_tuned():
        gc.set_threshold(2_000, 10, 10)
    assert gc.get_threshold() == (2_000, 10, 10)


def test_it_is_restored_when_the_holder_raises() -> None:
    with pytest.raises(RuntimeError), collector_tuned():
        raise RuntimeError("the runtime failed")
    assert gc.get_threshold() == (700, 10, 10)


class _Held:
    """An object the collector tracks, that a weak reference can watch."""


def _in_oldest(objects: list[_Held]) -> int:
    ids = {id(held) for held in objects}
    return sum(1 for tracked in gc.get_objects(2) if id(tracked) in ids)


def test_what_survives_a_middle_collection_is_frozen_once_the_oldest_are_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(collector, "FREEZE_AT_OBJECTS", 1)
    with collector_tuned():
        parked = [_Held() for _ in range(1000)]
        gc.collect(1)
        assert gc.get_freeze_count() >= len(parked)
        # Frozen, no collection walks them: not in any generation any more.
        gc.collect()
        assert _in_oldest(parked) == 0
    assert gc.get_freeze_count() == 0
    assert _in_oldest(parked) == len(parked)


def test_below_the_mark_nothing_is_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector, "FREEZE_AT_OBJECTS", 10**12)
    with collector_tuned():
        parked = [_Held() for _ in range(1000)]
        gc.collect(1)
        assert gc.get_freeze_count() == 0
        assert _in_oldest(parked) == len(parked)


def test_a_frozen_object_is_still_freed_when_its_last_reference_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(collector, "FREEZE_AT_OBJECTS", 1)
    with collector_tuned():
        held = _Held()
        watch = weakref.ref(held)
        gc.collect(1)
        assert gc.get_freeze_count() > 0
        del held
        assert watch() is None


def test_objects_the_process_froze_itself_stay_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector, "FREEZE_AT_OBJECTS", 1)
    own = [_Held() for _ in range(100)]
    gc.freeze()
    with collector_tuned():
        gc.collect(1)
    assert gc.get_freeze_count() > 0
    assert _in_oldest(own) == 0


def test_the_collector_is_no_longer_watched_once_the_last_holder_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(collector, "FREEZE_AT_OBJECTS", 1)
    watchers = list(gc.callbacks)
    with collector_tuned(), collector_tuned():
        assert len(gc.callbacks) == len(watchers) + 1
    assert gc.callbacks == watchers
    parked = [_Held() for _ in range(100)]
    gc.collect(1)
    assert gc.get_freeze_count() == 0
    assert _in_oldest(parked) == len(parked)
