"""What keeps the console safe while it serves: the operator's session, its CSRF token, the
login token's comparison and the response headers. Which addresses it may listen on
unguarded is checked before it serves (``listen.py``)."""

from __future__ import annotations

import hmac
import secrets
import time
import unicodedata
from typing import Any

import attrs
from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from leaseward.runtime.errors import InvalidInput

__all__ = [
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "SESSION_SECONDS",
    "SecurityHeaders",
    "Session",
    "Sessions",
    "check_operator_name",
    "token_matches",
]

SESSION_COOKIE = "leaseward_console"
SESSION_SECONDS = 12 * 3600
MAX_OPERATOR_CHARS = 100

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every response, errors and static files included."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.decode("latin-1").lower() not in SECURITY_HEADERS
                ]
                headers += [(n.encode(), v.encode()) for n, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self._app(scope, receive, send_with_headers)


@attrs.define
class Session:
    """What the session cookie carries: the CSRF token of the forms drawn for it, the
    operator once logged in, and the message of the last action for the page after it."""

    csrf: str = attrs.field(factory=lambda: secrets.token_urlsafe(32))
    operator: str | None = None
    flash: str | None = None
    fresh: bool = attrs.field(default=True, eq=False)
    """Made for this request: no form was drawn for it yet."""
    began: float = attrs.field(factory=lambda: time.time())
    """When it began (a login begins a new one), on the wall clock: it lasts
    SESSION_SECONDS from then, however often an action signs its cookie anew."""

    def csrf_matches(self, sent: Any) -> bool:
        return (
            not self.fresh
            and isinstance(sent, str)
            and hmac.compare_digest(sent.encode(), self.csrf.encode())
        )


class Sessions:
    """Sessions in a signed cookie; the key is made per process, so a restart logs every
    operator out.

    A logged-out session is remembered as ended until a cookie of it would have expired
    anyway: a copy of the cookie taken before the logout opens nothing after it. Being
    per process like the key, the memory is as wide as the sessions it ends.
    """

    def __init__(self) -> None:
        self._serializer = URLSafeTimedSerializer(secrets.token_bytes(32), salt="console")
        self._ended: dict[str, float] = {}

    def end(self, session: Session) -> None:
        now = time.monotonic()
        self._ended = {csrf: until for csrf, until in self._ended.items() if until > now}
        self._ended[session.csrf] = now + SESSION_SECONDS

    def load(self, request: Request) -> Session:
        cookie = request.cookies.get(SESSION_COOKIE)
        if cookie is None:
            return Session()
        try:
            data = self._serializer.loads(cookie, max_age=SESSION_SECONDS)
        except BadSignature:
            return Session()
        if not isinstance(data, dict) or not isinstance(data.get("csrf"), str):
            return Session()
        if data["csrf"] in self._ended:
            return Session()
        began = data.get("began")
        if not isinstance(began, int | float) or time.time() - began > SESSION_SECONDS:
            return Session()
        operator, flash = data.get("operator"), data.get("flash")
        return Session(
            csrf=data["csrf"],
            operator=operator if isinstance(operator, str) else None,
            flash=flash if isinstance(flash, str) else None,
            fresh=False,
            began=began,
        )

    def save(self, response: Response, request: Request, session: Session) -> None:
        value = self._serializer.dumps(
            {
                "csrf": session.csrf,
                "operator": session.operator,
                "flash": session.flash,
                "began": session.began,
            }
        )
        response.set_cookie(
            SESSION_COOKIE,
            value,
            max_age=max(0, int(session.began + SESSION_SECONDS - time.time())),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )


def token_matches(configured: str | None, sent: Any) -> bool:
    """The login token, compared in constant time; with none configured nobody logs in."""
    if not configured or not isinstance(sent, str):
        return False
    return hmac.compare_digest(sent.encode(), configured.encode())


def check_operator_name(name: Any) -> str:
    """The name recorded with each decision, as the CLI's ``--operator`` records it."""
    text = name.strip() if isinstance(name, str) else ""
    if not text:
        raise InvalidInput("give your name: it is recorded with each decision")
    if len(text) > MAX_OPERATOR_CHARS:
        raise InvalidInput(f"a name of at most {MAX_OPERATOR_CHARS} characters, please")
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in text):
        raise InvalidInput("a name without control characters, please")
    return text
