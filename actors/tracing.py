"""OpenTelemetry spans of a run's attempts, in the GenAI semantic conventions (v1.41.0).

A RunActor hands its ``RunTrace`` what it carries out: the calls it makes, the
answers they get and the run machine's log observations. The machine itself
knows nothing of tracing. Only the OpenTelemetry API is used: until a process
configures an SDK, every span is the API's non-recording one and the attributes
are never built.

Every attempt continues the trace of the caller of ``submit``, whose W3C
``traceparent`` the run stores, so the attempts of a run on any worker, before
and after a crash, share one trace id.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from contextvars import Token
from typing import Any

import attrs
from opentelemetry import context, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from leaseward.runtime import machine as m
from leaseward.runtime.agents import Agent
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.messages import ProviderReply, ProviderRequest
from leaseward.runtime.runs import RunRecord
from leaseward.runtime.settlements import Settlement

__all__ = [
    "SEMCONV_VERSION",
    "TRACER_NAME",
    "RunTrace",
    "TraceSettings",
    "current_traceparent",
]

#: The version of the OpenTelemetry semantic conventions whose GenAI names are used.
SEMCONV_VERSION = "1.41.0"
TRACER_NAME = "leaseward"

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACER = trace.get_tracer(
    TRACER_NAME, schema_url=f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
)

# The run machine's log events that an operator investigating a run wants on its
# trace, by the span event each becomes.
_EVENTS = {
    "audit.failed": "leaseward.audit_failed",
    "lease.lost": "leaseward.lease_lost",
    "run.parked": "leaseward.run_parked",
    "call.not_admitted": "leaseward.call_not_admitted",
    "commit.undecided": "leaseward.commit_undecided",
    "step.record_failed": "leaseward.step_record_failed",
    "step.dropped": "leaseward.step_dropped",
}
# The log fields an event carries: counts, sequence numbers, names and states. Never
# arguments, results, keys or tokens.
_EVENT_FIELDS = frozenset({"seq", "seqs", "tool", "count", "calls", "during", "state", "reason"})
_ERROR_CHARS = 500
# A model's name and its stop reason are the provider's words, of any length.
_NAME_CHARS = 200


@attrs.frozen
class TraceSettings:
    """What spans may hold beyond names, ids and states."""

    capture_content: bool = False
    """Put tool arguments and results on the tool spans: they may hold personal data."""
    content_chars: int = 2000
    """The most characters of arguments or a result a span holds."""


def current_traceparent() -> str:
    """The W3C traceparent of the active span, or, with none active (or no SDK), one of a
    new trace: every attempt of a run is then still in one trace."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    found = carrier.get("traceparent")
    if found is not None:
        return found
    # Sampled, so that a worker whose SDK samples by its parent records the run.
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _as_json(value: Any, limit: int) -> str:
    # What a tool returned need not be JSON as it is (keys that are not text, a cycle,
    # an object whose str raises): the journal encodes it its own way, and a span's copy
    # must never stop the run.
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except Exception:
        try:
            text = repr(value)
        except Exception:
            text = f"<{type(value).__name__}>"
    return _bounded(text, limit)


def _error_type(error: Exception) -> str:
    return type(error).__qualname__


