"""The explicit public API of each package, the exception docstrings, and the layering rule."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from types import ModuleType

import pytest

import leaseward
import leaseward.actors
import leaseward.providers
import leaseward.runtime
import leaseward.runtime.providers
import leaseward.storage
from leaseward.runtime.errors import LeasewardError

PACKAGES = [
    leaseward,
    leaseward.runtime,
    leaseward.runtime.providers,
    leaseward.actors,
    leaseward.storage,
]
ROOT = Path(leaseward.runtime.__file__).resolve().parent.parent


@pytest.mark.parametrize("package", PACKAGES, ids=lambda m: m.__name__)
def test_all_names_exist_and_are_unique(package: ModuleType) -> None:
    names = package.__all__
    assert isinstance(names, list | tuple)
    assert names, package.__name__
    assert len(names) == len(set(names))
    missing = [name for name in names if not hasattr(package, name)]
    assert missing == []


def _public_definitions(package: ModuleType) -> set[str]:
    """Public classes and functions in the package namespace that come from the package."""
    found = set()
    for name, value in vars(package).items():
        if name.startswith("_") or not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        if getattr(value, "__module__", "").startswith(f"{package.__name__}."):
            found.add(name)
    return found


@pytest.mark.parametrize("package", PACKAGES, ids=lambda m: m.__name__)
def test_every_public_definition_is_in_all(package: ModuleType) -> None:
    definitions = _public_definitions(package)
    assert definitions, package.__name__
    assert definitions - set(package.__all__) == set()


def test_the_facade_exports_exactly_its_public_namespace() -> None:
    public = {
        name
        for name, value in vars(leaseward).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert set(leaseward.__all__) - {"__version__"} == public


def test_the_facade_exports_the_core_api() -> None:
    required = {
        "tool",
        "Tool",
        "ToolEffect",
        "ToolEffectResolver",
        "ToolContext",
        "ToolError",
        "Agent",
        "App",
        "ScriptedProvider",
        "ProviderRequest",
        "ProviderReply",
        "ToolCall",
        "Runtime",
        "Client",
        "RunInfo",
        "StepInfo",
        "RunState",
        "RunMode",
        "FailureClass",
        "LeasewardError",
        "AuditPersistenceFailed",
        "LeaseLost",
        "UnknownAgent",
        "InvalidInput",
    }
    assert required - set(leaseward.__all__) == set()


def test_leaseward_providers_is_the_runtime_layers_providers() -> None:
    assert leaseward.providers.__all__ == leaseward.runtime.providers.__all__
    assert {"OpenAIChat", "AnthropicMessages"} <= set(leaseward.providers.__all__)
    for name in leaseward.providers.__all__:
        assert getattr(leaseward.providers, name) is getattr(leaseward.runtime.providers, name)


def _exported_exceptions() -> list[type[BaseException]]:
    values = [getattr(leaseward, name) for name in leaseward.__all__]
    return [v for v in values if isinstance(v, type) and issubclass(v, BaseException)]


def test_the_facade_exports_exceptions() -> None:
    names = {cls.__name__ for cls in _exported_exceptions()}
    assert {"LeasewardError", "AuditPersistenceFailed", "LeaseLost", "ToolError"} <= names


@pytest.mark.parametrize("cls", _exported_exceptions(), ids=lambda c: c.__name__)
def test_exported_exceptions_share_one_root_and_document_themselves(
    cls: type[BaseException],
) -> None:
    assert issubclass(cls, LeasewardError)
    doc = cls.__dict__.get("__doc__")
    assert doc is not None
    assert doc.strip()
    try:
        instance = cls()
    except TypeError:
        return
    assert str(instance) == doc.strip()
    assert isinstance(instance, LeasewardError)
    assert instance.message == doc.strip()


def test_an_explicit_message_replaces_the_docstring() -> None:
    assert str(leaseward.LeaseLost("gone")) == "gone"
    assert leaseward.LeaseLost("gone").message == "gone"


# --- layering -----------------------------------------------------------------------------------

KERNEL = [
    "effects",
    "failures",
    "lifecycle",
    "model",
    "tools",
    "agents",
    "conversation",
    "errors",
    "schema",
    "strict",
    "clock",
    "version",
    "logs",
]
FORBIDDEN_PACKAGES = {"anyio", "aiosqlite", "asyncpg", "httpx"}
FORBIDDEN_MODULES = {
    "leaseward.actors",
    "leaseward.storage",
    "leaseward.runtime.app",
    "leaseward.runtime.client",
    "leaseward.runtime.daemon",
    "leaseward.cli",
    "leaseward.runtime.providers",
}


def forbidden_imports(source: str, module: str) -> list[str]:
    """The imports in ``source`` the kernel may not use (TYPE_CHECKING blocks included)."""
    package = module.rpartition(".")[0]
    imported: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            imported.append(target)
            # ``from leaseward.runtime import app`` names a shell module too.
            imported.extend(f"{target}.{alias.name}" for alias in node.names)
    bad = []
    for name in imported:
        top = name.split(".")[0]
        prefixes = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
        # The facade ``leaseward`` itself imports the shell.
        if name == "leaseward" or top in FORBIDDEN_PACKAGES or prefixes & FORBIDDEN_MODULES:
            bad.append(name)
    return sorted(set(bad))


@pytest.mark.parametrize(
    "source",
    [
        "import anyio",
        "import anyio.abc",
        "from aiosqlite import connect",
        "import asyncpg",
        "from leaseward.actors.mailbox import Mailbox",
        "from leaseward.storage import Store",
        "from leaseward.runtime.app import Runtime",
        "from leaseward.runtime import client",
        "from leaseward import Runtime",
        "from . import daemon",
        "from leaseward.cli import main",
        "def f():\n    import leaseward.storage.sqlite\n",
        "if TYPE_CHECKING:\n    from leaseward.actors import Reply\n",
    ],
)
def test_the_layering_check_catches_forbidden_imports(source: str) -> None:
    assert forbidden_imports(source, "leaseward.runtime.model")


@pytest.mark.parametrize(
    "source",
    [
        "import attrs",
        "import structlog",
        "from leaseward.runtime.errors import LeasewardError",
        "from .effects import ToolEffect",
        "from leaseward.runtime import errors",
        "import anyioish",
        "from leaseward.runtime.application_notes import x",
    ],
)
def test_the_layering_check_allows_kernel_imports(source: str) -> None:
    assert forbidden_imports(source, "leaseward.runtime.model") == []


@pytest.mark.parametrize("name", KERNEL)
def test_kernel_modules_import_no_io_layer(name: str) -> None:
    path = ROOT / "runtime" / f"{name}.py"
    assert path.is_file(), path
    assert forbidden_imports(path.read_text(encoding="utf-8"), f"leaseward.runtime.{name}") == []


def test_kernel_module_list_names_real_modules() -> None:
    for name in KERNEL:
        assert importlib.import_module(f"leaseward.runtime.{name}").__file__ is not None


SHELL_ONLY = {
    "leaseward.actors",
    "leaseward.storage",
    "leaseward.runtime.app",
    "leaseward.runtime.client",
    "leaseward.runtime.daemon",
    "leaseward.cli",
}


@pytest.mark.parametrize(
    "path", sorted((ROOT / "runtime" / "providers").glob("*.py")), ids=lambda p: p.name
)
def test_the_providers_use_only_the_kernel(path: Path) -> None:
    """The adapters talk HTTP to models; they neither store nor schedule anything."""
    module = f"leaseward.runtime.providers.{path.stem}"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    leaseward_imports = {name for name in imported if name.startswith("leaseward")}
    assert leaseward_imports, module
    bad = {
        name
        for name in leaseward_imports
        if any(name == shell or name.startswith(f"{shell}.") for shell in SHELL_ONLY)
    }
    assert bad == set(), module
