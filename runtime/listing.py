"""A page of runs: which runs it lists, and where it ends, so that the next page
starts exactly after it."""

from __future__ import annotations

import base64
import binascii
import enum
import math
import re
import struct
from typing import Any, TypeVar

import attrs

from leaseward.runtime.encoding import holdable
from leaseward.runtime.errors import InvalidInput
from leaseward.runtime.lifecycle import Reason, RunMode, RunState
from leaseward.runtime.runs import RunInfo

__all__ = [
    "EARLIEST_MOMENT",
    "LATEST_MOMENT",
    "MAX_COUNT",
    "MAX_CURSOR_CHARS",
    "RunCursor",
    "RunListing",
    "check_count",
    "check_limit",
    "member_of",
]

# A token carries a run id, which a store caps nowhere; this bound only keeps a pasted
# or forged query string from being decoded at any length.
MAX_CURSOR_CHARS = 1024

# The times a filter may name, in seconds since the epoch: 0001-01-01 to 9999-12-31
# UTC, what a calendar, a date input and Python's datetime can show.
EARLIEST_MOMENT = -62_135_596_800.0
LATEST_MOMENT = 253_402_300_799.0

_CREATED_AT = struct.Struct(">d")
_URL_SAFE = re.compile(r"[A-Za-z0-9_-]+")


def _finite(owner: Any, attribute: attrs.Attribute[float], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"a cursor's {attribute.name} must be a finite number, not {value!r}")


def _run_id(owner: Any, attribute: attrs.Attribute[str], value: Any) -> None:
    # No store holds a NUL or a lone surrogate: such an id names no stored run.
    if not isinstance(value, str) or not value or not holdable(value):
        raise InvalidInput(f"a cursor's run id must be a non-empty string, not {value!r}")


@attrs.frozen
class RunCursor:
    """The last run of a page of runs listed newest first (by ``created_at``, then ``id``).

    The next page holds the runs strictly after it in that order: runs created while an
    operator pages neither shift the pages nor repeat a run, and runs created at the
    same instant are told apart by their ids.
    """

    created_at: float = attrs.field(validator=_finite)
    id: str = attrs.field(validator=_run_id)

    @classmethod
    def of(cls, run: RunInfo) -> RunCursor:
        """The cursor after ``run``, the last run of a page."""
        return cls(created_at=run.created_at, id=run.id)

    def token(self) -> str:
        """The cursor as URL-safe text (no padding), which ``parse`` reads back exactly."""
        packed = _CREATED_AT.pack(self.created_at) + self.id.encode()
        return base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")

    @classmethod
    def parse(cls, text: str) -> RunCursor:
        """The cursor that ``token`` wrote as ``text``; raises InvalidInput for anything else."""
        if not isinstance(text, str) or len(text) > MAX_CURSOR_CHARS:
            raise InvalidInput("not a cursor of a page of runs")
        if not _URL_SAFE.fullmatch(text):
            raise InvalidInput("not a cursor of a page of runs")
        try:
            packed = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            (created_at,) = _CREATED_AT.unpack_from(packed)
            run_id = packed[_CREATED_AT.size :].decode()
            cursor = cls(created_at=created_at, id=run_id)
        except (binascii.Error, struct.error, UnicodeDecodeError, InvalidInput):
            raise InvalidInput("not a cursor of a page of runs") from None
        # Base64 has several spellings of some byte strings; only the one token writes is
        # this cursor's, so two different texts never name the same page.
        if cursor.token() != text:
            raise InvalidInput("not a cursor of a page of runs")
        return cursor


E = TypeVar("E", bound=enum.StrEnum)


def member_of(kind: type[E], name: str, value: Any) -> E | None:
    """``value`` as a member of ``kind``: a member, its value (they compare equal), or
    None; InvalidInput, naming the choices, for anything else."""
    if value is None or isinstance(value, kind):
        return value
    if isinstance(value, str) and value in kind._value2member_map_:
        return kind(value)
    choices = ", ".join(member.value for member in kind)
    raise InvalidInput(f"{name} must be a {kind.__name__} ({choices}) or None, not {value!r}")


def _state(value: Any) -> RunState | None:
    return member_of(RunState, "state", value)


def _reason(value: Any) -> Reason | None:
    return member_of(Reason, "reason", value)


def _mode(value: Any) -> RunMode | None:
    return member_of(RunMode, "mode", value)


MAX_COUNT = 2**63 - 1
"""The largest count a store takes (a 64-bit integer): past it, each driver refuses it."""


def check_count(name: str, value: Any, *, least: int = 1) -> None:
    """Refuse a count (a limit, a batch, a step) that is no integer from ``least`` to
    MAX_COUNT: a store would return nothing for 0 or less, or fail on text or past it."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_COUNT:
        kind = "a positive integer" if least == 1 else f"an integer, {least} or more,"
        raise InvalidInput(f"{name} must be {kind} at most 2**63 - 1, not {value!r}")


def check_limit(value: Any) -> None:
    check_count("limit", value)


def _positive(owner: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    check_count(attribute.name, value)


def _moment(owner: Any, attribute: attrs.Attribute[float | None], value: Any) -> None:
    if value is None:
        return
    finite = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if not finite:
        raise InvalidInput(f"{attribute.name} must be a finite number of seconds, not {value!r}")
    if not EARLIEST_MOMENT <= value <= LATEST_MOMENT:
        # Seconds in nanoseconds, most likely: no calendar that shows a time holds it.
        raise InvalidInput(
            f"{attribute.name} {value!r} is not a time between the years 1 and 9999 "
            "(seconds since 1970-01-01 UTC)"
        )


def _matched_text(owner: Any, attribute: attrs.Attribute[str | None], value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{attribute.name} must be a non-empty string, not {value!r}")
    if not holdable(value):
        # No stored agent, run id or key holds one: a store would fail, not find nothing.
        raise InvalidInput(
            f"{attribute.name} must not hold a NUL character or a lone surrogate, not {value!r}"
        )


def _cursor(owner: Any, attribute: attrs.Attribute[RunCursor | None], value: Any) -> None:
    if value is not None and not isinstance(value, RunCursor):
        raise InvalidInput(f"after must be a RunCursor, not {value!r}")


@attrs.frozen
class RunListing:
    """Which runs a page lists: newest first (by ``created_at``, then ``id``), up to
    ``limit``, matching every filter given (None leaves a filter out).

    ``created_after`` and ``created_before`` (store clock seconds) bound a half-open
    range: created at or after the one, before the other. ``search`` is a run id or an
    idempotency key, matched exactly. ``after`` is ``RunCursor.of`` the last run of the
    previous page. ``state``, ``reason`` and ``mode`` may be given by their values
    ("queued"). A value of the wrong kind raises InvalidInput.
    """

    state: RunState | None = attrs.field(default=None, converter=_state)
    agent: str | None = attrs.field(default=None, validator=_matched_text)
    reason: Reason | None = attrs.field(default=None, converter=_reason)
    mode: RunMode | None = attrs.field(default=None, converter=_mode)
    created_after: float | None = attrs.field(default=None, validator=_moment)
    created_before: float | None = attrs.field(default=None, validator=_moment)
    search: str | None = attrs.field(default=None, validator=_matched_text)
    after: RunCursor | None = attrs.field(default=None, validator=_cursor)
    limit: int = attrs.field(default=100, validator=_positive)
