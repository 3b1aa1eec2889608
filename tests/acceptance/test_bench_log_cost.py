"""bench/log_cost.py says what its columns are and which way is cheaper.

It compares no figure with a time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import log_cost


def test_a_tiny_run_explains_its_columns(capsys: pytest.CaptureFixture[str]) -> None:
    log_cost.main(["--calls", "10", "--repeat", "1"])

    printed = capsys.readouterr().out
    assert "no-op ns = a function that does nothing, given the same arguments" in printed
    assert "Lower is cheaper" in printed
    assert "disabled debug, module logger" in printed
