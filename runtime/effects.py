"""What a tool does to the world, and how the runtime learns it (G10)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

from leaseward.runtime.errors import ToolDefinitionError

__all__ = ["ToolEffect", "ToolEffectResolver", "declared_effect"]


class ToolEffect(enum.StrEnum):
    READ_ONLY = "read_only"
    IDEMPOTENT_WRITE = "idempotent_write"
    NON_IDEMPOTENT_WRITE = "non_idempotent_write"

    @property
    def is_write(self) -> bool:
        return self is not ToolEffect.READ_ONLY


def declared_effect(tool: Any) -> ToolEffect:
    """The effect a tool's code declares; a tool that declares nothing only reads."""
    effect = getattr(tool, "effect", ToolEffect.READ_ONLY)
    if not isinstance(effect, ToolEffect):
        name = getattr(tool, "name", repr(tool))
        raise ToolDefinitionError(
            f"tool {name!r} declares effect {effect!r}; it must be a ToolEffect member"
        )
    return effect


class ToolEffectResolver:
    """Maps tool names to effects, read from the tools themselves and nothing else."""

    def __init__(self, tools: Iterable[Any]) -> None:
        self._effects: dict[str, ToolEffect] = {}
        for tool in tools:
            self._effects[str(tool.name)] = declared_effect(tool)

    def effect_for(self, name: str) -> ToolEffect:
        # A name nobody can vouch for gets the most careful treatment.
        return self._effects.get(name, ToolEffect.NON_IDEMPOTENT_WRITE)
