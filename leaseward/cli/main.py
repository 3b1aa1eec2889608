"""The entry point: run the command group, and turn what went wrong into one line.

Mistakes print ``leaseward: error: ...`` and exit 2; failures print ``leaseward:
...`` and exit 1; neither changes anything. Ctrl-C exits 130, and a reader that
went away (``leaseward runs | head``) is no error of ours.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import click
from click.core import ParameterSource

from leaseward.cli.commands import leaseward
from leaseward.cli.defaults import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE
from leaseward.runtime.encoding import shown
from leaseward.runtime.errors import (
    ConfigurationError,
    InvalidInput,
    LeasewardError,
    UnknownAgent,
)

__all__ = ["entry_point", "main"]

USAGE_ERRORS = (ConfigurationError, InvalidInput, UnknownAgent)


def _single(exc: BaseException) -> BaseException:
    """The one error inside nested exception groups (task groups wrap what they raise)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _usage_message(error: click.UsageError) -> str:
    """click's message, naming the environment variable when its value is the mistake."""
    if isinstance(error, click.BadParameter) and error.ctx is not None and error.param:
        param = error.param
        from_env = (
            param.name is not None
            and error.ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT
        )
        if from_env and isinstance(param.envvar, str):
            raw = os.environ.get(param.envvar, "")
            return f"{param.envvar}={raw!r}: {error.message}"
    return error.format_message()


def _not_text(arguments: Sequence[str]) -> str | None:
    """The first argument that is not UTF-8 text: the bytes Python could not decode
    stand in it as lone surrogates, which no store can hold."""
    for argument in arguments:
        try:
            argument.encode()
        except UnicodeEncodeError:
            text = argument.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            return f"the argument '{shown(text)}' is not UTF-8 text"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    mistake = _not_text(arguments)
    if mistake is not None:
        print(f"leaseward: error: {mistake}", file=sys.stderr)
        return EXIT_USAGE
    try:
        try:
            with leaseward.make_context("leaseward", arguments) as context:
                code: int = leaseward.invoke(context)
                return code
        except BaseExceptionGroup as group:
            raise _single(group) from None
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.UsageError as exc:
        print(f"leaseward: error: {shown(_usage_message(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except USAGE_ERRORS as exc:
        print(f"leaseward: error: {shown(exc.message)}", file=sys.stderr)
        return EXIT_USAGE
    except LeasewardError as exc:
        # A message may carry a call id or a tool's name, which a model wrote.
        print(f"leaseward: {shown(exc.message)}", file=sys.stderr)
        return EXIT_FAILURE
    except (KeyboardInterrupt, click.Abort):
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`leaseward runs | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def entry_point() -> NoReturn:
    sys.exit(main())
