"""Provider turns: the model's reply, recorded, or how asking for it failed."""

from __future__ import annotations

from leaseward.runtime.conversation import (
    assistant_message,
    normalize_reply,
    pending_calls,
    reply_to_json,
    with_unjournalable_arguments_refused,
)
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.errors import InvalidInput, ProviderError
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import StepKind, StepStatus
from leaseward.runtime.machine.commands import Command, Log
from leaseward.runtime.machine.core import MachineCore
from leaseward.runtime.machine.events import (
    CutOff,
    LeaseLost,
    MachineEvent,
    ProviderFailed,
    ProviderReplied,
    TimedOut,
    UnexpectedEvent,
)
from leaseward.runtime.machine.phases import Asking
from leaseward.runtime.machine.state import Conversation, Failure
from leaseward.runtime.messages import ProviderReply

__all__ = ["ProviderSteps"]


class ProviderSteps(MachineCore):
    """Answers to a provider call."""

    __slots__ = ()

    def _provider_event(self, phase: Asking, event: MachineEvent) -> tuple[Command, ...]:
        if isinstance(event, ProviderReplied):
            return self._replied(phase, event)
        if isinstance(event, ProviderFailed):
            return self._fail(Failure.of(event.error))
        if isinstance(event, TimedOut):
            timeout = self.agent.provider_timeout_seconds
            # A bare TimeoutError would leave the run's error saying nothing of what timed out.
            error = ProviderError(
                f"the provider call timed out (its timeout is {timeout:g} s)",
                failure_class=FailureClass.CONNECTION.value,
            )
            return self._fail(Failure.of(error))
        if isinstance(event, CutOff):
            return self._settle(self._recovered_from_interruption(event.reason))
        if isinstance(event, LeaseLost):
            return self._lease_lost()
        raise UnexpectedEvent(f"{type(event).__name__} does not answer a provider call")

    def _replied(self, phase: Asking, event: ProviderReplied) -> tuple[Command, ...]:
        reply = event.reply
        if not isinstance(reply, ProviderReply):
            raise InvalidInput(f"the provider returned {type(reply).__name__}, not ProviderReply")
        talk = self.conversation
        # The seq is taken with the turn's own Conversation below, in one value.
        seq = talk.next_seq
        reply = normalize_reply(reply, seq)
        usage = reply.usage
        observed: tuple[Command, ...] = ()
        if self.observing:
            observed = (
                Log.of(
                    "info",
                    "provider.replied",
                    seq=seq,
                    model=reply.model,
                    input_tokens=None if usage is None else usage.input_tokens,
                    output_tokens=None if usage is None else usage.output_tokens,
                    latency_ms=event.latency_ms,
                    stop_reason=reply.stop_reason,
                ),
            )
        try:
            output_json = dump_json(
                reply_to_json(reply, latency_ms=event.latency_ms), what="the provider reply"
            )
        except InvalidInput:
            # A custom provider's call arguments that are not JSON: that call is refused
            # to the model; anything else the reply holds still fails the run.
            reply = with_unjournalable_arguments_refused(reply)
            output_json = dump_json(
                reply_to_json(reply, latency_ms=event.latency_ms), what="the provider reply"
            )
        step = StepWrite(
            seq=seq,
            kind=StepKind.PROVIDER,
            status=StepStatus.SUCCEEDED,
            output_json=output_json,
            started_at=phase.started_at,
        )
        self.conversation = Conversation(
            (*talk.messages, assistant_message(reply)),
            seq + 1,
            talk.turns + 1,
            tuple(pending_calls(self.run_id, seq, reply)),
            None if reply.tool_calls else reply,
        )
        # Fail-soft (G5), the turn waits for the next record the run makes (the read's
        # result, the write's intent, the park or the settlement) and goes to the
        # journal in that one commit: a crash before it costs the turn, asked again.
        self.buffer = self.buffer.keep(step)
        return (*observed, *self._next())
