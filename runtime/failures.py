"""Failure classes and the static classifier that maps exceptions onto them."""

from __future__ import annotations

import enum
import ssl

from leaseward.runtime.errors import (
    AuditPersistenceFailed,
    CallNotStarted,
    CallTimedOut,
    ConfigurationError,
    InvalidInput,
    ProviderError,
    StoreError,
    UnknownAgent,
)

__all__ = ["RETRYABLE", "FailureClass", "classify", "failure_class_for_status"]


class FailureClass(enum.StrEnum):
    CONNECTION = "connection"
    RATE_LIMIT = "rate_limit"
    SERVER_ERROR = "server_error"
    CIRCUIT_OPEN = "circuit_open"
    TIMEOUT = "timeout"
    AUTH = "auth"
    CONFIGURATION = "configuration"
    CLIENT_ERROR = "client_error"
    UNKNOWN = "unknown"

    @property
    def retryable(self) -> bool:
        return self in RETRYABLE


RETRYABLE = frozenset(
    {
        FailureClass.CONNECTION,
        FailureClass.RATE_LIMIT,
        FailureClass.SERVER_ERROR,
        FailureClass.CIRCUIT_OPEN,
        # A call that may be made again: a read, or a write under its idempotency key.
        # A NON_IDEMPOTENT_WRITE that timed out is never retried, whatever its class:
        # its intent stays open, and recovery dead-letters it interrupted_write first.
        FailureClass.TIMEOUT,
    }
)

_HTTP_STATUS_ATTRIBUTES = ("status_code", "status")


def failure_class_for_status(status: int) -> FailureClass | None:
    """The class of a failed HTTP call by its status, or None for a status that is no failure."""
    if status == 429:
        return FailureClass.RATE_LIMIT
    if status in (401, 403):
        return FailureClass.AUTH
    if status in (408, 409):
        return FailureClass.CONNECTION
    if 500 <= status <= 599:
        return FailureClass.SERVER_ERROR
    if 400 <= status <= 499:
        return FailureClass.CLIENT_ERROR
    return None


def classify(exc: BaseException) -> FailureClass:
    """The failure class of an exception; whatever is not recognised is UNKNOWN."""
    # Audit failures come first: they must never look retryable, whatever wraps them.
    if isinstance(exc, AuditPersistenceFailed):
        return FailureClass.UNKNOWN
    if isinstance(exc, ProviderError):
        try:
            return FailureClass(exc.failure_class)
        except ValueError:
            return FailureClass.UNKNOWN
    if isinstance(exc, StoreError):
        return FailureClass.CONNECTION
    if isinstance(exc, CallNotStarted):
        return FailureClass.CONNECTION
    if isinstance(exc, CallTimedOut):
        return FailureClass.TIMEOUT
    if isinstance(exc, ConfigurationError | UnknownAgent):
        return FailureClass.CONFIGURATION
    if isinstance(exc, InvalidInput):
        return FailureClass.CLIENT_ERROR
    if isinstance(exc, PermissionError):
        return FailureClass.AUTH
    if isinstance(exc, ssl.SSLCertVerificationError):
        return FailureClass.CONFIGURATION
    if isinstance(exc, ConnectionError | TimeoutError | ssl.SSLError):
        return FailureClass.CONNECTION
    # SDKs of HTTP providers (openai, anthropic, httpx) put the status on the exception.
    for attribute in _HTTP_STATUS_ATTRIBUTES:
        status = getattr(exc, attribute, None)
        if isinstance(status, int) and not isinstance(status, bool):
            found = failure_class_for_status(status)
            if found is not None:
                return found
    if isinstance(exc, OSError):
        return FailureClass.CONNECTION
    return FailureClass.UNKNOWN
