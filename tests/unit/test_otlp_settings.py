"""What the daemon reads of OTEL_* and shows of it: the service name only when a key
names it, and an endpoint without its credentials."""

from __future__ import annotations

from leaseward.otlp import _resource_keys, _without_credentials


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
