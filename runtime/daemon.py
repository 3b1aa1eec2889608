"""The daemon: a Runtime serving an App until a signal, with logs and metrics."""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import attrs
import structlog
from anyio.abc import TaskStatus

from runtime.agents import App
from runtime.app import Runtime
from runtime.errors import ConfigurationError
from runtime.logs import LogFormat, configure_logging

__all__ = ["DaemonSettings", "load_app", "serve"]

log = structlog.get_logger("leaseward.daemon")


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


def load_app(path: str) -> App:
    """The App named ``module:attribute`` (an App, or a callable that returns one)."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"--app {path!r} is not of the form module:attribute")
    # Like celery and uvicorn: modules of the directory the daemon starts in import.
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigurationError(
            f"--app {path!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        value = getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(
            f"--app {path!r}: module {module_name!r} has no attribute {attribute!r}"
        ) from None
    if callable(value) and not isinstance(value, App):
        try:
            value = value()
        except Exception as exc:
            raise ConfigurationError(
                f"--app {path!r}: calling {attribute} failed: {type(exc).__name__}: {exc}"
            ) from None
    if not isinstance(value, App):
        raise ConfigurationError(f"--app {path!r} is a {type(value).__name__}, not a leaseward App")
    return value


async def _second_signal_stops_at_once(
    signals: AsyncIterator[int],
    runtime: Runtime,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    task_status.started()
    async for signum in signals:
        log.warning("daemon.stopping_now", signal=signal.Signals(signum).name)
        runtime.supervisor.stop_now()
        return


async def serve(settings: DaemonSettings, app: App) -> int:
    """Serve until SIGTERM or SIGINT, then drain; a second signal stops at once."""
    fmt: LogFormat = "json" if settings.log_format == "json" else "console"
    configure_logging(fmt)
    structlog.contextvars.bind_contextvars(worker_id=settings.worker_id)
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as tasks:
            async with Runtime.open(
                settings.store_url,
                app,
                concurrency=settings.concurrency,
                lease_seconds=settings.lease_seconds,
                reap_interval_seconds=settings.reap_interval_seconds,
                poll_interval_seconds=settings.poll_interval_seconds,
                drain_seconds=settings.drain_seconds,
                worker_id=settings.worker_id,
            ) as runtime:
                log.info(
                    "daemon.started",
                    store=settings.store_url,
                    agents=[agent.name for agent in app.agents],
                    concurrency=settings.concurrency,
                )
                async for signum in signals:
                    log.info(
                        "daemon.draining",
                        signal=signal.Signals(signum).name,
                        drain_seconds=settings.drain_seconds,
                    )
                    break
                await tasks.start(_second_signal_stops_at_once, signals, runtime)
            # The Runtime has drained; the watcher of a second signal is not needed.
            tasks.cancel_scope.cancel()
    log.info("daemon.stopped")
    return 0
