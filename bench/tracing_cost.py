"""What tracing adds to a run's step: the spans and attributes a RunActor's RunTrace
makes for one provider turn and one tool call, with no OpenTelemetry SDK configured
(only the API installed: every span is non-recording) and with one configured.

    .venv/bin/python bench/tracing_cost.py [--steps 20000] [--repeat 5]

A "step" here is a provider turn and a write tool call: a chat span, an execute_tool
span with its intent and outcome observed, as the RunActor feeds them. The SDK case
exports to an exporter that drops the spans, so no I/O is timed. Each figure is the
best of ``--repeat`` timings of ``--steps`` steps, in microseconds per step. The
script prints figures; it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from leaseward import Agent, ScriptedProvider, ToolContext, ToolEffect, tool
from leaseward.actors.tracing import RunTrace, TraceSettings
from leaseward.runtime import machine as m
from leaseward.runtime.lifecycle import RunMode, RunState
from leaseward.runtime.messages import ProviderReply, ProviderRequest, ToolCall, Usage
from leaseward.runtime.runs import RunRecord

RUN = RunRecord(
    id="0b6d3f0e-3f7e-4a57-9d0f-5f2d4c1e8a90",
    agent="payer",
    mode=RunMode.QUEUED,
    state=RunState.RUNNING,
    reason=None,
    failure_class=None,
    input={"order": 1},
    result=None,
    error=None,
    epoch=1,
    requeues=0,
    lease_owner="host:1",
    lease_expires_at=30.0,
    available_at=0.0,
    cancel_requested=False,
    created_at=0.0,
    updated_at=0.0,
    finished_at=None,
    traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
)
CALL = m.CallTool(
    tool="charge",
    call_id="call-1",
    arguments={"amount": 5},
    idempotency_key="key",
    effect=ToolEffect.NON_IDEMPOTENT_WRITE,
    timeout_seconds=10.0,
    protected=True,
)
REPLY = m.ProviderReplied(
    ProviderReply(
        tool_calls=[ToolCall("charge", {"amount": 5}, "call-1")],
        usage=Usage(120, 30),
        model="m-1",
        stop_reason="tool_use",
    ),
    latency_ms=1.0,
)


def _recorded(status: str) -> m.Log:
    return m.Log.of(
        "info", "step.recorded", seq=1, kind="tool", tool="charge", call_id="call-1",
        effect="non_idempotent_write", status=status,
    )  # fmt: skip


INTENT, OUTCOME = _recorded("started"), _recorded("succeeded")


class _Dropped(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _agent() -> Agent:
    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(ctx: ToolContext, amount: int) -> dict[str, int]:
        return {"charged": amount}

    return Agent("payer", ScriptedProvider([ProviderReply(text="done")]), tools=[charge])


def _step_cost(steps: int, repeat: int) -> float:
    """Microseconds per step, best of ``repeat``, in one attempt's trace."""
    agent = _agent()
    request = ProviderRequest(RUN.id, agent.name, (), ())
    traced = RunTrace(RUN, agent, "host:1", TraceSettings())

    def step() -> None:
        traced.asking(request)
        traced.answered(REPLY)
        traced.observed(INTENT)
        traced.calling(CALL)
        traced.returned(m.ToolReturned({"charged": 5}))
        traced.observed(OUTCOME)

    timings = timeit.repeat(step, number=steps, repeat=repeat)
    traced.ended(None)
    return min(timings) / steps * 1e6


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings per case, best kept")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.steps < 1 or args.repeat < 1:
        raise SystemExit("--steps and --repeat must be at least 1")
    print(f"{args.steps} steps, best of {args.repeat}")
    without = _step_cost(args.steps, args.repeat)
    print(f"{'no SDK (API only)':<34} {without:>8.2f} us/step")
    # The global provider can be set once per process: the SDK case comes second.
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_Dropped()))
    trace.set_tracer_provider(provider)
    configured = _step_cost(args.steps, args.repeat)
    print(f"{'SDK, spans recorded and dropped':<34} {configured:>8.2f} us/step")


if __name__ == "__main__":
    main()
