"""The layer contract: imports point one way, kernel ← storage ← actors ← shell ← facade.

It reads the real source tree (every module the wheel installs, under its
installed name, ``tests.checks.source_tree``) and every import in it, including
those inside functions and ``TYPE_CHECKING`` blocks. A module may import its own
layer and those below it, never one above. Two rules more: the kernel imports
no I/O library, and the model providers in the shell use only the kernel (they
talk HTTP to a model; they neither store nor schedule anything).

    python -m tests.checks.layers [--graph]
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import attrs

from tests.checks.source_tree import REPOSITORY, SourceModule, package_modules

__all__ = ["LAYERS", "Violation", "layer_of", "main", "violations"]

# Lowest first. The facade is ``leaseward/__init__.py`` (and ``python -m leaseward``);
# every other module under ``leaseward`` not in a lower layer is the shell.
LAYERS = ("kernel", "storage", "actors", "shell", "facade")
_LAYER_PACKAGES = {
    "leaseward.runtime": "kernel",
    "leaseward.storage": "storage",
    "leaseward.actors": "actors",
}
_FACADE = {"leaseward", "leaseward.__main__"}
_IO_LIBRARIES = {"anyio", "aiosqlite", "asyncpg", "httpx", "sniffio"}
_PROVIDERS = "leaseward.providers"


def layer_of(module: str) -> str | None:
    """The layer of a ``leaseward`` module; None for anything outside the namespace."""
    if module in _FACADE:
        return "facade"
    for package, layer in _LAYER_PACKAGES.items():
        if module == package or module.startswith(f"{package}."):
            return layer
    if module.startswith("leaseward."):
        return "shell"
    return None


@attrs.frozen
class Violation:
    path: Path
    line: int
    importer: str
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported}: {self.rule}"


@attrs.frozen
class _Import:
    line: int
    target: str


def _imports(module: SourceModule, known: set[str]) -> Iterator[_Import]:
    tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield _Import(node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                # ``from leaseward import app`` imports the module leaseward.app.
                submodule = f"{target}.{alias.name}"
                yield _Import(node.lineno, submodule if submodule in known else target)


def _rule_broken(importer: str, imported: str) -> str | None:
    top = imported.split(".")[0]
    importer_layer = layer_of(importer)
    imported_layer = layer_of(imported)
    if importer_layer == "kernel" and top in _IO_LIBRARIES:
        return "the kernel does no I/O"
    if importer_layer is None or imported_layer is None:
        return None
    if LAYERS.index(imported_layer) > LAYERS.index(importer_layer):
        return f"the {importer_layer} layer may not import the {imported_layer} layer above it"
    in_providers = importer == _PROVIDERS or importer.startswith(f"{_PROVIDERS}.")
    if in_providers and imported_layer != "kernel" and not imported.startswith(_PROVIDERS):
        return "the model providers use only the kernel"
    return None


def violations(modules: list[SourceModule]) -> list[Violation]:
    known = {module.name for module in modules}
    found = []
    for module in modules:
        for imported in _imports(module, known):
            rule = _rule_broken(module.name, imported.target)
            if rule is not None:
                found.append(
                    Violation(module.path, imported.line, module.name, imported.target, rule)
                )
    return found


def layer_graph(modules: list[SourceModule]) -> Counter[tuple[str, str]]:
    """How many imports go from each layer to each layer (the import graph in words)."""
    known = {module.name for module in modules}
    graph: Counter[tuple[str, str]] = Counter()
    for module in modules:
        importer = layer_of(module.name)
        for imported in _imports(module, known):
            target = layer_of(imported.target)
            if importer is not None and target is not None and target != importer:
                graph[(importer, target)] += 1
    return graph


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    parser.add_argument("--graph", action="store_true", help="print imports between layers")
    arguments = parser.parse_args(argv)
    modules = package_modules(arguments.repository)
    if arguments.graph:
        for (importer, imported), count in sorted(layer_graph(modules).items()):
            print(f"{importer} -> {imported}: {count} imports")
    broken = violations(modules)
    for violation in broken:
        print(violation)
    print(f"layer contract: {len(modules)} modules, {len(broken)} wrong-way imports")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
