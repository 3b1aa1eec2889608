"""What the daemon reads of OTEL_* and shows of it: the service name only when a key
names one, and an endpoint without its credentials."""

from __future__ import annotations

import os
import subprocess
import sys

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


# In a process of its own: the tracer provider export_traces installs is global, and
# can be set once.
EXPORTED = """
import os
from opentelemetry import trace
from leaseward.otlp import export_traces
export = export_traces(os.environ)
print(trace.get_tracer_provider().resource.attributes["service.name"])
print(export.detail)
"""


def _exported(environ: dict[str, str]) -> list[str]:
    """The service name the spans carry, and where the daemon says they go."""
    done = subprocess.run(
        [sys.executable, "-c", EXPORTED],
        # Port 9 (discard): nothing is exported, the process ends before a batch is due.
        env={
            **{name: value for name, value in os.environ.items() if not name.startswith("OTEL_")},
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
            **environ,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def _service_name(environ: dict[str, str]) -> str:
    return _exported(environ)[0]


@pytest.mark.parametrize(
    "environ",
    [
        {},
        # An empty variable is unset, for the OpenTelemetry SDK: a deployment's template
        # that left the name blank would otherwise export as unknown_service:python.
        {"OTEL_SERVICE_NAME": ""},
        {"OTEL_RESOURCE_ATTRIBUTES": "service.name=,team=pay"},
    ],
)
def test_a_service_name_left_blank_is_the_daemons_default(environ: dict[str, str]) -> None:
    assert _service_name(environ) == "leaseward"


def test_a_service_name_given_is_the_one_exported() -> None:
    assert _service_name({"OTEL_SERVICE_NAME": "payments"}) == "payments"
    assert _service_name({"OTEL_RESOURCE_ATTRIBUTES": "service.name=billing"}) == "billing"


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0", "max_queue_size must be a positive integer."),
        ("OTEL_BSP_SCHEDULE_DELAY", "-5", "schedule_delay_millis must be positive."),
        (
            "OTEL_ATTRIBUTE_COUNT_LIMIT",
            "many",
            "OTEL_ATTRIBUTE_COUNT_LIMIT must be a non-negative integer but got many",
        ),
    ],
)
def test_a_setting_the_sdk_refuses_turns_tracing_off_and_says_why(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, why: str
) -> None:
    """The SDK reads these from the process's environment, and raised out of the daemon's
    start with a traceback."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv(variable, value)
    export = export_traces(os.environ)
    assert not export.on
    assert export.detail == f"an OTEL_* setting is invalid: {why}"


@pytest.mark.parametrize(
    ("variable", "endpoint", "shown"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "http://c:4318/v1/traces"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/", "http://c:4318/v1/traces"),
        # The path given again: the exporter adds its own, and the collector answers 404.
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://u:pw@c:4318/v1/traces",
            "http://c:4318/v1/traces/v1/traces",
        ),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/in", "http://c:4318/in"),
    ],
)
def test_the_endpoint_shown_is_the_url_the_spans_are_sent_to(
    variable: str, endpoint: str, shown: str
) -> None:
    assert _exported({variable: endpoint})[1] == shown


def test_the_exporters_own_entry_point_name_turns_tracing_on() -> None:
    """The OpenTelemetry SDK names the exporter the daemon has otlp_proto_http too; asked
    for by that name, tracing was off, "the daemon has the otlp exporter only"."""
    assert (
        _exported({"OTEL_TRACES_EXPORTER": "otlp_proto_http"})[1] == "http://127.0.0.1:9/v1/traces"
    )
    export = export_traces(
        {"OTEL_TRACES_EXPORTER": "otlp_proto_grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:1"}
    )
    assert not export.on
    assert "otlp_proto_grpc" in export.detail
