"""One run's trace, printed as JSON: a caller's span, the attempt, a provider turn, a
write tool call and the final turn, as an OpenTelemetry SDK records them.

    .venv/bin/python examples/tracing.py   (needs the otel extra: pip install 'leaseward[otel]')

The spans are kept in memory and printed when the run is done; a deployment sends
them to a collector instead (docs/guides/tracing.md).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from leaseward import (
    Agent,
    App,
    ProviderReply,
    Runtime,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    Usage,
    tool,
)


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def charge(ctx: ToolContext, amount_cents: int) -> dict[str, int]:
    """Charge the customer's card (here, pretend to)."""
    return {"charged_cents": amount_cents}


class Model(ScriptedProvider):
    provider_name = "scripted"
    model = "demo-model"


PROVIDER = Model(
    [
        ProviderReply(
            tool_calls=[ToolCall("charge", {"amount_cents": 500}, "call-1")],
            usage=Usage(412, 18),
            model="demo-model-2026-01",
            stop_reason="tool_use",
        ),
        ProviderReply(text="charged", usage=Usage(455, 4), model="demo-model-2026-01"),
    ]
)


def as_json(span: ReadableSpan) -> dict[str, Any]:
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_id": None if parent is None else f"{parent.span_id:016x}",
        "kind": span.kind.name,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, **dict(e.attributes or {})} for e in span.events],
    }


async def main() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "example"}))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'runs.db'}"
        async with Runtime.open(url, App([Agent("payer", PROVIDER, tools=[charge])])) as rt:
            with trace.get_tracer("example").start_as_current_span("POST /orders/42/pay"):
                run_id = await rt.submit("payer", {"order": 42})
            await rt.wait(run_id, timeout=30)
            print("usage:", await rt.usage(run_id))
    ended = sorted(spans.get_finished_spans(), key=lambda span: span.start_time or 0)
    print(json.dumps([as_json(span) for span in ended], indent=2, default=list))


if __name__ == "__main__":
    anyio.run(main)
