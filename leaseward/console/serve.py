"""Serving the console with uvicorn: on its own (``leaseward console``) or beside a worker
(``leaseward daemon --console``)."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Generator, Sequence

import anyio
import uvicorn
from anyio.abc import TaskStatus

from leaseward.client import Client
from leaseward.console.app import create_app
from leaseward.console.listen import CONSOLE_HOST, CONSOLE_PORT, check_listen_address, console_url
from leaseward.runtime.errors import ConfigurationError
from leaseward.runtime.logs import get_logger

__all__ = ["bound_socket", "serve_console"]

STOP_SECONDS = 2
"""How long requests in flight get to finish when the console stops."""

log = get_logger("leaseward.console")


class _Server(uvicorn.Server):
    """uvicorn's server, leaving the signals to whoever runs it: the command or the
    daemon decides when the console stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bound_socket(host: str, port: int) -> socket.socket:
    """The listening socket, opened before serving: an address in use is a clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(
            f"cannot serve the console on {host}:{port}: {exc.strerror or exc}"
        ) from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve_console(
    client: Client,
    *,
    host: str = CONSOLE_HOST,
    port: int = CONSOLE_PORT,
    token: str | None = None,
    allowed_hosts: Sequence[str] = (),
    sock: socket.socket | None = None,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the console until cancelled; started, with the port it listens on (``port``
    0 picks a free one), once it listens. ``sock``, from ``bound_socket``, is the one to
    listen on instead, closed when the console stops. ``allowed_hosts`` are the names
    it answers to beside localhost and IP addresses (``listen.check_allowed_hosts``)."""
    check_listen_address(host, token)
    if sock is None:
        sock = bound_socket(host, port)
    config = uvicorn.Config(
        create_app(client, token=token, allowed_hosts=allowed_hosts),
        log_config=None,
        log_level=logging.WARNING,
        access_log=False,
        lifespan="off",
        server_header=False,
        timeout_graceful_shutdown=STOP_SECONDS,
    )
    server = _Server(config)
    stopped = anyio.Event()

    async def run_server() -> None:
        # Shielded: a cancellation asks the server to finish its requests, below.
        try:
            with anyio.CancelScope(shield=True):
                await server.serve([sock])
        finally:
            stopped.set()

    bound_port: int = sock.getsockname()[1]
    # The daemon says only this of its console: whether anyone can act there is as much
    # a part of it as where it listens (leaseward console prints the same).
    log.info("console.serving", url=console_url(host, bound_port), read_only=token is None)
    try:
        async with anyio.create_task_group() as serving:
            serving.start_soon(run_server)
            task_status.started(bound_port)
            try:
                await stopped.wait()
            finally:
                server.should_exit = True
                with anyio.CancelScope(shield=True):
                    await stopped.wait()
    finally:
        sock.close()
