"""Declaring an MCP server as a source of an agent's tools."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import attrs

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.errors import ConfigurationError
from leaseward.runtime.timeouts import checked_timeout
from leaseward.runtime.tools import DEFAULT_TOOL_TIMEOUT_SECONDS

__all__ = ["DEFAULT_CONNECT_TIMEOUT_SECONDS", "MCPServer", "Stdio", "StreamableHTTP"]

DEFAULT_CONNECT_TIMEOUT_SECONDS = 10.0


def _arguments(value: Any) -> tuple[str, ...]:
    """A command's arguments, paths as their text. One string is refused: taken as a
    sequence, it would run the command with each of its characters as an argument."""
    if isinstance(value, str | bytes):
        raise ConfigurationError(
            f"an MCP server's args must be a list of strings, such as [{value!r}], "
            f"not the string {value!r}"
        )
    arguments = tuple(os.fspath(item) if isinstance(item, os.PathLike) else item for item in value)
    wrong = next((item for item in arguments if not isinstance(item, str)), None)
    if wrong is not None:
        raise ConfigurationError(
            f"an MCP server's args must be a list of strings, and {wrong!r} is not one"
        )
    return arguments


def _text_mapping(value: Any, what: str) -> Mapping[str, str] | None:
    """An environment's or headers' names and values, each a string. Neither a value nor
    a name is echoed: they carry API keys."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and isinstance(item, str) for key, item in value.items()
    ):
        raise ConfigurationError(
            f"an MCP server's {what} must be a mapping of strings to strings, "
            f"such as {{'NAME': 'value'}}, not a {type(value).__name__} holding others"
        )
    return dict(value)


def _environment(value: Any) -> Mapping[str, str] | None:
    return _text_mapping(value, "env")


# The characters of an HTTP header's name (RFC 9110's token).
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _headers(value: Any) -> Mapping[str, str] | None:
    headers = _text_mapping(value, "headers")
    for name, item in (headers or {}).items():
        # Refused here: the HTTP client's error at the first request echoes the value,
        # such as a token read from a file with its line break.
        if not name or not _TOKEN.issuperset(name):
            raise ConfigurationError(
                "an MCP server's headers must be HTTP header names, such as 'Authorization' "
                "(the name given is not shown)"
            )
        if not (item.isascii() and item.isprintable()):
            raise ConfigurationError(
                f"an MCP server's header {name!r} holds characters an HTTP header cannot "
                "carry, such as a line break (its value is not shown)"
            )
    return headers


def _command(value: Any) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise ConfigurationError(
            f"an MCP server's command must be a program to run, such as 'python', not {value!r}"
        )
    return value


def _directory(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"an MCP server's cwd must be a directory's path, not {value!r}")
    return value


def _url(value: Any) -> str:
    # Not echoed: a URL may carry a password or a token.
    if not isinstance(value, str):
        why = f"not a value of type {type(value).__name__}"
    else:
        try:
            parts = urlsplit(value)
        except ValueError:
            parts = None
        if parts is None:
            why = "and this one cannot be read"
        elif not parts.scheme:
            why = "and this one has no scheme"
        elif parts.scheme not in ("http", "https"):
            why = f"not {parts.scheme}://"
        elif not parts.netloc:
            why = "and this one names no host"
        else:
            return value
    raise ConfigurationError(
        "an MCP server's url must be an http:// or https:// address, such as "
        f"'http://127.0.0.1:8000/mcp', {why}"
    )


@attrs.frozen
class Stdio:
    """A server the worker starts as a subprocess and talks to over its stdin and stdout."""

    command: str = attrs.field(converter=_command)
    args: tuple[str, ...] = attrs.field(default=(), converter=_arguments)
    # Environments and headers carry API keys: never in a repr, a log or an error.
    env: Mapping[str, str] | None = attrs.field(default=None, repr=False, converter=_environment)
    """Added to the environment the SDK gives the subprocess."""
    cwd: str | None = attrs.field(default=None, converter=_directory)


@attrs.frozen
class StreamableHTTP:
    """A server already running, reached over Streamable HTTP at ``url``."""

    url: str = attrs.field(converter=_url)
    headers: Mapping[str, str] | None = attrs.field(default=None, repr=False, converter=_headers)


