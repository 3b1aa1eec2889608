"""leaseward's loggers, and the log output of the daemon and the CLI.

leaseward is a library first, so its events go to standard ``logging`` loggers
named ``leaseward.*`` (``leaseward.run``, ``leaseward.persister``, ...) and the
application that embeds it decides with ordinary ``logging`` configuration
whether and where they appear. The library configures neither ``logging`` nor
structlog: with no configuration at all it prints nothing below WARNING, and
never anything on stdout. Only the daemon and the CLI, which own their process,
call :func:`configure_logging`.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any, Literal

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from leaseward.runtime.encoding import shown

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "LeasewardLogger",
    "LogFormat",
    "configure_logging",
    "default_log_format",
    "driver_warning_in_one_line",
    "get_logger",
    "line_formatter",
]

LogFormat = Literal["json", "console"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "console")
LOG_LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

# The level of each method name structlog's stdlib BoundLogger hands to _proxy_to_logger.
_METHOD_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
}
# Not printed by a plain formatter: the event leads the line, the traceback follows it.
_NOT_SHOWN = frozenset({"event", "exc_info"})
# The modules between a leaseward log call and structlog's call into logging.
_PLUMBING = ("structlog", __name__)


class _Event(dict[str, Any]):
    """An event dict as a log record's message: structlog's ProcessorFormatter reads
    it as the dict it is, a plain ``logging.Formatter`` prints ``event key=value ...``."""

    def __str__(self) -> str:
        fields = [f"{key}={value!r}" for key, value in self.items() if key not in _NOT_SHOWN]
        return " ".join([str(self.get("event")), *fields])


def _to_record(
    logger: WrappedLogger, method_name: str, event_dict: EventDict
) -> tuple[tuple[_Event], dict[str, Any]]:
    """The arguments of the ``logging`` call: what ``ProcessorFormatter.wrap_for_formatter``
    passes, plus ``exc_info`` for handlers that print the record's traceback themselves,
    and the ``stacklevel`` that makes the record's file, line and function the caller's."""
    kwargs: dict[str, Any] = {
        "extra": {"_logger": logger, "_name": method_name},
        "stacklevel": _frames_to_caller(),
    }
    if event_dict.get("exc_info") is True:
        # Taken now: a handler may format the record once the except block is left.
        event_dict["exc_info"] = sys.exc_info()
    if "exc_info" in event_dict:
        kwargs["exc_info"] = event_dict["exc_info"]
    return (_Event(event_dict),), kwargs


def _frames_to_caller() -> int:
    """``logging``'s stacklevel for the code that logged: structlog calls ``_to_record``
    from beside its ``logging`` call, so the frames from there to that code are those."""
    frame = sys._getframe(2)
    frames = 0
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(_PLUMBING):
        frame = frame.f_back
        frames += 1
    return frames


_OWN_PROCESSORS: tuple[Processor, ...] = (structlog.contextvars.merge_contextvars, _to_record)


class _Processors:
    """The chain an enabled event goes through, chosen at each event.

    An application that configured structlog gets leaseward's events through its
    own chain, so they look like its other events (``structlog.testing.capture_logs``
    works this way too: it configures structlog). Unconfigured structlog has no say:
    its default chain renders for a terminal, so leaseward uses its own then.
    Either way the ``logging`` logger decides whether an event is emitted, and where.
    """

    def __iter__(self) -> Iterator[Processor]:
        if structlog.is_configured():
            return iter(structlog.get_config()["processors"])
        return iter(_OWN_PROCESSORS)


_PROCESSORS = _Processors()


class LeasewardLogger(structlog.stdlib.BoundLogger):
    """A structlog logger over a ``logging`` logger that asks the latter first: a call
    below its effective level returns before any processing or formatting."""

    # Every method ends in _proxy_to_logger, so checking there covers them all. debug
    # and info, off by default and called at every step, also check first thing: going
    # through structlog's method to get there costs several times more than the check.

    def enabled_for(self, method_name: str) -> bool:
        """Whether a call of ``method_name`` would be emitted: a caller that builds an
        event's fields only for it asks first."""
        return self._logger.isEnabledFor(_METHOD_LEVELS[method_name])

    def enabled_check(self, method_name: str) -> Callable[[], bool]:
        """``enabled_for(method_name)`` as a callable of its own, for a caller that asks
        at every step: the logging logger's own check, with nothing between."""
        return functools.partial(self._logger.isEnabledFor, _METHOD_LEVELS[method_name])

    def debug(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if not self._logger.isEnabledFor(logging.DEBUG):
            return None
        return super().debug(event, *args, **kw)

    def info(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if not self._logger.isEnabledFor(logging.INFO):
            return None
        return super().info(event, *args, **kw)

    def _proxy_to_logger(
        self, method_name: str, event: str | None = None, *event_args: str, **event_kw: Any
    ) -> Any:
        if not self._logger.isEnabledFor(_METHOD_LEVELS[method_name]):
            return None
        return super()._proxy_to_logger(method_name, event, *event_args, **event_kw)


def get_logger(name: str) -> LeasewardLogger:
    """The logger of one part of leaseward; ``name`` is its ``logging`` logger's name."""
    return LeasewardLogger(logging.getLogger(name), _PROCESSORS, {})


def _terminal_safe(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Every text of a line bound for a terminal with its control characters escaped: a
    tool's name or a model's words in a field must not drive the terminal. JSON lines
    escape them already; a traceback keeps its line breaks."""
    for key, value in event_dict.items():
        if isinstance(value, str):
            lines = value.split("\n") if key == "exception" else [value]
            event_dict[key] = "\n".join(shown(line) for line in lines)
    return event_dict


# A traceback's frames are short lines; its exception's message is whatever its
# raiser put there: a tool's error, an MCP server's answer, of any length.
_TRACEBACK_LINE_CHARS = 2000
_TRACEBACK_LINES = 200


def _bounded_traceback(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """The traceback of a line with each of its lines bounded, and the lines too many
    for a log left out from the middle: the frames that raised come last."""
    text = event_dict.get("exception")
    if isinstance(text, str):
        lines = [
            line if len(line) <= _TRACEBACK_LINE_CHARS else line[:_TRACEBACK_LINE_CHARS] + "..."
            for line in text.split("\n")
        ]
        if len(lines) > _TRACEBACK_LINES:
            kept = _TRACEBACK_LINES // 2
            left_out = f"... {len(lines) - 2 * kept} lines left out ..."
            lines = [*lines[:kept], left_out, *lines[-kept:]]
        event_dict["exception"] = "\n".join(lines)
    return event_dict


def default_log_format() -> LogFormat:
    return "console" if sys.stderr.isatty() else "json"


_URL_LOGGERS = ("httpx", "httpx2")
"""The HTTP clients of the providers and of the MCP SDK. Each request is an info line
naming its whole URL, whose query or user part may hold a key (an MCP server's URL, a
provider's base URL): never shown, as errors and reprs never show it."""


def driver_warning_in_one_line(record: logging.LogRecord) -> bool:
    """The PostgreSQL driver's pool logs each reconnection it retries during a store
    outage with a traceback of the driver's own frames; the error it ends in is all
    that says anything, and the store's own events already say what failed. The
    console's pool retries so too, so every process that owns its logs drops them."""
    if record.name.startswith("asyncpg") and record.exc_info and record.exc_info[1]:
        error = record.exc_info[1]
        said = " ".join(str(error).split())
        if not said and isinstance(error, TimeoutError):
            # The driver's own connect timeout, which raises one with nothing to say.
            said = "the server did not answer in time"
        cause = f": {said}" if said else ""
        record.msg = f"{record.getMessage()}: {type(error).__name__}{cause}"
        record.args = None
        record.exc_info = None
        record.exc_text = None
    return True


def configure_logging(log_format: LogFormat, *, level: int = logging.INFO) -> None:
    """Make every log record of this process a line on stderr, JSON or for a terminal.

    For the daemon and the CLI: they own their process, so the root logger is
    theirs, and the served app's logs (through ``logging`` or structlog) come out
    beside leaseward's in the same format. Context bound with
    ``structlog.contextvars.bind_contextvars`` joins every line. ``level`` is
    leaseward's; other loggers stay at INFO or above, because DEBUG from the
    libraries underneath (aiosqlite logs every statement) would bury leaseward's,
    and the HTTP clients at WARNING or above.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(line_formatter(log_format, colors=sys.stderr.isatty()))
    handler.addFilter(driver_warning_in_one_line)
    logging.basicConfig(handlers=[handler], level=max(level, logging.INFO), force=True)
    logging.getLogger("leaseward").setLevel(level)
    for client in _URL_LOGGERS:
        logging.getLogger(client).setLevel(max(level, logging.WARNING))
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def line_formatter(log_format: LogFormat, *, colors: bool = False) -> logging.Formatter:
    """How ``configure_logging`` makes a record a line: JSON, or for a terminal."""
    rendering: list[Processor] = (
        [structlog.processors.JSONRenderer()]
        if log_format == "json"
        else [_terminal_safe, structlog.dev.ConsoleRenderer(colors=colors)]
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.contextvars.merge_contextvars],
        processors=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _bounded_traceback,
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *rendering,
        ],
    )
