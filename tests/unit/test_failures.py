"""The static classifier and the retryable set (DESIGN section 6)."""

from __future__ import annotations

import ssl

import pytest

from leaseward.runtime.errors import (
    PROVIDER_FAILURE_CLASSES,
    AuditPersistenceFailed,
    CallTimedOut,
    ConfigurationError,
    InvalidInput,
    LeaseLost,
    LeasewardError,
    ProviderError,
    StoreError,
    ToolDefinitionError,
    UnknownAgent,
)
from leaseward.runtime.failures import RETRYABLE, FailureClass, classify


def test_failure_classes_are_the_designed_ones() -> None:
    assert {c.value for c in FailureClass} == {
        "connection",
        "rate_limit",
        "server_error",
        "circuit_open",
        "timeout",
        "auth",
        "configuration",
        "client_error",
        "unknown",
    }


def test_retryable_is_exactly_the_transient_classes() -> None:
    expected = {"connection", "rate_limit", "server_error", "circuit_open", "timeout"}
    assert {c.value for c in FailureClass if c.retryable} == expected
    assert {c.value for c in RETRYABLE} == expected
    for failure in FailureClass:
        assert failure.retryable is (failure.value in expected)


@pytest.mark.parametrize("failure", list(FailureClass))
def test_provider_error_carries_its_class(failure: FailureClass) -> None:
    assert classify(ProviderError("x", failure_class=failure.value)) is failure


def test_provider_error_defaults_to_unknown() -> None:
    assert classify(ProviderError("x")) is FailureClass.UNKNOWN


def test_store_error_is_a_connection_failure() -> None:
    assert classify(StoreError("db gone")) is FailureClass.CONNECTION


def test_audit_persistence_failed_is_unknown_and_not_retryable() -> None:
    exc = AuditPersistenceFailed()
    assert isinstance(exc, LeasewardError)
    assert classify(exc) is FailureClass.UNKNOWN
    assert not classify(exc).retryable


def test_audit_persistence_failed_wins_over_other_bases() -> None:
    class AuditStoreError(AuditPersistenceFailed, StoreError):
        pass

    class AuditProviderError(AuditPersistenceFailed, ProviderError):
        pass

    assert classify(AuditStoreError()) is FailureClass.UNKNOWN
    assert classify(AuditProviderError(failure_class="connection")) is FailureClass.UNKNOWN


@pytest.mark.parametrize(
    "exc",
    [ConfigurationError("bad"), ToolDefinitionError("bad"), UnknownAgent("who")],
    ids=type,
)
def test_configuration_errors(exc: BaseException) -> None:
    assert classify(exc) is FailureClass.CONFIGURATION


def test_invalid_input_is_a_client_error() -> None:
    assert classify(InvalidInput("no")) is FailureClass.CLIENT_ERROR


def test_permission_error_is_auth_though_it_is_an_os_error() -> None:
    assert classify(PermissionError("denied")) is FailureClass.AUTH


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionError("x"),
        ConnectionResetError("x"),
        ConnectionRefusedError("x"),
        BrokenPipeError("x"),
        TimeoutError("x"),
        ssl.SSLError("x"),
    ],
    ids=type,
)
def test_connection_errors(exc: BaseException) -> None:
    assert classify(exc) is FailureClass.CONNECTION


def test_a_call_that_ran_out_of_its_timeout_is_a_timeout() -> None:
    # Not a connection failure: the call may have done its work, and said nothing.
    assert classify(CallTimedOut("charge did not return within 10.0 s")) is FailureClass.TIMEOUT


def test_certificate_errors_are_configuration() -> None:
    assert classify(ssl.SSLCertVerificationError("bad cert")) is FailureClass.CONFIGURATION


def test_other_os_errors_are_connection() -> None:
    assert classify(OSError("x")) is FailureClass.CONNECTION
    assert classify(FileNotFoundError("x")) is FailureClass.CONNECTION


class HTTPError(Exception):
    def __init__(self, *, status_code: object = None, status: object = None) -> None:
        super().__init__("http")
        if status_code is not None:
            self.status_code = status_code
        if status is not None:
            self.status = status


STATUS_CLASSES = [
    (429, FailureClass.RATE_LIMIT),
    (401, FailureClass.AUTH),
    (403, FailureClass.AUTH),
    (408, FailureClass.CONNECTION),
    (409, FailureClass.CONNECTION),
    (500, FailureClass.SERVER_ERROR),
    (503, FailureClass.SERVER_ERROR),
    (599, FailureClass.SERVER_ERROR),
    (400, FailureClass.CLIENT_ERROR),
    (404, FailureClass.CLIENT_ERROR),
    (422, FailureClass.CLIENT_ERROR),
]


@pytest.mark.parametrize(("code", "expected"), STATUS_CLASSES)
def test_status_code_attribute(code: int, expected: FailureClass) -> None:
    assert classify(HTTPError(status_code=code)) is expected


@pytest.mark.parametrize(("code", "expected"), STATUS_CLASSES)
def test_status_attribute(code: int, expected: FailureClass) -> None:
    assert classify(HTTPError(status=code)) is expected


@pytest.mark.parametrize("code", [200, 302, 600, 99])
def test_status_outside_errors_is_unknown(code: int) -> None:
    assert classify(HTTPError(status_code=code)) is FailureClass.UNKNOWN


def test_status_code_is_read_before_status() -> None:
    assert classify(HTTPError(status_code=429, status=401)) is FailureClass.RATE_LIMIT


def test_an_unusable_status_code_falls_back_to_status() -> None:
    assert classify(HTTPError(status_code=True, status=503)) is FailureClass.SERVER_ERROR
    assert classify(HTTPError(status_code="429", status=401)) is FailureClass.AUTH


@pytest.mark.parametrize("flag", [True, False])
def test_a_bool_status_is_ignored(flag: bool) -> None:
    assert classify(HTTPError(status_code=flag)) is FailureClass.UNKNOWN
    assert classify(HTTPError(status=flag)) is FailureClass.UNKNOWN


def test_a_non_int_status_is_ignored() -> None:
    assert classify(HTTPError(status_code="500")) is FailureClass.UNKNOWN
    assert classify(HTTPError(status=500.0)) is FailureClass.UNKNOWN


def test_an_http_status_on_an_os_error_wins_over_os_error() -> None:
    class OSHTTPError(OSError):
        status_code = 404

    assert classify(OSHTTPError()) is FailureClass.CLIENT_ERROR


@pytest.mark.parametrize(
    "exc",
    [ValueError("x"), KeyError("k"), RuntimeError("x"), LeaseLost(), LeasewardError()],
    ids=type,
)
def test_anything_else_is_unknown(exc: BaseException) -> None:
    assert classify(exc) is FailureClass.UNKNOWN


def test_a_provider_error_names_a_failure_class_that_exists() -> None:
    """A typo ("ratelimit") made a failure worth a retry a permanent one, silently."""
    assert {c.value for c in FailureClass} == PROVIDER_FAILURE_CLASSES
    with pytest.raises(ConfigurationError, match="rate_limit, server_error") as refused:
        ProviderError("upstream hiccup", failure_class="ratelimit")
    assert "'ratelimit'" in refused.value.message
    for wrong in (None, 5, "", "timed_out", "CONNECTION", "retry"):
        with pytest.raises(ConfigurationError):
            ProviderError("x", failure_class=wrong)  # type: ignore[arg-type]
    error = ProviderError("slow down", failure_class=FailureClass.RATE_LIMIT)
    assert classify(error) is FailureClass.RATE_LIMIT
