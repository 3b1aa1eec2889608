"""Log output for the daemon and the CLI: structlog as JSON lines or for a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

__all__ = ["LOG_FORMATS", "LogFormat", "configure_logging", "default_log_format"]

LogFormat = Literal["json", "console"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "console")


def default_log_format() -> LogFormat:
    return "console" if sys.stderr.isatty() else "json"


def configure_logging(log_format: LogFormat, *, level: int = logging.INFO) -> None:
    """Send structlog events to stderr; context bound with bind_contextvars joins every line."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
