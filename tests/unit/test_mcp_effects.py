"""An MCP tool's effect: the code's word first, a trusted server's annotations next
(unset hints taking the specification's defaults), else a non-idempotent write."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leaseward import ConfigurationError, ToolEffect
from leaseward.mcp import MCPServer, Stdio, annotated_effect, decide_effect, is_destructive
from leaseward.runtime.tool_sources import DecidedBy

URL = "http://127.0.0.1:1/mcp"
# What a program gets wrong past its type checker (values read from settings).
LOOSE: Any = MCPServer


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


@pytest.mark.parametrize(
    ("declare", "fragment"),
    [
        # A setting read as text is true: the server's own hints would decide effects.
        (lambda: LOOSE.http("s", URL, trusted="false"), "trusted must be True or False"),
        (
            lambda: LOOSE.http("s", URL, errors_apply_nothing="no"),
            "errors_apply_nothing must be True or False",
        ),
        (
            lambda: LOOSE.stdio("s", "python", approve_destructive=1),
            "approve_destructive must be True or False",
        ),
        (lambda: LOOSE.http("s", URL, effects=["x"]), "effects must map tool names"),
        # The tool's function, given for its name: matched to no tool the server lists.
        (
            lambda: LOOSE.http("s", URL, effects={len: ToolEffect.READ_ONLY}),
            "effects are keyed by the tool's name, a string, not <built-in function len>",
        ),
        (
            lambda: LOOSE.http("s", URL, effects={"": ToolEffect.READ_ONLY}),
            "effects are keyed by the tool's name, a string, not ''",
        ),
        (lambda: LOOSE.stdio("s", None), "command must be a program to run"),
        (lambda: LOOSE.stdio("s", "python", env=["A=1"]), "env must be a mapping"),
        (lambda: LOOSE.stdio("s", "python", env={"A": 1}), "env must be a mapping"),
        (lambda: LOOSE.stdio("s", "python", cwd=3), "cwd must be a directory"),
        (lambda: LOOSE.http("s", "not a url"), "has no scheme"),
        (lambda: LOOSE.http("s", "ftp://u:secret@x/y"), "not ftp://"),
        (lambda: LOOSE.http("s", "http:///mcp"), "names no host"),
        (lambda: LOOSE.http("s", URL, headers=[("a", "b")]), "headers must be a mapping"),
        # A token read from a file keeps its line break; the HTTP client's error echoed it.
        (
            lambda: LOOSE.http("s", URL, headers={"Authorization": "Bearer secret\n"}),
            "header 'Authorization' holds characters an HTTP header cannot carry",
        ),
        (
            lambda: LOOSE.http("s", URL, headers={"X-Key": "secr\u00e9t"}),
            "header 'X-Key' holds characters an HTTP header cannot carry",
        ),
        (
            lambda: LOOSE.http("s", URL, headers={"secret: x": "y"}),
            "headers must be HTTP header names",
        ),
        (lambda: LOOSE("s", "python"), "transport must be a Stdio"),
    ],
)
def test_a_server_declared_with_a_value_of_the_wrong_kind_is_refused_at_once(
    declare: Callable[[], object], fragment: str
) -> None:
    with pytest.raises(ConfigurationError, match=fragment) as refused:
        declare()
    assert "secret" not in refused.value.message


def test_a_servers_paths_may_be_path_objects() -> None:
    served = MCPServer.stdio("s", Path("/usr/bin/python3"), cwd=Path("/tmp"))
    assert isinstance(served.transport, Stdio)
    assert (served.transport.command, served.transport.cwd) == ("/usr/bin/python3", "/tmp")
