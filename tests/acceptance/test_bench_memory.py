"""bench/memory.py exits 1 when a measurement's process fails.

It printed the failure's stderr and exited 0, so compare.py, which runs it for
make bench-peers, read a failed measurement as a good one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import memory


def test_a_failed_measurement_makes_the_script_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing(args: Any, runs: int) -> dict[str, Any]:
        return {
            "runs": runs,
            "failed": True,
            "returncode": 1,
            "stderr": "boom",
            "process_seconds": 0.1,
        }

    monkeypatch.setattr(memory, "run_child", failing)
    with pytest.raises(SystemExit) as stopped:
        memory.main(["--runs", "5", "--scale", "0", "--results-dir", str(tmp_path)])

    assert stopped.value.code == "FAILED: the measurement of N=5 (its stderr above)"
    assert "stderr of N=5:\nboom" in capsys.readouterr().out
    assert (tmp_path / "memory-latest.json").exists()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--lease-seconds", "0"], "--chunk must be >= 1, --park-timeout and --lease-seconds > 0"),
        (["--hold-seconds", "-1"], "--hold-seconds must be >= 0"),
    ],
)
def test_a_lease_or_hold_it_cannot_use_is_refused_before_measuring(
    flags: list[str], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def measured(args: Any, runs: int) -> dict[str, Any]:
        raise AssertionError("nothing is measured")

    monkeypatch.setattr(memory, "run_child", measured)
    with pytest.raises(SystemExit) as stopped:
        memory.main(["--quick", *flags, "--results-dir", str(tmp_path)])
    assert stopped.value.code == said
    assert list(tmp_path.iterdir()) == []
