"""The model checker: today's protocol keeps every invariant at a small bound, and each
hole a review found, put back, is found with its trace."""

from __future__ import annotations

import attrs
import pytest

from tests.proof.model.bounds import HOLES, SMALL, SMALL_DEPTH
from tests.proof.model.explorer import explore
from tests.proof.model.scenario import Holes


def test_the_protocol_keeps_every_invariant_at_a_small_bound() -> None:
    report = explore(SMALL, depth=SMALL_DEPTH)
    assert report.violation is None, report.describe()
    # The bound was exhausted, not cut short: every run it can make settled or waits.
    assert report.depth < SMALL_DEPTH
    assert report.states > 1000


@pytest.mark.parametrize("hole", sorted(HOLES))
def test_a_hole_put_back_is_found_with_its_trace(
    hole: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, guarantee = HOLES[hole]
    report = explore(scenario, depth=SMALL_DEPTH)
    print(report.describe())
    printed = capsys.readouterr().out
    assert report.violation is not None, f"the checker missed the {hole}"
    assert report.violation.startswith(guarantee), report.violation
    assert f"violation: {report.violation}" in printed
    assert "shortest trace:" in printed
    assert len(report.trace) >= 2
    assert all(f"{number:2d}. [t=" in printed for number in range(1, len(report.trace) + 1))


@pytest.mark.parametrize("hole", sorted(HOLES))
def test_the_same_world_without_the_hole_keeps_every_invariant(hole: str) -> None:
    """The hole, not the faults of its world, is what the checker found."""
    scenario, _ = HOLES[hole]
    report = explore(attrs.evolve(scenario, holes=Holes()), depth=SMALL_DEPTH)
    assert report.violation is None, report.describe()
