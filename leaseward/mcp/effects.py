"""A listed MCP tool's effect, decided by the application's code (G10).

The annotations a server lists are hints, and the MCP specification says a client
must treat them as untrusted unless they come from a trusted server: they decide
an effect only where the code says it trusts that server, and whatever they leave
unset takes the specification's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.tool_sources import DecidedBy

__all__ = ["annotated_effect", "decide_effect", "is_destructive"]

# The specification's defaults for a hint a server leaves unset.
_DEFAULTS = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}


def _hint(annotations: Mapping[str, Any] | None, name: str) -> bool:
    value = None if annotations is None else annotations.get(name)
    return value if isinstance(value, bool) else _DEFAULTS[name]


def annotated_effect(annotations: Mapping[str, Any] | None) -> ToolEffect:
    """The effect annotations describe: read-only reads; otherwise an idempotent hint
    makes an idempotent write; anything else, missing annotations included, is a
    non-idempotent write."""
    if _hint(annotations, "readOnlyHint"):
        return ToolEffect.READ_ONLY
    if _hint(annotations, "idempotentHint"):
        return ToolEffect.IDEMPOTENT_WRITE
    return ToolEffect.NON_IDEMPOTENT_WRITE


def is_destructive(annotations: Mapping[str, Any] | None) -> bool:
    """Whether annotations allow that the tool destroys something (the default for a
    tool that is not read-only)."""
    return not _hint(annotations, "readOnlyHint") and _hint(annotations, "destructiveHint")


def decide_effect(
    name: str,
    annotations: Mapping[str, Any] | None,
    *,
    effects: Mapping[str, ToolEffect],
    trusted: bool,
) -> tuple[ToolEffect, DecidedBy]:
    """The code's own word for ``name`` first; then, from a trusted server only, its
    annotations; else the most careful effect."""
    declared = effects.get(name)
    if declared is not None:
        return declared, DecidedBy.CODE
    if trusted:
        return annotated_effect(annotations), DecidedBy.ANNOTATIONS
    return ToolEffect.NON_IDEMPOTENT_WRITE, DecidedBy.DEFAULT
