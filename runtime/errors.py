"""The exception hierarchy: one root, and each class's docstring is its default message."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # For annotations only: the model imports this module.
    from leaseward.runtime.model import PurgedRun

__all__ = [
    "AuditPersistenceFailed",
    "CallTimedOut",
    "CommitOutcomeUnknown",
    "ConfigurationError",
    "IdempotencyKeyConflict",
    "IllegalTransition",
    "InvalidInput",
    "LeaseLost",
    "LeasewardError",
    "ProviderError",
    "RequestExpired",
    "RequestNotFound",
    "RunNotFound",
    "RunPurged",
    "StoreError",
    "StoreNotFound",
    "ToolDefinitionError",
    "ToolError",
    "UnknownAgent",
    "WaitTimeout",
]


class LeasewardError(Exception):
    """A leaseward operation failed."""

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (self.__doc__ or "").strip()
        super().__init__(self.message)


class ConfigurationError(LeasewardError):
    """The runtime is configured in a way it cannot run with."""


class ToolDefinitionError(ConfigurationError):
    """A tool's definition is not usable."""


class UnknownAgent(LeasewardError):
    """No agent with that name is registered in the app."""


class InvalidInput(LeasewardError):
    """The input is not acceptable."""


class RunNotFound(LeasewardError):
    """No run with that id exists."""


class RunPurged(RunNotFound):
    """The run was purged: only its idempotency key, and how it ended, are kept."""

    def __init__(self, purged: PurgedRun) -> None:
        ended = purged.state.value
        if purged.reason is not None and purged.reason.value != ended:
            ended += f" ({purged.reason.value})"
        if purged.finished_at is not None:
            ended += f" at {_utc(purged.finished_at)}"
        super().__init__(
            f"run {purged.run_id} was purged at {_utc(purged.purged_at)}; it had ended "
            f"{ended} (idempotency key {purged.idempotency_key!r})"
        )
        self.purged = purged

    @property
    def run_id(self) -> str:
        return self.purged.run_id


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class RequestNotFound(LeasewardError):
    """The run has no pending request for a person's decision with that call id."""


class IdempotencyKeyConflict(LeasewardError):
    """The idempotency key was already used to submit a different agent or input."""


class IllegalTransition(LeasewardError):
    """The run cannot make that state transition."""


class RequestExpired(IllegalTransition):
    """The request expired before this decision; it was rejected as expired."""

    def __init__(self, run_id: str, call_id: str, expires_at: float) -> None:
        # Whole seconds in UTC, as `show` prints a request's times.
        super().__init__(
            f"call {call_id} of run {run_id}: the request expired at {_utc(expires_at)}; "
            "it was rejected as expired"
        )
        self.run_id = run_id
        self.call_id = call_id
        self.expires_at = expires_at


class LeaseLost(LeasewardError):
    """This worker no longer holds the run's lease; it may change nothing."""


class AuditPersistenceFailed(LeasewardError):
    """A write tool ran but its audit record could not be stored; the run fails closed."""


class StoreError(LeasewardError):
    """The store could not carry out the operation."""

    def __init__(self, message: str | None = None, *, data_error: bool = False) -> None:
        super().__init__(message)
        # True when the store refused what it was given (text it cannot encode, a
        # number out of range, a row that contradicts a stored one): sending the same
        # again fails the same way. False for faults that may pass (I/O, locks, network).
        self.data_error = data_error


class StoreNotFound(StoreError):
    """No leaseward store is there."""

    def __init__(self, location: str, message: str | None = None) -> None:
        super().__init__(message or f"no leaseward store at {location}")
        # The absolute path of a SQLite file, or a PostgreSQL URL without its password.
        self.location = location


class CommitOutcomeUnknown(StoreError):
    """The store's connection was lost during a commit: the change may or may not be stored."""


class CallTimedOut(LeasewardError):
    """A tool did not return within its timeout; a write may have applied."""


class ToolError(LeasewardError):
    """The tool failed without applying its effect; the model sees this as an error result."""


class ProviderError(LeasewardError):
    """The model provider failed."""

    def __init__(
        self,
        message: str | None = None,
        *,
        failure_class: str = "unknown",
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(message)
        # A plain string keeps this module free of the failures module; the
        # classifier turns it into a FailureClass (an unknown string is "unknown").
        self.failure_class = failure_class
        # How long the provider asked to be left alone (an HTTP Retry-After): a
        # requeue waits that long instead of guessing with its backoff.
        self.retry_after_seconds = retry_after_seconds


class WaitTimeout(LeasewardError, TimeoutError):
    """The run did not reach a terminal state within the timeout."""
