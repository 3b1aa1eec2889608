"""The CLI's parameter types, and which flags an environment variable may set."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
import pytest

from leaseward.cli import EXIT_USAGE, commands
from leaseward.cli.commands import leaseward
from leaseward.cli.main import main
from leaseward.cli.types import (
    DEAD_LETTER_REASON,
    DURATION,
    FINISHED_STATE,
    LOG_FORMAT,
    LOG_LEVEL,
    NON_NEGATIVE_FLOAT,
    PORT,
    POSITIVE_FLOAT,
    POSITIVE_INT,
    RUN_STATE,
)
from leaseward.runtime.lifecycle import Reason, RunState


@pytest.fixture(autouse=True)
def _logging_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator command configures the process's logging: not the test runner's."""
    monkeypatch.setattr(commands, "configure_logging", lambda *_, **__: None)


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [
        (POSITIVE_INT, "3", 3),
        (PORT, "0", 0),
        (PORT, "65535", 65535),
        (POSITIVE_FLOAT, "0.25", 0.25),
        (NON_NEGATIVE_FLOAT, "0", 0.0),
        (DURATION, "30d", timedelta(days=30)),
        (DURATION, " 90s ", timedelta(seconds=90)),
        (RUN_STATE, "queued", RunState.QUEUED),
        (DEAD_LETTER_REASON, "interrupted_write", Reason.INTERRUPTED_WRITE),
        (FINISHED_STATE, "completed", RunState.COMPLETED),
        (LOG_FORMAT, "json", "json"),
        (LOG_LEVEL, "DEBUG", logging.DEBUG),
    ],
)
def test_a_good_value_converts(kind: click.ParamType[Any], text: str, value: object) -> None:
    assert kind.convert(text, None, None) == value


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        (POSITIVE_INT, "ten", "'ten' is not a whole number"),
        (POSITIVE_INT, "0", "'0' must be from 1 to 1,000,000,000"),
        (
            POSITIVE_INT,
            "99999999999999999999",
            "'99999999999999999999' must be from 1 to 1,000,000,000",
        ),
        (PORT, "70000", "'70000' is not a port number"),
        (POSITIVE_FLOAT, "0", "'0' must be greater than 0"),
        (POSITIVE_FLOAT, "nan", "'nan' must be greater than 0"),
        (POSITIVE_FLOAT, "soon", "'soon' is not a number"),
        (NON_NEGATIVE_FLOAT, "-1", "'-1' must be 0 or more"),
        (DURATION, "1.5d", "'1.5d' is not a duration"),
        (DURATION, "0s", "'0s' must be longer than zero"),
        (DURATION, "99999999999999d", "'99999999999999d' is too long a duration"),
        (RUN_STATE, "sleeping", "'sleeping' is not a run state (queued, "),
        (
            DEAD_LETTER_REASON,
            "completed",
            "'completed' is not a dead letter's reason "
            "(not_retryable, retries_exhausted, interrupted_write)",
        ),
        (FINISHED_STATE, "running", "'running' is not a finished state"),
        (LOG_FORMAT, "xml", "'xml' is not one of json, console"),
        (LOG_LEVEL, "loud", "'loud' is not one of debug, info"),
    ],
)
def test_a_bad_value_is_refused_in_words(
    kind: click.ParamType[Any], text: str, message: str
) -> None:
    with pytest.raises(click.BadParameter) as refused:
        kind.convert(text, None, None)
    assert refused.value.message.startswith(message)


def _options() -> list[tuple[str, click.Option]]:
    return [
        (name, param)
        for name, command in leaseward.commands.items()
        for param in command.params
        if isinstance(param, click.Option)
    ]


# Flags that say what one invocation does: no variable left in the environment may set them.
ONE_OFF = {
    "--input", "--idempotency-key", "--wait", "--timeout", "--json", "--state", "--agent",
    "--limit", "--reason", "--call", "--digest", "--step", "--note", "--applied", "--not-applied",
    "--once",
    "--finished-before", "--include-dead-letters", "--forget-keys-older-than", "--dry-run",
}  # fmt: skip


# `leaseward console` is configured as the daemon's console is.
SHARED_VARIABLES = {
    ("console", "--host"): "LEASEWARD_CONSOLE_HOST",
    ("console", "--port"): "LEASEWARD_CONSOLE_PORT",
    ("console", "--allowed-host"): "LEASEWARD_CONSOLE_ALLOWED_HOST",
}


@pytest.mark.parametrize(("command", "option"), _options(), ids=lambda o: getattr(o, "name", o))
def test_each_configuration_flag_declares_its_variable_and_help_shows_it(
    command: str, option: click.Option, capsys: pytest.CaptureFixture[str]
) -> None:
    flag = option.opts[0]
    if flag in ONE_OFF:
        assert option.envvar is None
        return
    variable = SHARED_VARIABLES.get(
        (command, flag), "LEASEWARD_" + flag[2:].upper().replace("-", "_")
    )
    assert option.envvar == variable
    assert main([command, "--help"]) == 0
    assert f"[env var: {variable}" in " ".join(capsys.readouterr().out.split())


def _daemon_flags(*arguments: str) -> dict[str, Any]:
    daemon = leaseward.commands["daemon"]
    with daemon.make_context("daemon", list(arguments)) as context:
        return context.params


def test_a_variable_sets_its_flag_and_the_command_line_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEASEWARD_CONCURRENCY", "3")
    monkeypatch.setenv("LEASEWARD_LOG_LEVEL", "warning")
    assert _daemon_flags()["concurrency"] == 3
    assert _daemon_flags()["log_level"] == logging.WARNING
    assert _daemon_flags("--concurrency", "5")["concurrency"] == 5


def test_a_bad_variable_is_one_usage_error_naming_it_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEASEWARD_LEASE_SECONDS", "0")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["daemon", "--app", "no_such_module:app", "--store", store]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "leaseward: error: LEASEWARD_LEASE_SECONDS='0': '0' must be greater than 0 "
        "and at most 31536000 (a year)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_no_command_is_one_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert capsys.readouterr() == ("", "leaseward: error: Missing command.\n")
