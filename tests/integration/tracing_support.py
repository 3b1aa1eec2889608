"""Spans a test can read: one in-memory exporter per test process, and a file exporter
for worker processes that may be SIGKILLed (each span is on disk once it ends)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = [
    "SpansFile",
    "every_text",
    "in_memory_spans",
    "read_spans",
]

_EXPORTER: InMemorySpanExporter | None = None


def in_memory_spans() -> InMemorySpanExporter:
    """The process's exporter, emptied: the global tracer provider can be set only once."""
    global _EXPORTER
    if _EXPORTER is None:
        _EXPORTER = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    return _EXPORTER


class SpansFile(SpanExporter):
    """Appends each ended span as one JSON line, fsynced: the process may be killed next."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._path.open("a", encoding="utf-8") as handle:
            for span in spans:
                handle.write(json.dumps(json.loads(span.to_json())) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        return SpanExportResult.SUCCESS

    def install(self) -> TracerProvider:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self))
        trace.set_tracer_provider(provider)
        return provider


def read_spans(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The spans the files hold, as ``ReadableSpan.to_json`` gives them."""
    found: list[dict[str, Any]] = []
    for path in paths:
        if path.exists():
            text = path.read_text(encoding="utf-8")
            found.extend(json.loads(line) for line in text.splitlines() if line.strip())
    return found


def every_text(span: ReadableSpan) -> list[str]:
    """Every attribute value, event attribute value and status text of ``span``."""
    texts = [str(value) for value in _values(span.attributes or {})]
    for event in span.events:
        texts.extend(str(value) for value in _values(event.attributes or {}))
    if span.status.description:
        texts.append(span.status.description)
    return texts


def _values(attributes: Mapping[str, Any]) -> list[Any]:
    values: list[Any] = []
    for value in attributes.values():
        values.extend(value if isinstance(value, tuple | list) else [value])
    return values
