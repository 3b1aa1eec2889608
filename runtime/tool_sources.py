"""Tools an agent learns of when a worker starts (from an MCP server), each with the
effect decided for it then and where that decision came from."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.tools import DEFAULT_TOOL_TIMEOUT_SECONDS, ToolContext

__all__ = ["DecidedBy", "ListedTool", "ToolProvenance", "ToolSource"]


@runtime_checkable
class ToolSource(Protocol):
    """Something outside the process that offers an agent tools, listed at worker start.

    The runtime's shell lists it and gives the agent what it found as ListedTools;
    the kernel only keeps it apart from the agent's own tools."""

    @property
    def source_name(self) -> str: ...


class DecidedBy(enum.StrEnum):
    """Which rule gave a listed tool its effect."""

    CODE = "code"
    """The application's code named the tool's effect."""
    ANNOTATIONS = "annotations"
    """The code trusts the server, and its annotations were mapped."""
    DEFAULT = "default"
    """Nothing the code trusts said anything: a non-idempotent write."""


@attrs.frozen
class ToolProvenance:
    """Where a listed tool came from and how its effect was decided, journaled with each call."""

    source: str
    decided_by: DecidedBy
    annotations: Mapping[str, Any] | None = None
    """The annotations the server listed, as it sent them (None: it sent none)."""

    def as_json(self) -> str:
        return dump_json(
            {
                "source": self.source,
                "decided_by": self.decided_by.value,
                "annotations": None if self.annotations is None else dict(self.annotations),
            }
        )


ListedCall = Callable[..., Awaitable[Any]]


@attrs.frozen
class ListedTool:
    """A tool from a ToolSource, its effect fixed when it was listed; called with the
    call's context and its JSON arguments, as any tool."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    effect: ToolEffect
    provenance: ToolProvenance
    call: ListedCall
    timeout_seconds: float = DEFAULT_TOOL_TIMEOUT_SECONDS
    requires_approval: bool = False

    async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any:
        return await self.call(ctx, **arguments)
