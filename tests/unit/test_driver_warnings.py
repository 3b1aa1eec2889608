"""The one line for a warning of the PostgreSQL driver that carries an error."""

from __future__ import annotations

import logging

import pytest

from leaseward.runtime.logs import driver_warning_in_one_line


def warning_with(error: BaseException, logger: str = "asyncpg.pool") -> logging.LogRecord:
    return logging.LogRecord(
        logger,
        logging.WARNING,
        __file__,
        1,
        "Failed to restore the pool connection floor; retrying: %s",
        ("later",),
        (type(error), error, None),
    )


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            ConnectionRefusedError("[Errno 111] Connect call\n   failed"),
            "retrying: later: ConnectionRefusedError: [Errno 111] Connect call failed",
        ),
        # The driver's connect timeout says nothing of itself: the line says what it was,
        # not "TimeoutError: TimeoutError".
        (TimeoutError(), "retrying: later: TimeoutError: the server did not answer in time"),
        (RuntimeError(), "retrying: later: RuntimeError"),
    ],
)
def test_the_error_is_said_once_without_its_traceback(error: BaseException, line: str) -> None:
    record = warning_with(error)
    assert driver_warning_in_one_line(record)
    assert record.getMessage().endswith(line), record.getMessage()
    assert record.exc_info is None


def test_a_warning_of_another_logger_is_left_as_it_is() -> None:
    record = warning_with(TimeoutError(), logger="leaseward.daemon")
    assert driver_warning_in_one_line(record)
    assert record.exc_info is not None
