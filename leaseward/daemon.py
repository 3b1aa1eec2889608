"""The daemon: a Runtime serving an App until a signal, with logs, metrics and traces."""

from __future__ import annotations

import functools
import inspect
import logging
import os
import pkgutil
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import attrs
import prometheus_client
import structlog
from anyio.abc import TaskStatus

from leaseward.actors.metrics import Metrics
from leaseward.app import Runtime
from leaseward.console.listen import CONSOLE_HOST, configured_token
from leaseward.otlp import TRACE_FLUSH_SECONDS, TraceExport, export_traces
from leaseward.runtime.agents import App
from leaseward.runtime.errors import ConfigurationError, LeasewardError
from leaseward.runtime.logs import LogFormat, configure_logging, get_logger
from leaseward.storage.url import store_location

__all__ = ["DaemonSettings", "load_app", "serve"]

log = get_logger("leaseward.daemon")

RUN_COUNT_INTERVAL_SECONDS = 5.0


@attrs.frozen
class DaemonSettings:
    store_url: str
    concurrency: int
    lease_seconds: float
    reap_interval_seconds: float
    poll_interval_seconds: float
    worker_id: str
    drain_seconds: float
    metrics_port: int | None
    metrics_host: str
    log_format: str
    log_level: int = logging.INFO
    console_port: int | None = None
    """Serve the operator console beside the worker on this port (off if None)."""
    console_host: str = CONSOLE_HOST
    console_allowed_hosts: tuple[str, ...] = ()
    """The names the console answers to beside localhost and IP addresses."""


