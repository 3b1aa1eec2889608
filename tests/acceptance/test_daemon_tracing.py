"""The daemon exports its spans over OTLP/HTTP to the endpoint OTEL_* names, on both stores."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.acceptance.acceptance_support import DaemonPool, ok, wait_until


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: it keeps every request it is sent."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.paths.append(self.path)
                received.requests.append(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """Every span received, with the resource attributes it came with."""
        found: list[tuple[dict[str, Any], Any]] = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    found.extend((resource, span) for span in scope_spans.spans)
        return found

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    try:
        yield running
    finally:
        running.close()


def test_the_daemon_exports_a_runs_spans_to_the_otlp_endpoint(
    daemons: DaemonPool, store_url: str, calls_file: Path, receiver: Receiver
) -> None:
    daemon = daemons.start(
        store_url,
        worker_id="traced",
        DEMO_CALLS_FILE=str(calls_file),
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_SERVICE_NAME="leaseward-acceptance",
        OTEL_BSP_SCHEDULE_DELAY="50",
    )
    [started] = daemon.events("daemon.started")
    traces = f"{receiver.endpoint}/v1/traces"
    assert (started["tracing"], started["tracing_endpoint"]) == ("on", traces)
    run = ok(
        "submit", "payer", "--input", '{"order": "T-1"}', "--wait", "--json", "--timeout", "20",
        "--store", store_url,
    ).json()  # fmt: skip
    assert run["state"] == "completed"

    def exported() -> list[tuple[dict[str, Any], Any]] | None:
        spans = receiver.spans()
        return spans if any(span.name.startswith("invoke_agent") for _, span in spans) else None

    spans = wait_until("the run's spans at the receiver", exported, timeout=15)
    daemon.stop_cleanly()
    spans = receiver.spans()
    assert set(receiver.paths) == {"/v1/traces"}
    assert {resource["service.name"] for resource, _ in spans} == {"leaseward-acceptance"}
    names = sorted(span.name for _, span in spans)
    assert names == ["chat", "chat", "execute_tool charge", "invoke_agent payer"]
    assert len({span.trace_id for _, span in spans}) == 1
    [attempt] = [span for _, span in spans if span.name == "invoke_agent payer"]
    assert _attributes(attempt.attributes)["leaseward.run.id"] == run["id"]
    assert _attributes(attempt.attributes)["leaseward.run.state"] == "completed"
    [charge] = [span for _, span in spans if span.name == "execute_tool charge"]
    assert charge.parent_span_id == attempt.span_id
    charged = _attributes(charge.attributes)
    assert charged["leaseward.tool.effect"] == "non_idempotent_write"
    assert charged["leaseward.intent.recorded"] is True
    assert charged["leaseward.outcome.recorded"] is True
    # Content is off unless OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT says so.
    assert "gen_ai.tool.call.arguments" not in charged


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ("OTEL_TRACES_EXPORTER", "console"),
    ],
)
def test_an_exporter_the_daemon_does_not_have_turns_tracing_off_and_says_why(
    daemons: DaemonPool, url: str, calls_file: Path, receiver: Receiver, variable: str, value: str
) -> None:
    """The daemon sends OTLP over HTTP as protobuf only: asked for another protocol or
    exporter, it says so at start, never sends the collector what it cannot read."""
    environment = {
        "DEMO_CALLS_FILE": str(calls_file),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        variable: value,
    }
    # Every parameter named, so that mypy matches the variables to the environment's.
    daemon = daemons.start(
        url, worker_id="misconfigured", flags=(), wait=True, app="demo_app:app", **environment
    )
    [started] = daemon.events("daemon.started")
    assert started["tracing"] == "off"
    assert variable in started["tracing_off"] and value in started["tracing_off"]
    daemon.stop_cleanly()


def test_without_an_endpoint_the_daemon_says_tracing_is_off(
    daemons: DaemonPool, url: str, calls_file: Path
) -> None:
    daemon = daemons.start(url, worker_id="untraced", DEMO_CALLS_FILE=str(calls_file))
    [started] = daemon.events("daemon.started")
    assert started["tracing"] == "off"
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in started["tracing_off"]
    daemon.stop_cleanly()


@pytest.fixture
def silent_collector() -> Iterator[str]:
    """An endpoint on 127.0.0.1 that accepts connections and never answers."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"


def test_a_collector_that_never_answers_holds_neither_a_run_nor_the_stop(
    daemons: DaemonPool, url: str, calls_file: Path, silent_collector: str
) -> None:
    daemon = daemons.start(
        url,
        worker_id="unheard",
        DEMO_CALLS_FILE=str(calls_file),
        OTEL_EXPORTER_OTLP_ENDPOINT=silent_collector,
        OTEL_BSP_SCHEDULE_DELAY="50",
        # Each batch may wait this long for an answer that never comes.
        OTEL_EXPORTER_OTLP_TIMEOUT="60",
    )
    run = ok(
        "submit", "payer", "--input", '{"order": "T-2"}', "--wait", "--json", "--timeout", "20",
        "--store", url,
    ).json()  # fmt: skip
    assert run["state"] == "completed"
    daemon.stop_cleanly(timeout=15)
    [unflushed] = daemon.events("daemon.traces_unflushed")
    assert unflushed["endpoint"] == f"{silent_collector}/v1/traces"
    daemon.wait_for("daemon.stopped")
