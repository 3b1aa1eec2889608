"""What every request of the console shares: the client, the sessions, the templates, and
how a page or a refusal is drawn."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.templating import Jinja2Templates

from leaseward.cli.json_output import json_document
from leaseward.cli.tables import age, shortened, shown, timestamp
from leaseward.client import Client
from leaseward.console.listing import date_input
from leaseward.console.security import Sessions

__all__ = ["Console", "DocumentResponse", "console_of", "login_path", "returnable"]


class DocumentResponse(JSONResponse):
    """A JSON twin of a page: what a model or a tool wrote may hold a lone surrogate,
    which Starlette's own encoding would fail on."""

    def render(self, content: Any) -> bytes:
        return json_document(content, indent=None).encode()


_HEADINGS = {
    400: "Not understood",
    403: "Refused",
    404: "Not found",
    409: "Not done",
    503: "Store unavailable",
}
"""What a refused page is titled, by its status: a missing page is not a refusal."""


CELL_CHARS = 40
"""How much of a name a table's cell shows: an agent's, a tool's or a worker's name is
anyone's text, and a cell as wide as 400 characters of it would squeeze the others."""


def _cut(text: str) -> str:
    return shortened(text, CELL_CHARS)


class Console:
    """What every request of the console shares: the client, the sessions, the templates."""

    def __init__(self, client: Client, *, token: str | None) -> None:
        self.client = client
        self.token = token
        self.sessions = Sessions()
        environment = Environment(
            loader=PackageLoader("leaseward.console", "templates"),
            autoescape=True,
            undefined=StrictUndefined,
        )
        environment.filters["time"] = timestamp
        environment.filters["age"] = age
        environment.filters["cut"] = _cut
        environment.filters["shown"] = shown
        environment.filters["date_input"] = date_input
        self.templates = Jinja2Templates(env=environment)

    def render(
        self, request: Request, template: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        """A page, with the session's CSRF token for its forms and its pending message."""
        session = self.sessions.load(request)
        response = self.templates.TemplateResponse(
            request,
            template,
            {
                **context,
                "csrf": session.csrf,
                "operator": session.operator,
                "flash": session.flash,
                "can_log_in": self.token is not None,
                "login_path": login_path(request),
            },
            status_code=status,
        )
        if session.fresh or session.flash is not None:
            session.flash = None
            self.sessions.save(response, request, session)
        return response

    def refuse(
        self,
        request: Request,
        status: int,
        message: str,
        *,
        kept: Sequence[tuple[str, str]] = (),
    ) -> Response:
        """An action or a page refused: the reason, and nothing changed; ``kept``, what the
        operator wrote in the refused form, by what it was (its label)."""
        if request.url.path.startswith("/api/"):
            return DocumentResponse({"error": message}, status_code=status)
        run_id = request.path_params.get("run_id")
        back = ("/runs", "Back to the runs")
        if request.method == "POST" and run_id is not None and status != 404:
            # An action refused sends the operator back to the run, where every action
            # is and a mistyped reply or a missing note can be written again.
            back = (f"/runs/{quote(run_id, safe='')}", f"Back to run {shown(run_id)}")
        elif request.method == "POST" and request.url.path == "/login":
            back = ("/login", "Back to log in")
        return self.render(
            request,
            "refused.html",
            {
                "message": message,
                "heading": _HEADINGS.get(status, "Refused"),
                "back": back,
                "kept": kept,
            },
            status,
        )


_RETURNABLE = re.compile(r"^/(runs(/[^/?#\\]+)?(\?[^#]*)?|dead-letters|approvals|workers)$")
"""The console's own pages, the only places a login sends the browser back to."""


def returnable(path: Any) -> str | None:
    """``path`` if it is one of the console's pages, else None: never another site."""
    if isinstance(path, str) and len(path) <= 2000 and _RETURNABLE.match(path):
        return path
    return None


def login_path(request: Request) -> str:
    """The login page, sending the browser back to the page it was on after the login."""
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    back = returnable(here) if request.method == "GET" else None
    return "/login" if back is None else f"/login?next={quote(back, safe='')}"


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console