def load_app(path: str) -> App:
    """The App named ``module:attribute`` (an App, or a callable that returns one)."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"--app {path!r} is not of the form module:attribute")
    # Like celery and uvicorn: modules of the directory the daemon starts in import.
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        value = pkgutil.resolve_name(path)
    except Exception as exc:
        # resolve_name imports the module, then looks the attribute up: a module that
        # imported is one without the attribute (an import may raise AttributeError too).
        if isinstance(exc, AttributeError) and module_name in sys.modules:
            raise ConfigurationError(
                f"--app {path!r}: module {module_name!r} has no attribute {attribute!r}"
            ) from None
        raise ConfigurationError(
            f"--app {path!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    if callable(value) and not isinstance(value, App):
        try:
            value = value()
        except Exception as exc:
            raise ConfigurationError(
                f"--app {path!r}: calling {attribute} failed: {type(exc).__name__}: {exc}"
            ) from None
        if inspect.iscoroutine(value):
            # Closed, so that Python does not add its own warning about a coroutine
            # never awaited below the one line that says what to do.
            value.close()
            raise ConfigurationError(
                f"--app {path!r}: {attribute} is an async function; name an App, or a "
                "plain function that returns one"
            )
    if not isinstance(value, App):
        raise ConfigurationError(
            f"--app {path!r} is {_with_article(type(value).__name__)}, not a leaseward App"
        )
    return value


def _with_article(noun: str) -> str:
    # By the first letter, which is right for the names of types (an int, an object, a
    # str); a leading u is left out, for it mostly sounds like "you" (a UUID, a Union).
    return f"{'an' if noun[:1].lower() in ('a', 'e', 'i', 'o') else 'a'} {noun}"


def _forced_stop_exit_code(signum: int) -> int:
    """The exit code of a daemon a second signal stopped: the shell's code for a process
    that signal ended (130 for SIGINT, 143 for SIGTERM). A forced stop may have cut
    writes off, so it must not read as a success to whatever supervises the daemon."""
    return 128 + signum


async def _second_signal_stops_at_once(
    signals: AsyncIterator[int],
    runtime: Runtime,
    forced_by: list[int],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    task_status.started()
    async for signum in signals:
        forced_by.append(signum)
        log.warning(
            "daemon.stopping_now",
            signal=signal.Signals(signum).name,
            writes_cut_off=len(runtime.supervisor.writes_in_flight()),
        )
        runtime.stop_now()
        return


def _serve_metrics(metrics: Metrics, host: str, port: int) -> Callable[[], None]:
    try:
        server, _ = prometheus_client.start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
        ) from None
    log.info("metrics.serving", host=host, port=server.server_port)
    return server.shutdown


async def _count_runs(runtime: Runtime, metrics: Metrics) -> None:
    """Keep the runs-by-state gauge current; a failed count keeps the last one."""
    while True:
        try:
            metrics.set_run_counts(await runtime.store.count_runs())
        except LeasewardError as exc:
            log.warning("metrics.count_failed", error=exc.message)
        await anyio.sleep(RUN_COUNT_INTERVAL_SECONDS)


async def serve(settings: DaemonSettings, app: App) -> int:
    """Serve until SIGTERM or SIGINT, then drain; a second signal stops at once.

    Returns the exit code: 0 after a drain, ``_forced_stop_exit_code`` of the second
    signal after a forced stop."""
    fmt: LogFormat = "json" if settings.log_format == "json" else "console"
    configure_logging(fmt, level=settings.log_level)
    structlog.contextvars.bind_contextvars(worker_id=settings.worker_id)
    metrics = Metrics()
    stop_metrics: Callable[[], None] | None = None
    if settings.metrics_port is not None:
        stop_metrics = _serve_metrics(metrics, settings.metrics_host, settings.metrics_port)
    console_socket: socket.socket | None = None
    try:
        if settings.console_port is not None:
            # Bound before the Runtime opens: a port in use then stops the daemon before
            # it has registered, claimed a run or spent an epoch. Imported here, not at
            # the top: a daemon without the console starts without the web stack.
            from leaseward.console.serve import bound_socket

            console_socket = bound_socket(settings.console_host, settings.console_port)
        tracing = export_traces(os.environ)
        try:
            forced_by = await _serve(settings, app, metrics, tracing, console_socket)
        finally:
            if not tracing.shutdown():
                log.warning(
                    "daemon.traces_unflushed",
                    endpoint=tracing.detail,
                    seconds=TRACE_FLUSH_SECONDS,
                )
    finally:
        if console_socket is not None:
            console_socket.close()
        if stop_metrics is not None:
            stop_metrics()
    if forced_by is None:
        log.info("daemon.stopped")
        return 0
    code = _forced_stop_exit_code(forced_by)
    log.warning("daemon.stopped", forced_by=signal.Signals(forced_by).name, exit_code=code)
    return code


async def _serve(
    settings: DaemonSettings,
    app: App,
    metrics: Metrics,
    tracing: TraceExport,
    console_socket: socket.socket | None,
) -> int | None:
    """Serve, then drain; the number of the second signal if one forced the stop."""
    forced_by: list[int] = []
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as watching:
            async with Runtime.open(
                settings.store_url,
                app,
                concurrency=settings.concurrency,
                lease_seconds=settings.lease_seconds,
                reap_interval_seconds=settings.reap_interval_seconds,
                poll_interval_seconds=settings.poll_interval_seconds,
                drain_seconds=settings.drain_seconds,
                worker_id=settings.worker_id,
                metrics=metrics,
                trace_content=tracing.capture_content,
            ) as runtime:
                # The counter and the console read the store, so they end before the
                # Runtime closes the store: a read in flight then would fail on a closed
                # connection. The console stops when draining begins.
                async with anyio.create_task_group() as counting:
                    counting.start_soon(_count_runs, runtime, metrics)
                    if console_socket is not None:
                        from leaseward.console.serve import serve_console

                        await counting.start(
                            functools.partial(
                                serve_console,
                                runtime.client,
                                host=settings.console_host,
                                token=configured_token(),
                                allowed_hosts=settings.console_allowed_hosts,
                                sock=console_socket,
                            )
                        )
                    log.info(
                        "daemon.started",
                        store=store_location(settings.store_url),
                        agents=[agent.name for agent in app.agents],
                        concurrency=settings.concurrency,
                        # Where spans go, or why they go nowhere.
                        tracing="on" if tracing.on else "off",
                        **{"tracing_endpoint" if tracing.on else "tracing_off": tracing.detail},
                    )
                    async for signum in signals:
                        log.info(
                            "daemon.draining",
                            signal=signal.Signals(signum).name,
                            drain_seconds=settings.drain_seconds,
                        )
                        break
                    counting.cancel_scope.cancel()
                await watching.start(_second_signal_stops_at_once, signals, runtime, forced_by)
            # The Runtime has drained; the watcher is not needed.
            watching.cancel_scope.cancel()
    return forced_by[0] if forced_by else None