def _effects(value: Any) -> Mapping[str, ToolEffect]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            "an MCP server's effects must map tool names to ToolEffect members, such as "
            f"{{'create_invoice': ToolEffect.NON_IDEMPOTENT_WRITE}}, not {value!r}"
        )
    for name, effect in value.items():
        if not isinstance(name, str) or not name:
            # Matched to no tool the server lists, it would leave the tool it meant to the
            # server's annotations.
            raise ConfigurationError(
                f"an MCP server's effects are keyed by the tool's name, a string, not {name!r}"
            )
        if not isinstance(effect, ToolEffect):
            raise ConfigurationError(
                f"MCP tool {name!r}: its effect must be a ToolEffect member, not {effect!r}"
            )
    return dict(value)


@attrs.frozen
class MCPServer:
    """An MCP server whose tools an agent offers the model: put it in ``Agent(tools=[...])``.

    A runtime connects when it starts and lists the server's tools; each gets its
    effect from ``effects`` (by tool name) if the code names one there, else from the
    server's annotations only if ``trusted`` is True, else ``NON_IDEMPOTENT_WRITE``.
    Nothing read at run time (a file, an environment variable, the server) can
    change what the code decided. ``approve_destructive`` makes every call of a
    tool that may be destructive (by the annotations of a trusted server; every
    tool not read-only otherwise) wait for a person's approval.

    A result with ``isError`` is told to the model as a ``ToolError``, except from a
    ``NON_IDEMPOTENT_WRITE``: a handler may fail after its effect, so that call is
    settled as an interrupted write for an operator to resolve, unless
    ``errors_apply_nothing`` says that this server reports errors only for calls that
    changed nothing.
    """

    name: str
    transport: Stdio | StreamableHTTP
    trusted: bool = False
    effects: Mapping[str, ToolEffect] = attrs.field(factory=dict, converter=_effects)
    timeout_seconds: float = DEFAULT_TOOL_TIMEOUT_SECONDS
    """How long one call may take; past it the call is cancelled, on the server too."""
    connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_SECONDS
    approve_destructive: bool = False
    errors_apply_nothing: bool = False
    """The server's ``isError`` results come only from calls that changed nothing (it
    checks before it writes, or undoes what it wrote): a non-idempotent write's error
    result is then told to the model, which may try again, as for a ``ToolError``."""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError("an MCP server's name must be a non-empty string")
        if not isinstance(self.transport, Stdio | StreamableHTTP):
            raise ConfigurationError(
                f"MCP server {self.name!r}: its transport must be a Stdio or a "
                "StreamableHTTP (MCPServer.stdio and MCPServer.http make them)"
            )
        for what in ("trusted", "approve_destructive", "errors_apply_nothing"):
            # A string from a setting ("false") is true: it would hand the server's own
            # hints what only code may decide.
            if not isinstance(getattr(self, what), bool):
                raise ConfigurationError(
                    f"MCP server {self.name!r}: {what} must be True or False, "
                    f"not {getattr(self, what)!r}"
                )
        for what in ("timeout_seconds", "connect_timeout_seconds"):
            checked_timeout(f"MCP server {self.name!r}: {what}", getattr(self, what))

    @classmethod
    def stdio(
        cls,
        name: str,
        command: str | os.PathLike[str],
        args: Sequence[str | os.PathLike[str]] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        trusted: bool = False,
        effects: Mapping[str, ToolEffect] | None = None,
        timeout_seconds: float = DEFAULT_TOOL_TIMEOUT_SECONDS,
        connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        approve_destructive: bool = False,
        errors_apply_nothing: bool = False,
    ) -> MCPServer:
        """A server the worker runs as ``command args...`` and supervises."""
        return cls(
            name,
            Stdio(command, args, env, cwd),
            trusted=trusted,
            effects=effects or {},
            timeout_seconds=timeout_seconds,
            connect_timeout_seconds=connect_timeout_seconds,
            approve_destructive=approve_destructive,
            errors_apply_nothing=errors_apply_nothing,
        )

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        trusted: bool = False,
        effects: Mapping[str, ToolEffect] | None = None,
        timeout_seconds: float = DEFAULT_TOOL_TIMEOUT_SECONDS,
        connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        approve_destructive: bool = False,
        errors_apply_nothing: bool = False,
    ) -> MCPServer:
        """A server at ``url`` (Streamable HTTP)."""
        return cls(
            name,
            StreamableHTTP(url, headers),
            trusted=trusted,
            effects=effects or {},
            timeout_seconds=timeout_seconds,
            connect_timeout_seconds=connect_timeout_seconds,
            approve_destructive=approve_destructive,
            errors_apply_nothing=errors_apply_nothing,
        )

    @property
    def source_name(self) -> str:
        return self.name
