"""Which names the console answers to: a page on another site that rebinds its own name
to this machine's address must not read the console as if it were the console's own.

A browser sends the name it looked up as the request's Host. An IP address cannot be
rebound, and browsers resolve ``localhost`` themselves, so those are always answered;
any other name only when the operator declared it (a reverse proxy's, a machine's DNS
name). Starlette's TrustedHostMiddleware takes a list of names only: it cannot let every
IP address through, which a console reached by the machine's address needs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from leaseward.console.listen import ALLOWED_HOSTS_VARIABLE
from leaseward.runtime.logs import get_logger

__all__ = ["HostCheck"]

log = get_logger("leaseward.console")


def _hostname(host: str) -> str:
    """The Host header's name, without its port or an IPv6 address's brackets."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostCheck:
    """Answers 400 to a request made to a name the console was not told it has."""

    def __init__(self, app: ASGIApp, names: Iterable[str] = ()) -> None:
        self._app = app
        declared = tuple(names)
        self._names = frozenset(name for name in declared if not name.startswith("*."))
        self._suffixes = tuple(name[1:] for name in declared if name.startswith("*."))

    def answers_to(self, host: str) -> bool:
        name = _hostname(host.strip().lower()).rstrip(".")
        return (
            name in ("localhost", "")
            or name.endswith(".localhost")
            or _is_address(name)
            or name in self._names
            or name.endswith(self._suffixes)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        # A request without a Host header comes from no browser: nothing can rebind it.
        # The health check answers under any name, as a load balancer's probe asks by
        # the service's: it tells whether the store answers, nothing of a run.
        host = Headers(scope=scope).get("host", "")
        if scope["path"] == "/healthz" or self.answers_to(host):
            await self._app(scope, receive, send)
            return
        name = _hostname(host.strip())[:200]
        log.warning("console.host_refused", host=name)
        message = (
            f"this console does not answer to the name {name!r}: it answers to localhost "
            "and IP addresses, and to the names given to --allowed-host (the daemon's "
            f"--console-allowed-host, or {ALLOWED_HOSTS_VARIABLE})"
        )
        response: Response = (
            JSONResponse({"error": message}, status_code=400)
            if scope["path"].startswith("/api/")
            else PlainTextResponse(message + "\n", status_code=400)
        )
        await response(scope, receive, send)
