"""The runs page's query: its filters as the address bar carries them, and the page of
runs they select, newest first, continued after a cursor (keyset, never OFFSET)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from leaseward.client import Client
from leaseward.runtime.errors import InvalidInput
from leaseward.runtime.lifecycle import Reason, RunMode, RunState
from leaseward.runtime.listing import RunCursor
from leaseward.runtime.runs import RunInfo

__all__ = ["PAGE_SIZE", "RunQuery", "date_input", "fetch_runs", "reason_of"]

PAGE_SIZE = 50


def _choice(params: Mapping[str, str], name: str, kind: Any) -> Any:
    value = params.get(name, "")
    if not value:
        return None
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(member.value for member in kind)
        raise InvalidInput(f"{name} {value!r} is not one of {known}") from None


def reason_of(params: Mapping[str, str]) -> Reason | None:
    """The ``reason`` filter of an address, None where it gives none."""
    reason: Reason | None = _choice(params, "reason", Reason)
    return reason


def _moment(params: Mapping[str, str], name: str) -> float | None:
    """A time as a date input sends it (``2026-12-04T16:45``, UTC unless it says
    otherwise) or as seconds since the epoch."""
    value = params.get(name, "").strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"{name} {value!r} is not a time such as 2026-12-04T16:45") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def date_input(seconds: float) -> str:
    """A time as the filter form's date inputs show it (UTC): to the millisecond where it
    has a fraction, so that filtering again selects the same runs."""
    moment = datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
    return moment.isoformat(timespec="milliseconds" if seconds % 1 else "seconds")


def _text(params: Mapping[str, str], name: str) -> str | None:
    return params.get(name, "").strip() or None


@attrs.frozen
class RunQuery:
    """Which runs the page shows; each field narrows them, None leaves them be."""

    state: RunState | None = None
    agent: str | None = None
    reason: Reason | None = None
    """Why a run ended, or was dead-lettered."""
    mode: RunMode | None = None
    created_after: float | None = None
    created_before: float | None = None
    search: str | None = None
    """A run id or an idempotency key."""
    after: RunCursor | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> RunQuery:
        """The query of a page's address; a value it cannot read raises InvalidInput."""
        after = _text(params, "after")
        return cls(
            state=_choice(params, "state", RunState),
            agent=_text(params, "agent"),
            reason=_choice(params, "reason", Reason),
            mode=_choice(params, "mode", RunMode),
            created_after=_moment(params, "created_after"),
            created_before=_moment(params, "created_before"),
            search=_text(params, "search"),
            after=None if after is None else RunCursor.parse(after),
        )

    def params(self, after: RunCursor | None) -> dict[str, str]:
        """The address parameters of this query, continued after ``after``."""
        values: dict[str, Any] = {
            "state": self.state,
            "agent": self.agent,
            "reason": self.reason,
            "mode": self.mode,
            "created_after": self.created_after,
            "created_before": self.created_before,
            "search": self.search,
            "after": None if after is None else after.token(),
        }
        return {
            name: str(value) if isinstance(value, str) else repr(value)
            for name, value in values.items()
            if value is not None
        }

    def filters(self) -> dict[str, Any]:
        """The keyword arguments of ``Client.runs`` this query passes."""
        return attrs.asdict(self, recurse=False)


async def fetch_runs(client: Client, query: RunQuery, limit: int = PAGE_SIZE) -> list[RunInfo]:
    """The runs ``query`` selects, newest first, at most ``limit``: the store filters and
    pages them on its indexes."""
    return await client.runs(**query.filters(), limit=limit)
