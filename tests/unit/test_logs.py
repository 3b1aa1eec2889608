"""leaseward's loggers: standard ``logging`` decides, a disabled call does nothing, and an
emitted event reads well through plain ``logging`` and structlog's ProcessorFormatter."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from leaseward.runtime.logs import LeasewardLogger, LogFormat, get_logger, line_formatter


class Records(logging.Handler):
    """The records of one logger of its own under ``leaseward``, kept from its ancestors."""

    def __init__(self, logger: str) -> None:
        super().__init__()
        self.logger = logger
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def own(request: pytest.FixtureRequest) -> Iterator[Records]:
    handler = Records(f"leaseward.tests.{request.node.name}")
    logger = logging.getLogger(handler.logger)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        logger.propagate = True


@pytest.fixture
def unconfigured_structlog() -> Iterator[None]:
    """structlog as an application that never configured it has it (other tests configure it)."""
    configured = structlog.is_configured()
    config = structlog.get_config()
    structlog.reset_defaults()
    try:
        yield
    finally:
        if configured:
            structlog.configure(**config)
        else:
            structlog.reset_defaults()


def test_a_call_below_the_logging_level_reaches_no_processor(own: Records) -> None:
    logging.getLogger(own.logger).setLevel(logging.WARNING)
    log = get_logger(own.logger).bind(run_id="r-1")
    with structlog.testing.capture_logs() as captured:
        log.debug("lease.renewed", seconds=30.0)
        log.info("step.recorded", seq=1)
        log.log(logging.INFO, "step.recorded", seq=2)
        log.warning("lease.lost")
        log.log(logging.ERROR, "audit.failed")
    assert [(e["event"], e["log_level"]) for e in captured] == [
        ("lease.lost", "warning"),
        ("audit.failed", "error"),
    ]
    assert captured[0]["run_id"] == "r-1"
    assert own.records == [], "capture_logs drops what it captures"


def test_the_level_is_read_at_each_call(own: Records) -> None:
    log = get_logger(own.logger)
    logging.getLogger(own.logger).setLevel(logging.INFO)
    with structlog.testing.capture_logs() as captured:
        log.debug("hidden")
        logging.getLogger(own.logger).setLevel(logging.DEBUG)
        log.debug("shown")
    assert [e["event"] for e in captured] == ["shown"]


def test_bind_keeps_the_logging_logger_and_the_gate(own: Records) -> None:
    bound = get_logger(own.logger).bind(run_id="r-1").bind(tool="charge")
    assert isinstance(bound, LeasewardLogger)
    assert bound.name == own.logger
    logging.getLogger(own.logger).setLevel(logging.ERROR)
    with structlog.testing.capture_logs() as captured:
        bound.warning("step.deferred")
    assert captured == []


def test_a_configured_structlog_chain_renders_leaseward_events(own: Records) -> None:
    logging.getLogger(own.logger).setLevel(logging.INFO)
    with structlog.testing.capture_logs() as captured:
        # The application's chain, here capture_logs': it sees what the level lets out.
        get_logger(own.logger).info("run.claimed", run_id="r-1")
    assert captured == [{"event": "run.claimed", "run_id": "r-1", "log_level": "info"}]


@pytest.mark.usefixtures("unconfigured_structlog")
def test_without_structlog_configuration_the_record_carries_the_event(own: Records) -> None:
    logging.getLogger(own.logger).setLevel(logging.DEBUG)
    log = get_logger(own.logger).bind(run_id="r-1", epoch=2)
    with structlog.contextvars.bound_contextvars(worker_id="w-1"):
        log.info("step.recorded", seq=3, tool="charge")
        log.warning("lease.lost")
    [info, warning] = own.records
    assert (info.name, info.levelno, warning.levelno) == (own.logger, logging.INFO, logging.WARNING)
    assert info.msg == {
        "run_id": "r-1",
        "epoch": 2,
        "seq": 3,
        "tool": "charge",
        "event": "step.recorded",
        "worker_id": "w-1",
    }
    # What a plain logging.Formatter prints.
    assert info.getMessage() == (
        "step.recorded run_id='r-1' epoch=2 seq=3 tool='charge' worker_id='w-1'"
    )
    # The record names the code that logged, whichever method it went through.
    for record in (info, warning):
        assert (record.filename, record.funcName) == (
            "test_logs.py",
            "test_without_structlog_configuration_the_record_carries_the_event",
        )


@pytest.mark.usefixtures("unconfigured_structlog")
def test_an_exception_reaches_plain_formatters_and_processor_formatters(own: Records) -> None:
    log = get_logger(own.logger)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("actor.crashed", actor="persister")
    [record] = own.records
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and record.exc_info[0] is ValueError

    plain = logging.Formatter("%(levelname)s %(name)s %(message)s").format(record)
    assert plain.startswith(f"ERROR {own.logger} actor.crashed actor='persister'\nTraceback")
    assert plain.endswith("ValueError: boom")

    as_json = structlog.stdlib.ProcessorFormatter(
        processors=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.JSONRenderer(),
        ]
    ).format(record)
    line = json.loads(as_json)
    assert {k: line[k] for k in ("event", "actor", "level", "logger")} == {
        "event": "actor.crashed",
        "actor": "persister",
        "level": "error",
        "logger": own.logger,
    }
    assert "ValueError: boom" in line["exception"]
    assert "\n" not in as_json


EVIL = "no_such\x1b[31mRED\x1b]0;PWNED\x07\u202eevil\u009b2J"


def test_a_line_for_a_terminal_escapes_what_a_model_or_tool_wrote(own: Records) -> None:
    log = get_logger(own.logger)
    try:
        raise ValueError(EVIL)
    except ValueError:
        log.exception("step.recorded", tool=EVIL, seq=1)
    [record] = own.records
    line = line_formatter("console").format(record)
    assert not any(c in line for c in ("\x1b", "\x07", "\u202e", "\u009b"))
    assert "no_such\\x1b[31mRED" in line and "\\u202eevil" in line
    # The traceback keeps its line breaks; its message is escaped as any field.
    assert "Traceback" in line and line.count("\n") > 2


@pytest.mark.usefixtures("unconfigured_structlog")
@pytest.mark.parametrize("log_format", ["json", "console"])
def test_a_traceback_is_bounded_whatever_its_exception_says(
    own: Records, log_format: LogFormat
) -> None:
    """An exception's message may hold what a tool or an MCP server wrote, of any length:
    the line's traceback keeps its frames and bounds that text."""
    log = get_logger(own.logger)
    try:
        raise ValueError("x" * 300_000 + "\n" * 5_000 + "the end")
    except ValueError:
        log.exception("tool.raised", tool="evil_write")
    [record] = own.records
    line = line_formatter(log_format).format(record)
    assert len(line) < 20_000
    assert "Traceback" in line and "ValueError: xxx" in line and "the end" in line