class RunTrace:
    """The spans of one attempt of one run: ``invoke_agent {agent}``, and under it one
    ``chat {model}`` per provider turn and one ``execute_tool {tool}`` per tool call."""

    def __init__(
        self, run: RunRecord, agent: Agent, worker_id: str, settings: TraceSettings
    ) -> None:
        self._agent = agent
        self._settings = settings
        parent = (
            _PROPAGATOR.extract({"traceparent": run.traceparent})
            if run.traceparent is not None
            else None
        )
        self._attempt = _TRACER.start_span(
            f"invoke_agent {agent.name}", context=parent, kind=SpanKind.INTERNAL
        )
        self._recording = self._attempt.is_recording()
        self._context = trace.set_span_in_context(self._attempt)
        self._call: Span | None = None
        self._call_id: str | None = None
        # The provider turn being asked for, if one is: ended when it is answered.
        self._asking: Span | None = None
        self._intents: dict[str, int] = {}
        self._deciders: dict[str, str] = {}
        if self._recording:
            self._attempt.set_attributes(
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent.name,
                    "leaseward.run.id": run.id,
                    "leaseward.run.epoch": run.epoch,
                    "leaseward.run.mode": run.mode.value,
                    "leaseward.run.requeues": run.requeues,
                    "leaseward.worker.id": worker_id,
                    "leaseward.run.resumed": False,
                    "leaseward.run.journaled_steps": 0,
                }
            )

    # -- the attempt ------------------------------------------------------------------

    def loaded(self, steps: Sequence[StepInfo], requests: Sequence[HumanRequest]) -> None:
        """The journal an attempt resumes from: its steps are not traced again."""
        for request in requests:
            if request.decision is not None and request.operator is not None:
                self._deciders[request.call_id] = request.operator
        if not self._recording:
            return
        self._attempt.set_attributes(
            {"leaseward.run.resumed": bool(steps), "leaseward.run.journaled_steps": len(steps)}
        )
        for step in steps:
            if step.resolved_by is not None:
                self._attempt.add_event(
                    "leaseward.operator_resolution",
                    {
                        "leaseward.step.seq": step.seq,
                        "leaseward.tool.name": step.tool or "",
                        "leaseward.step.status": step.status.value,
                        "leaseward.resolved_by": step.resolved_by,
                    },
                )

    def ended(self, settlement: Settlement | None) -> None:
        """The attempt is over: with the settlement stored, or None if none was."""
        self.answered(None)
        self._end_call(outcome_recorded=False)
        if self._recording:
            if settlement is None:
                self._attempt.set_attribute("leaseward.run.settled", False)
            else:
                self._attempt.set_attributes(
                    {"leaseward.run.settled": True, "leaseward.run.state": settlement.target.value}
                )
                if settlement.reason is not None:
                    self._attempt.set_attribute("leaseward.run.reason", settlement.reason.value)
                if settlement.failure_class is not None:
                    failure = settlement.failure_class.value
                    self._attempt.set_attribute("error.type", failure)
                    self._attempt.set_status(
                        Status(StatusCode.ERROR, _bounded(settlement.error or "", _ERROR_CHARS))
                    )
        self._attempt.end()

    @property
    def recording(self) -> bool:
        """Whether this attempt's span records: what the run's observations feed."""
        return self._recording

    def observed(self, log: m.Log) -> None:
        """A log observation of the run machine."""
        if not self._recording:
            return
        fields = dict(log.fields)
        if log.event == "step.recorded":
            self._step_recorded(fields)
            return
        name = _EVENTS.get(log.event)
        if name is None:
            return
        span = self._call if self._call is not None else self._attempt
        if span.is_recording():
            attributes: dict[str, Any] = {
                f"leaseward.{key}": value
                for key, value in fields.items()
                if key in _EVENT_FIELDS and value is not None
            }
            if isinstance(fields.get("error"), str):
                attributes["leaseward.error"] = _bounded(fields["error"], _ERROR_CHARS)
            span.add_event(name, attributes)
        if log.event == "audit.failed":
            self._end_call(outcome_recorded=False)

    def _step_recorded(self, fields: Mapping[str, Any]) -> None:
        call_id = fields.get("call_id")
        if call_id is None:
            return
        if fields.get("status") == "started":
            self._intents[call_id] = fields["seq"]
        elif call_id == self._call_id:
            if self._call is not None:
                self._call.set_attribute("leaseward.step.seq", fields["seq"])
            self._end_call(outcome_recorded=True)

    # -- provider turns ---------------------------------------------------------------

    def asking(self, request: ProviderRequest) -> None:
        """A provider turn about to be asked for: its span is open until ``answered``."""
        self._end_call(outcome_recorded=False)
        if not self._recording:
            # With no SDK, or the run's trace not sampled, no child would record either.
            return
        provider = self._agent.provider
        defaults = getattr(provider, "defaults", None)
        model = (
            request.model_settings.model
            or getattr(defaults, "model", None)
            or getattr(provider, "model", None)
        )
        span = _TRACER.start_span(
            f"chat {model}" if model else "chat", context=self._context, kind=SpanKind.CLIENT
        )
        if span.is_recording():
            span.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": getattr(
                        provider, "provider_name", type(provider).__name__
                    ),
                }
            )
            if isinstance(model, str):
                span.set_attribute("gen_ai.request.model", model)
        self._asking = span

    def answered(self, event: m.MachineEvent | None) -> None:
        """The provider turn being asked for got ``event`` (None: the worker stopped it)."""
        span, self._asking = self._asking, None
        if span is None:
            return
        if span.is_recording():
            reply = event.reply if isinstance(event, m.ProviderReplied) else None
            if isinstance(reply, ProviderReply):
                if reply.model is not None:
                    span.set_attribute("gen_ai.response.model", _bounded(reply.model, _NAME_CHARS))
                if reply.usage is not None:
                    span.set_attributes(
                        {
                            "gen_ai.usage.input_tokens": reply.usage.input_tokens,
                            "gen_ai.usage.output_tokens": reply.usage.output_tokens,
                        }
                    )
                if reply.stop_reason is not None:
                    span.set_attribute(
                        "gen_ai.response.finish_reasons",
                        [_bounded(reply.stop_reason, _NAME_CHARS)],
                    )
            else:
                self._failed(span, event)
        span.end()

    def interrupted(self, event: m.MachineEvent) -> None:
        """The call in flight, a provider turn or a tool call, was stopped: ``event``
        says by what (its timeout, a lease lost or cut off)."""
        if self._asking is not None:
            self.answered(event)
        else:
            self.returned(event)

    def entered(self) -> Token[context.Context] | None:
        """Make the span of the call in flight, a provider turn or a tool call, the current
        one in this task until ``left``: the spans the call's own code starts (an MCP
        request, an instrumented HTTP client's) are then its children, and the
        traceparent that code sends on carries the run's trace."""
        span = self._call if self._call is not None else self._asking
        if span is None:
            return None
        return context.attach(trace.set_span_in_context(span, self._context))

    @staticmethod
    def left(token: Token[context.Context] | None) -> None:
        if token is not None:
            context.detach(token)

    # -- tool calls -------------------------------------------------------------------

    def calling(self, action: m.CallTool) -> None:
        """A tool call about to start. Its span stays open until its outcome is recorded."""
        self._end_call(outcome_recorded=False)
        if not self._recording:
            return
        span = _TRACER.start_span(
            f"execute_tool {action.tool}", context=self._context, kind=SpanKind.INTERNAL
        )
        self._call, self._call_id = span, action.call_id
        if not span.is_recording():
            return
        intent_seq = self._intents.get(action.call_id)
        span.set_attributes(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": action.tool,
                "gen_ai.tool.call.id": action.call_id,
                "gen_ai.tool.type": "function",
                "leaseward.tool.effect": action.effect.value,
                "leaseward.intent.recorded": intent_seq is not None,
            }
        )
        if intent_seq is not None:
            span.set_attribute("leaseward.step.seq", intent_seq)
        decider = self._deciders.get(action.call_id)
        if decider is not None:
            span.set_attribute("leaseward.approval.decided_by", decider)
        if self._settings.capture_content:
            span.set_attribute(
                "gen_ai.tool.call.arguments",
                _as_json(dict(action.arguments), self._settings.content_chars),
            )

    def returned(self, event: m.MachineEvent) -> None:
        """The tool call in flight got ``event``."""
        span = self._call
        if span is None or not span.is_recording():
            return
        if isinstance(event, m.ToolReturned):
            if self._settings.capture_content:
                span.set_attribute(
                    "gen_ai.tool.call.result",
                    _as_json(event.result, self._settings.content_chars),
                )
        else:
            self._failed(span, event)

    def _end_call(self, *, outcome_recorded: bool) -> None:
        span, self._call, self._call_id = self._call, None, None
        if span is None:
            return
        if span.is_recording():
            span.set_attribute("leaseward.outcome.recorded", outcome_recorded)
        span.end()

    @staticmethod
    def _failed(span: Span, event: m.MachineEvent | None) -> None:
        if isinstance(event, m.ProviderFailed | m.ToolRaised | m.ToolNotStarted):
            kind, error = _error_type(event.error), str(event.error)
        elif isinstance(event, m.ToolFailed):
            kind, error = "ToolError", event.message
        elif isinstance(event, m.CutOff):
            kind, error = "cut_off", event.reason
            span.add_event("leaseward.call_cut_off", {"leaseward.reason": event.reason})
        elif isinstance(event, m.TimedOut):
            kind, error = "timeout", "the call timed out"
        elif event is None:
            kind, error = "cancelled", "the worker stopped during the call"
        elif isinstance(event, m.LeaseLost):
            kind, error = "lease_lost", "the lease was lost during the call"
        else:
            kind, error = type(event).__name__, ""
        span.set_attribute("error.type", kind)
        span.set_status(Status(StatusCode.ERROR, _bounded(error, _ERROR_CHARS)))
