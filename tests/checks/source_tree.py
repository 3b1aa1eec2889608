"""The modules of the source tree, each with the name the wheel gives it.

The layer folders sit at the repository root (``runtime/``, ``storage/``,
``actors/``) and are installed as ``leaseward.runtime``, ``leaseward.storage`` and
``leaseward.actors`` by the package-dir mapping in ``pyproject.toml``. Tools that
map a file to a module by its folder would call ``runtime/journal.py`` ``runtime.journal``;
this reads the mapping itself, so the checks see the one namespace users import.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import attrs

__all__ = [
    "REPOSITORY",
    "SourceModule",
    "package_modules",
    "package_roots",
    "script_modules",
    "test_modules",
]

REPOSITORY = Path(__file__).resolve().parents[2]


@attrs.frozen
class SourceModule:
    name: str
    path: Path

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def package_roots(repository: Path = REPOSITORY) -> dict[str, Path]:
    """Each top folder of the wheel's namespace and the module name it is installed as."""
    settings = tomllib.loads((repository / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = settings["tool"]["setuptools"]
    mapped: dict[str, str] = setuptools.get("package-dir", {})
    top_level = {name for name in setuptools["packages"] if "." not in name}
    roots = {name: repository / name for name in top_level}
    roots.update({name: repository / folder for name, folder in mapped.items()})
    return roots


def _modules_under(name: str, folder: Path) -> Iterator[SourceModule]:
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield SourceModule(".".join([name, *parts]), path)


def package_modules(repository: Path = REPOSITORY) -> list[SourceModule]:
    """Every module the wheel installs, under its installed name."""
    return [
        module
        for name, folder in sorted(package_roots(repository).items())
        for module in _modules_under(name, folder)
    ]


def test_modules(repository: Path = REPOSITORY) -> list[SourceModule]:
    """The test suite, a package imported as ``tests`` from the repository root."""
    return list(_modules_under("tests", repository / "tests"))


def script_modules(folder: str, repository: Path = REPOSITORY) -> list[SourceModule]:
    """Scripts run by path (``python bench/steps.py``): each one imports the modules
    beside it by their bare names, so that is what they are called here."""
    root = repository / folder
    return [
        SourceModule(path.stem, path)
        for path in sorted(root.rglob("*.py"))
        # Hidden folders are tools' own, such as the peers' virtual environment.
        if path.stem != "__init__"
        and not any(part.startswith(".") for part in path.relative_to(root).parts)
    ]
