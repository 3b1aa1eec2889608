"""A run as the store holds it, as users see it, and as a submit creates it."""

from __future__ import annotations

import re
from typing import Any

import attrs

from leaseward.runtime.encoding import holdable
from leaseward.runtime.errors import InvalidInput
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.lifecycle import Reason, RunMode, RunState

__all__ = [
    "MAX_IDEMPOTENCY_KEY_CHARS",
    "NewRun",
    "RunInfo",
    "RunRecord",
    "check_idempotency_key",
    "stored_run_id",
]

MAX_IDEMPOTENCY_KEY_CHARS = 200

_RUN_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def stored_run_id(text: str) -> str:
    """``text`` as the store holds run ids: each is a UUID in lower case, so one copied in
    upper case (as some tools and spreadsheets show them) names the same run."""
    lowered = text.lower()
    return lowered if lowered != text and _RUN_ID.match(lowered) else text


def check_idempotency_key(key: Any) -> str:
    """``key`` if it can name a submit; raises InvalidInput otherwise."""
    if not isinstance(key, str) or not key:
        raise InvalidInput(f"an idempotency key must be a non-empty string, not {key!r}")
    if len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise InvalidInput(
            f"an idempotency key is at most {MAX_IDEMPOTENCY_KEY_CHARS} characters, not {len(key)}"
        )
    if not holdable(key):
        # One store would refuse it and the other keep it: the same submit must not
        # work against one store and not the other.
        raise InvalidInput(
            f"an idempotency key must be text without a NUL character or a lone "
            f"surrogate, not {key!r}"
        )
    return key


@attrs.frozen
class RunInfo:
    """A run as users see it."""

    id: str
    agent: str
    mode: RunMode
    state: RunState
    reason: Reason | None
    failure_class: FailureClass | None
    result: Any
    epoch: int
    requeues: int
    created_at: float
    finished_at: float | None
    input: Any = None
    """What the run was submitted with (``submit``'s ``input``)."""
    error: str | None = None
    idempotency_key: str | None = None
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    available_at: float | None = None
    """When a queued run may be claimed: a requeued one's retry is due then."""
    cancel_requested: bool = False
    """A cancel was asked and the run stops at its next step boundary."""
    read_at: float | None = attrs.field(default=None, eq=False)
    """The store's clock when the run was read, which its times compare with (a worker's
    clock may differ); None where the store did not say."""


@attrs.frozen
class RunRecord:
    """A run row as the store holds it, lease fields included."""

    id: str
    agent: str
    mode: RunMode
    state: RunState
    reason: Reason | None
    failure_class: FailureClass | None
    input: Any
    result: Any
    error: str | None
    epoch: int
    requeues: int
    lease_owner: str | None
    lease_expires_at: float | None
    available_at: float
    cancel_requested: bool
    created_at: float
    updated_at: float
    finished_at: float | None
    idempotency_key: str | None = None
    traceparent: str | None = None
    """The W3C trace context of the caller of submit, which every attempt continues."""
    read_at: float | None = attrs.field(default=None, eq=False)
    """The store's clock when the row was read, if the read said."""

    def info(self) -> RunInfo:
        # Every field of a RunInfo is a RunRecord's, under the same name.
        return RunInfo(**{name: getattr(self, name) for name in _INFO_FIELDS})


_INFO_FIELDS = tuple(field.name for field in attrs.fields(RunInfo))


@attrs.frozen
class NewRun:
    id: str
    agent: str
    mode: RunMode
    input_json: str
    lease_owner: str | None = None
    lease_seconds: float | None = None
    idempotency_key: str | None = None
    request_digest: str | None = None
    """Of agent and input (``request_digest``); set with the key, to tell a retry from a reuse."""
    traceparent: str | None = None
