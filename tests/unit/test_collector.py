"""While any Runtime is open, CPython's first collection threshold is at least
RUNTIME_FIRST_THRESHOLD; it is restored once the last one closes, unless the process
set it itself meanwhile, and a higher one the process chose is never lowered."""

from __future__ import annotations

import gc

import pytest

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
