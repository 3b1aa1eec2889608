"""MkDocs hook: the API reference reads the package as the wheel lays it out.

The layer folders sit at the repository root and are mapped into ``leaseward``
by pyproject's package-dir; griffe (which mkdocstrings reads the docstrings with)
looks for a subpackage inside its parent's folder, and cannot follow the mapping
or an editable install's import hook. So, for the length of the build, a copy of
the sources is arranged as the wheel installs them, and griffe is pointed at it.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.checks.source_tree import package_roots  # noqa: E402 -- needs ROOT on the path

_tree: Path | None = None


# Before mkdocstrings reads its handlers' options in its own on_config.
@event_priority(100)
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    global _tree
    _tree = Path(tempfile.mkdtemp(prefix="leaseward-docs-"))
    # Parents before children: a layer's folder lands inside the copied facade.
    for name, folder in sorted(package_roots(ROOT).items(), key=lambda item: item[0].count(".")):
        shutil.copytree(
            folder,
            _tree.joinpath(*name.split(".")),
            ignore=shutil.ignore_patterns("__pycache__"),
            dirs_exist_ok=True,
        )
    handlers: dict[str, Any] = config["plugins"]["mkdocstrings"].config["handlers"]
    handlers.setdefault("python", {})["paths"] = [str(_tree)]
    return config


def on_shutdown() -> None:
    if _tree is not None:
        shutil.rmtree(_tree, ignore_errors=True)
