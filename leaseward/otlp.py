"""The daemon's trace export: an OTLP/HTTP exporter configured from the standard
``OTEL_*`` environment variables, when the ``otel`` extra is installed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit, urlunsplit

import attrs

__all__ = ["CAPTURE_CONTENT_VARIABLE", "TRACE_FLUSH_SECONDS", "TraceExport", "export_traces"]

#: The GenAI conventions' switch for recording content (tool arguments and results).
CAPTURE_CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_PROTOCOL = "http/protobuf"
_DEFAULT_SERVICE_NAME = "leaseward"

TRACE_FLUSH_SECONDS = 3.0
"""How long a stopping daemon waits for its last spans to reach the collector. The
exporter's own timeout bounds each batch, and the SDK waits up to 30 s for them all:
a collector that is down or hangs would hold the stop that long."""


def _nothing_to_flush() -> bool:
    return True


def _flush_within(shutdown: Callable[[], None], seconds: float) -> Callable[[], bool]:
    """``shutdown`` given at most ``seconds``; whether it finished in them. What it has not
    sent by then is dropped with its thread when the process exits."""

    def flush() -> bool:
        flushing = threading.Thread(target=shutdown, name="leaseward-trace-flush", daemon=True)
        flushing.start()
        flushing.join(seconds)
        return not flushing.is_alive()

    return flush


@attrs.frozen
class TraceExport:
    """Whether spans are exported, where to or why not, and how to flush them at exit."""

    on: bool
    detail: str
    """The endpoint when on; why not when off."""
    capture_content: bool = False
    shutdown: Callable[[], bool] = _nothing_to_flush
    """Flush the spans held and stop exporting; whether it finished in time."""


def export_traces(environ: Mapping[str, str]) -> TraceExport:
    """Install a tracer provider exporting over OTLP/HTTP, if ``environ`` names an
    endpoint and the SDK and exporter are installed; otherwise say why not."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return TraceExport(False, "OTEL_SDK_DISABLED is true")
    exporters = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if exporters == "none":
        return TraceExport(False, "OTEL_TRACES_EXPORTER is none")
    # otlp_proto_http is the SDK's own name for the one exporter the daemon has.
    if not {"otlp", "otlp_proto_http"} & {name.strip() for name in exporters.split(",")}:
        return TraceExport(
            False, f"OTEL_TRACES_EXPORTER is {exporters!r}: the daemon has the otlp exporter only"
        )
    # The more specific variable wins, as the exporter reads them.
    for variable in _PROTOCOL_VARIABLES:
        protocol = environ.get(variable, "").strip().lower()
        if protocol and protocol != _PROTOCOL:
            return TraceExport(
                False, f"{variable} is {protocol!r}: the daemon sends OTLP as {_PROTOCOL} only"
            )
        if protocol:
            break
    endpoint_variable = next((name for name in _ENDPOINT_VARIABLES if environ.get(name)), None)
    if endpoint_variable is None:
        return TraceExport(False, "no OTEL_EXPORTER_OTLP_ENDPOINT is set")
    endpoint = environ[endpoint_variable]
    if not _http_url(endpoint):
        # The exporter would take it, and fail every batch with "no connection adapters"
        # while the daemon said tracing was on. Whatever precedes an @ may be a password.
        shown = endpoint.rpartition("@")[2]
        return TraceExport(
            False,
            f"{endpoint_variable} is {shown!r}: it must be an http:// or https:// URL with a host, "
            "such as http://collector:4318",
        )
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        return TraceExport(False, "the otel extra is not installed (pip install 'leaseward[otel]')")
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are read by Resource.create; a name
    # given here would override them. One left empty names nothing: the SDK takes it as
    # unset, and would export as unknown_service.
    named = bool(environ.get("OTEL_SERVICE_NAME")) or SERVICE_NAME in _resource_keys(
        environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    )
    resource = Resource.create({} if named else {SERVICE_NAME: _DEFAULT_SERVICE_NAME})
    try:
        # They read their own OTEL_* (span limits, OTEL_BSP_*, OTEL_EXPORTER_OTLP_*), and
        # refuse some values by raising, which would stop the daemon with a traceback.
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    except ValueError as exc:
        return TraceExport(False, f"an OTEL_* setting is invalid: {exc}")
    trace.set_tracer_provider(provider)
    capture = environ.get(CAPTURE_CONTENT_VARIABLE, "").strip().lower() == "true"
    if endpoint_variable == "OTEL_EXPORTER_OTLP_ENDPOINT":
        # Shown as the exporter sends to it, its signal's path added to the base: a base
        # given with the path already in it then reads .../v1/traces/v1/traces, where the
        # collector answers every batch 404.
        endpoint = f"{endpoint.removesuffix('/')}/v1/traces"
    return TraceExport(
        True,
        _without_credentials(endpoint),
        capture_content=capture,
        shutdown=_flush_within(provider.shutdown, TRACE_FLUSH_SECONDS),
    )


def _http_url(endpoint: str) -> bool:
    """Whether the exporter can send to ``endpoint``: http or https, a host, and a port
    that is a number if it names one."""
    try:
        parts = urlsplit(endpoint)
        # Read for what it raises: a port that is not a number, or out of range.
        _ = parts.port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _resource_keys(attributes: str) -> set[str]:
    """The keys OTEL_RESOURCE_ATTRIBUTES (``key=value,key=value``) gives a value."""
    pairs = (pair.partition("=") for pair in attributes.split(","))
    return {key.strip() for key, equals, value in pairs if equals and value.strip()}


def _without_credentials(endpoint: str) -> str:
    """The endpoint as the daemon's log may show it: no user or password in it."""
    parts = urlsplit(endpoint)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
