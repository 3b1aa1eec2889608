"""What the daemon reads of OTEL_* and shows of it: the service name only when a key
names it, and an endpoint without its credentials."""

from __future__ import annotations

import pytest

from leaseward.otlp import _resource_keys, _without_credentials, export_traces


def test_service_name_is_named_only_by_its_own_key() -> None:
    assert "service.name" in _resource_keys("service.name=billing,team=pay")
    assert "service.name" not in _resource_keys("service.namespace=prod")
    assert "service.name" not in _resource_keys("team=pay, note=service.name")


def test_an_endpoint_is_shown_without_user_or_password() -> None:
    assert (
        _without_credentials("https://alice:s3cret@collector.internal:4318/otlp?x=1")
        == "https://collector.internal:4318/otlp?x=1"
    )
    assert _without_credentials("http://127.0.0.1:4318") == "http://127.0.0.1:4318"


@pytest.mark.parametrize(
    ("variable", "endpoint"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "grpc://collector:4317"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://[::1:4318"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:otlp"),
    ],
)
def test_an_endpoint_that_is_not_an_http_url_turns_tracing_off_and_says_why(
    variable: str, endpoint: str
) -> None:
    """The exporter would fail every batch with "no connection adapters", while the
    daemon said tracing was on."""
    export = export_traces({variable: endpoint})
    assert not export.on
    assert export.detail == (
        f"{variable} is {endpoint!r}: it must be an http:// or https:// URL with a host, "
        "such as http://collector:4318"
    )


def test_an_endpoint_with_credentials_is_refused_without_showing_them() -> None:
    export = export_traces({"OTEL_EXPORTER_OTLP_ENDPOINT": "alice:s3cret@collector:4318"})
    assert not export.on
    assert "s3cret" not in export.detail
