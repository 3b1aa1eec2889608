"""Where the console listens and who may log in: what the CLI and the daemon check before
serving it, without loading the web stack that serves it."""

from __future__ import annotations

import ipaddress
import os

from leaseward.runtime.errors import ConfigurationError

__all__ = [
    "CONSOLE_HOST",
    "CONSOLE_PORT",
    "MIN_TOKEN_CHARS",
    "TOKEN_VARIABLE",
    "check_listen_address",
    "configured_token",
    "console_url",
    "is_loopback",
]

CONSOLE_HOST = "127.0.0.1"
CONSOLE_PORT = 8787
TOKEN_VARIABLE = "LEASEWARD_CONSOLE_TOKEN"
MIN_TOKEN_CHARS = 16


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
