"""The console's ASGI app: its routes, its templates, and how errors are answered."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from leaseward.client import Client
from leaseward.console import actions, pages
from leaseward.console.context import Console, console_of
from leaseward.console.hosts import HostCheck
from leaseward.console.security import SecurityHeaders
from leaseward.runtime.errors import InvalidInput, LeasewardError, RunNotFound, StoreError

__all__ = ["create_app"]


async def _root(request: Request) -> Response:
    return RedirectResponse("/runs", status_code=302)


async def _to_the_run(request: Request) -> Response:
    # After a refused action the address bar holds the action's address: opened again,
    # it shows the run rather than a refusal of the method.
    return RedirectResponse(f"/runs/{quote(request.path_params['run_id'], safe='')}", 303)


async def _not_found(request: Request, exc: Exception) -> Response:
    message = exc.message if isinstance(exc, LeasewardError) else "no such page"
    return console_of(request).refuse(request, 404, message)


async def _bad_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidInput)
    return console_of(request).refuse(request, 400, exc.message)


async def _store_failed(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LeasewardError)
    if isinstance(exc, StoreError) and exc.data_error:
        # The store refused what the request carried (text it cannot hold): the store
        # is well, and the same request would be refused again.
        return console_of(request).refuse(
            request, 400, f"the store cannot hold what the request carries: {exc.message}"
        )
    return console_of(request).refuse(request, 503, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return console_of(request).refuse(request, exc.status_code, exc.detail)


def create_app(
    client: Client, *, token: str | None = None, allowed_hosts: Sequence[str] = ()
) -> Starlette:
    """The console over ``client``'s store; ``token`` is the operators' login token
    (without one, the console only reads); ``allowed_hosts``, the names it answers to
    beside localhost and IP addresses (checked by ``hosts.allowed_hosts``)."""
    routes = [
        Route("/", _root),
        Route("/healthz", pages.healthz),
        Route("/runs", pages.runs),
        Route("/runs/{run_id}", pages.run),
        Route("/dead-letters", pages.dead_letters),
        Route("/approvals", pages.approvals),
        Route("/workers", pages.workers),
        Route("/api/runs", pages.api_runs),
        Route("/api/runs/{run_id}", pages.api_run),
        Route("/api/dead-letters", pages.api_dead_letters),
        Route("/api/approvals", pages.api_approvals),
        Route("/api/workers", pages.api_workers),
        Route("/login", actions.login_form, methods=["GET"]),
        Route("/login", actions.login, methods=["POST"]),
        Route("/logout", actions.logout, methods=["POST"]),
        Route("/runs/{run_id}/{action}", actions.act, methods=["POST"]),
        Route("/runs/{run_id}/{action}", _to_the_run, methods=["GET"]),
        Mount("/static", StaticFiles(packages=[("leaseward.console", "static")]), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders), Middleware(HostCheck, names=allowed_hosts)],
        exception_handlers={
            RunNotFound: _not_found,
            InvalidInput: _bad_request,
            LeasewardError: _store_failed,
            HTTPException: _http_error,
        },
    )
    app.state.console = Console(client, token=token)
    return app
