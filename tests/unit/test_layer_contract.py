"""The layer contract over the real source tree, and that it fails on a wrong-way import."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.checks import layers
from tests.checks.source_tree import REPOSITORY, package_modules


def test_the_real_source_tree_keeps_the_contract() -> None:
    assert [str(violation) for violation in layers.violations(package_modules())] == []


def test_every_installed_module_is_seen_under_its_installed_name() -> None:
    names = {module.name for module in package_modules()}
    assert {
        "leaseward",
        "leaseward.app",
        "leaseward.cli.commands",
        "leaseward.providers.openai",
        "leaseward.runtime.machine",
        "leaseward.storage.journal",
        "leaseward.actors.run_actor",
    } <= names
    assert not any(name.startswith(("runtime.", "storage.", "actors.")) for name in names)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the package's source folders and the mapping that names them."""
    shutil.copy(REPOSITORY / "pyproject.toml", tmp_path)
    for folder in ("leaseward", "runtime", "storage", "actors"):
        shutil.copytree(
            REPOSITORY / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    return tmp_path


def _add_line(path: Path, line: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")


def test_the_copy_passes_before_it_is_changed(tree: Path) -> None:
    assert layers.main(["--repository", str(tree)]) == 0


@pytest.mark.parametrize(
    ("file", "line", "rule"),
    [
        ("runtime/journal.py", "from leaseward.storage import Store", "storage layer above"),
        ("runtime/lifecycle.py", "import anyio", "the kernel does no I/O"),
        ("runtime/effects.py", "from leaseward import Runtime", "facade layer above"),
        ("storage/journal.py", "from leaseward.actors import mailbox", "actors layer above"),
        ("storage/rows.py", "from ..actors.messages import Reply", "actors layer above"),
        ("actors/persister.py", "from leaseward.client import Client", "shell layer above"),
        ("actors/reaper.py", "from leaseward import app", "shell layer above"),
        ("leaseward/cli/tables.py", "from leaseward import Runtime", "facade layer above"),
        (
            "leaseward/providers/openai.py",
            "from leaseward.storage import open_store",
            "providers use only the kernel",
        ),
        (
            "runtime/tools.py",
            "def later():\n    import leaseward.daemon",
            "shell layer above",
        ),
        (
            "runtime/agents.py",
            "if TYPE_CHECKING:\n    from leaseward.actors.messages import Reply",
            "actors layer above",
        ),
    ],
)
def test_a_wrong_way_import_fails_the_contract(
    tree: Path, file: str, line: str, rule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _add_line(tree / file, line)
    assert layers.main(["--repository", str(tree)]) == 1
    report = capsys.readouterr().out
    assert f"{tree / file}:" in report
    assert rule in report
    assert "1 wrong-way imports" in report


@pytest.mark.parametrize(
    ("file", "line"),
    [
        ("storage/journal.py", "from leaseward.runtime.effects import ToolEffect"),
        ("actors/persister.py", "from leaseward.storage import Store"),
        ("leaseward/daemon.py", "from leaseward.actors import mailbox"),
        ("runtime/journal.py", "import attrs"),
        ("leaseward/providers/openai.py", "from leaseward.runtime.errors import LeasewardError"),
    ],
)
def test_a_downward_import_keeps_the_contract(tree: Path, file: str, line: str) -> None:
    _add_line(tree / file, line)
    assert layers.main(["--repository", str(tree)]) == 0
