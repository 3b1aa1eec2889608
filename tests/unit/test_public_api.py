"""The explicit public API of each package and the exception docstrings."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import ModuleType

import pytest

import leaseward
import leaseward.actors
import leaseward.providers
import leaseward.runtime
import leaseward.storage
from leaseward.runtime.errors import LeasewardError

PACKAGES = [
    leaseward,
    leaseward.runtime,
    leaseward.providers,
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


def test_leaseward_providers_exports_the_shipped_adapters() -> None:
    assert {"OpenAIChat", "AnthropicMessages"} <= set(leaseward.providers.__all__)


def _user_facing_names() -> list[str]:
    return [
        *(f"leaseward.{name}" for name in leaseward.__all__ if name != "__version__"),
        *(f"leaseward.providers.{name}" for name in leaseward.providers.__all__),
    ]


@pytest.mark.parametrize("name", _user_facing_names())
def test_every_name_a_user_imports_is_in_the_reference(name: str) -> None:
    reference = "\n".join(
        page.read_text(encoding="utf-8") for page in (ROOT / "docs" / "reference").glob("*.md")
    )
    short = name.rpartition(".")[2]
    assert f"::: {name}\n" in reference or f"`{name}`" in reference or f"`{short}`" in reference


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
