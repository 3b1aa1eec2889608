"""The CLI's parameter types: numbers in a range, durations, run states and log settings.

Each refuses a bad value in words a person reads without the help at hand ("'zero'
is not a whole number", "'0' must be greater than 0"), whether the value came from
the command line or from its environment variable.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Any

import click

from leaseward.runtime.clock import MAX_DURATION_SECONDS
from leaseward.runtime.lifecycle import Reason, RunState
from leaseward.runtime.logs import LOG_FORMATS, LOG_LEVELS

__all__ = [
    "DEAD_LETTER_REASON",
    "DURATION",
    "FINISHED_STATE",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "NON_NEGATIVE_FLOAT",
    "PORT",
    "POSITIVE_FLOAT",
    "POSITIVE_INT",
    "REASON",
    "RUN_STATE",
    "Duration",
    "FinishedState",
    "WordedFloatRange",
    "WordedIntRange",
]


class WordedIntRange(click.IntRange):
    """Click's integer range, its refusals naming what was expected."""

    def __init__(
        self, noun: str, requirement: str, min: int | None = None, max: int | None = None
    ) -> None:
        super().__init__(min, max)
        self.noun = noun
        self.requirement = requirement

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            try:
                int(value)
            except ValueError:
                self.fail(f"{value!r} is not {self.noun}", param, ctx)
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"{str(value)!r} {self.requirement}", param, ctx)


class WordedFloatRange(click.FloatRange):
    """Click's float range, its refusals naming what was expected; NaN is in no range."""

    def __init__(
        self,
        requirement: str,
        min: float | None = None,
        max: float | None = None,
        *,
        min_open: bool = False,
    ) -> None:
        super().__init__(min, max, min_open=min_open)
        self.requirement = requirement

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            number = float(value)
        except ValueError:
            self.fail(f"{str(value)!r} is not a number", param, ctx)
        if math.isnan(number):
            self.fail(f"{str(value)!r} {self.requirement}", param, ctx)
        try:
            return super().convert(number, param, ctx)
        except click.BadParameter:
            self.fail(f"{str(value)!r} {self.requirement}", param, ctx)


# A count past this is a slip (and past 64 bits no store binds it).
MAX_COUNT = 1_000_000_000
POSITIVE_INT = WordedIntRange(
    "a whole number", f"must be from 1 to {MAX_COUNT:,}", min=1, max=MAX_COUNT
)
PORT = WordedIntRange("a port number", "is not a port number", min=0, max=65535)
# Seconds: a span past a year (infinity included) is a slip, and no clock adds it to a
# time without overflowing somewhere.
POSITIVE_FLOAT = WordedFloatRange(
    f"must be greater than 0 and at most {MAX_DURATION_SECONDS:.0f} (a year)",
    min=0,
    max=MAX_DURATION_SECONDS,
    min_open=True,
)
NON_NEGATIVE_FLOAT = WordedFloatRange(
    f"must be 0 or more and at most {MAX_DURATION_SECONDS:.0f} (a year)",
    min=0,
    max=MAX_DURATION_SECONDS,
)


class _Named(click.ParamType[Any]):
    """One of a fixed set of names, refused with the list of them."""

    def __init__(self, name: str, choices: dict[str, Any], what: str) -> None:
        self.name = name
        self._choices = choices
        self._what = what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self._choices[value]
        except KeyError:
            self.fail(f"{value!r} is not {self._what} ({', '.join(self._choices)})", param, ctx)


RUN_STATE = _Named("state", {s.value: s for s in RunState}, "a run state")
REASON = _Named("reason", {r.value: r for r in Reason}, "a reason")
# A run is dead-lettered for one of these only: any other would list nothing, silently.
DEAD_LETTER_REASON = _Named(
    "reason",
    {
        r.value: r
        for r in (Reason.NOT_RETRYABLE, Reason.RETRIES_EXHAUSTED, Reason.INTERRUPTED_WRITE)
    },
    "a dead letter's reason",
)


class FinishedState(click.ParamType[RunState]):
    """A run state in which a run has finished: only those are purged."""

    name = "state"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> RunState:
        if isinstance(value, RunState):
            return value
        state: RunState = RUN_STATE.convert(value, param, ctx)
        if not state.terminal:
            known = ", ".join(s.value for s in RunState if s.terminal)
            self.fail(
                f"{value!r} is not a finished state: only finished runs are purged ({known})",
                param,
                ctx,
            )
        return state


FINISHED_STATE = FinishedState()


class _LogFormat(click.ParamType[str]):
    name = "format"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if value not in LOG_FORMATS:
            self.fail(f"{value!r} is not one of {', '.join(LOG_FORMATS)}", param, ctx)
        return str(value)


class _LogLevel(click.ParamType[int]):
    """A level's name, case aside, as the logging module's number."""

    name = "level"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return LOG_LEVELS[str(value).lower()]
        except KeyError:
            self.fail(f"{value!r} is not one of {', '.join(LOG_LEVELS)}", param, ctx)


LOG_FORMAT = _LogFormat()
LOG_LEVEL = _LogLevel()

_DURATION = re.compile(r"(\d+)([dhms])")
_DURATION_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


class Duration(click.ParamType[timedelta]):
    """A whole number and a unit (``30d``, ``12h``, ``45m``, ``90s``), longer than zero."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta:
        if isinstance(value, timedelta):
            return value
        match = _DURATION.fullmatch(str(value).strip())
        if match is None:
            self.fail(
                f"{value!r} is not a duration: use a whole number and a unit, "
                "e.g. 30d, 12h, 45m, 90s",
                param,
                ctx,
            )
        try:
            duration = timedelta(**{_DURATION_UNITS[match[2]]: int(match[1])})
        except OverflowError:
            self.fail(f"{value!r} is too long a duration", param, ctx)
        if not duration:
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        return duration


DURATION = Duration()
