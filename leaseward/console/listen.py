"""Where the console listens, which names it answers to and who may log in: what the CLI
and the daemon check before serving it, without loading the web stack that serves it."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable

from leaseward.runtime.errors import ConfigurationError

__all__ = [
    "ALLOWED_HOSTS_VARIABLE",
    "CONSOLE_HOST",
    "CONSOLE_PORT",
    "MIN_TOKEN_CHARS",
    "TOKEN_VARIABLE",
    "check_allowed_hosts",
    "check_listen_address",
    "configured_token",
    "console_url",
    "is_loopback",
]

CONSOLE_HOST = "127.0.0.1"
CONSOLE_PORT = 8787
TOKEN_VARIABLE = "LEASEWARD_CONSOLE_TOKEN"
MIN_TOKEN_CHARS = 16
ALLOWED_HOSTS_VARIABLE = "LEASEWARD_CONSOLE_ALLOWED_HOST"

# A DNS name, or *. and one: every name under it.
_HOST_NAME = re.compile(
    r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
)


def configured_token() -> str | None:
    """The operators' login token: from the environment only, so it shows in no process
    list and no ``--help``."""
    return os.environ.get(TOKEN_VARIABLE) or None


def console_url(host: str, port: int) -> str:
    # An IPv6 address may come bracketed already, as --host [::1]: bracketed once.
    bare = host.strip("[]")
    return f"http://[{bare}]:{port}/" if ":" in bare else f"http://{bare}:{port}/"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listen_address(host: str, token: str | None, *, flag: str = "--host") -> None:
    """Refuse to listen beyond this machine without an operator token, or with a short one;
    ``flag`` is how the refusal names the address's setting."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigurationError(
            f"{TOKEN_VARIABLE} must be at least {MIN_TOKEN_CHARS} characters long"
        )
    if not is_loopback(host) and token is None:
        raise ConfigurationError(
            f"{flag} {host} is reachable from other machines: set {TOKEN_VARIABLE} "
            "(the operators' login token) first, or listen on 127.0.0.1"
        )


def check_allowed_hosts(names: Iterable[str], *, flag: str) -> tuple[str, ...]:
    """The names the console answers to beside localhost and IP addresses (each given
    alone or several in one, apart by commas or spaces), lowered: a mistyped one is
    refused before the console serves, not found out when its pages never open."""
    checked: list[str] = []
    for given in names:
        for name in given.replace(",", " ").split():
            lowered = name.lower().rstrip(".")
            if len(lowered) > 253 or not _HOST_NAME.match(lowered):
                raise ConfigurationError(
                    f"{flag} {name!r} is not a host name: give a name such as "
                    "console.example.com, or *.example.com for every name under it"
                )
            checked.append(lowered)
    return tuple(checked)
