"""An MCP tool's effect: the code's word first, a trusted server's annotations next
(unset hints taking the specification's defaults), else a non-idempotent write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from leaseward import ConfigurationError, ToolEffect
from leaseward.mcp import MCPServer, Stdio, annotated_effect, decide_effect, is_destructive
from leaseward.runtime.tool_sources import DecidedBy


@pytest.mark.parametrize(
    ("annotations", "effect"),
    [
        ({"readOnlyHint": True}, ToolEffect.READ_ONLY),
        ({"readOnlyHint": True, "idempotentHint": False}, ToolEffect.READ_ONLY),
        ({"idempotentHint": True}, ToolEffect.IDEMPOTENT_WRITE),
        ({"readOnlyHint": False, "idempotentHint": True}, ToolEffect.IDEMPOTENT_WRITE),
        ({"destructiveHint": False}, ToolEffect.NON_IDEMPOTENT_WRITE),
        ({"openWorldHint": False}, ToolEffect.NON_IDEMPOTENT_WRITE),
        ({}, ToolEffect.NON_IDEMPOTENT_WRITE),
        (None, ToolEffect.NON_IDEMPOTENT_WRITE),
        # Not a boolean: the default, never a guess.
        ({"readOnlyHint": "yes"}, ToolEffect.NON_IDEMPOTENT_WRITE),
    ],
)
def test_annotations_map_to_effects_with_the_specifications_defaults(
    annotations: dict[str, Any] | None, effect: ToolEffect
) -> None:
    assert annotated_effect(annotations) is effect


def test_only_a_trusted_servers_annotations_decide_and_the_code_overrides_both() -> None:
    read = {"readOnlyHint": True}
    code = {"charge": ToolEffect.NON_IDEMPOTENT_WRITE, "ping": ToolEffect.READ_ONLY}
    assert decide_effect("lookup", read, effects=code, trusted=True) == (
        ToolEffect.READ_ONLY,
        DecidedBy.ANNOTATIONS,
    )
    assert decide_effect("lookup", read, effects=code, trusted=False) == (
        ToolEffect.NON_IDEMPOTENT_WRITE,
        DecidedBy.DEFAULT,
    )
    for trusted in (True, False):
        assert decide_effect("charge", read, effects=code, trusted=trusted) == (
            ToolEffect.NON_IDEMPOTENT_WRITE,
            DecidedBy.CODE,
        )
        assert decide_effect("ping", None, effects=code, trusted=trusted) == (
            ToolEffect.READ_ONLY,
            DecidedBy.CODE,
        )


def test_destructive_is_the_default_for_a_tool_that_is_not_read_only() -> None:
    assert is_destructive(None)
    assert is_destructive({"idempotentHint": True})
    assert not is_destructive({"destructiveHint": False})
    assert not is_destructive({"readOnlyHint": True, "destructiveHint": True})


def test_a_servers_declared_effects_must_be_tool_effects() -> None:
    with pytest.raises(ConfigurationError, match="create_invoice"):
        MCPServer.http("billing", "http://127.0.0.1:1/mcp", effects={"create_invoice": "write"})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="timeout_seconds"):
        MCPServer.http("billing", "http://127.0.0.1:1/mcp", timeout_seconds=0)


def test_a_stdio_servers_arguments_are_a_list_not_one_string() -> None:
    """Taken as a sequence, one string ran ``python s e r v e r . p y``, and the start
    failed with "Connection closed"."""
    for made in (
        lambda: MCPServer.stdio("billing", "python", "server.py"),
        lambda: Stdio("python", "server.py"),
    ):
        with pytest.raises(ConfigurationError) as refused:
            made()
        assert refused.value.message == (
            "an MCP server's args must be a list of strings, such as ['server.py'], "
            "not the string 'server.py'"
        )
    with pytest.raises(ConfigurationError, match="args must be a list of strings"):
        MCPServer.stdio("billing", "python", ["server.py", 8080])  # type: ignore[list-item]
    served = MCPServer.stdio("billing", "python", [Path("server.py"), "--port", "8080"])
    assert isinstance(served.transport, Stdio)
    assert served.transport.args == ("server.py", "--port", "8080")
