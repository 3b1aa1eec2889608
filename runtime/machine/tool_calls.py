"""Tool calls: the step of each call, the intent before a write, and the call's outcome."""

from __future__ import annotations

from typing import Any

import msgspec

from leaseward.runtime.approvals import Gate, GateAction
from leaseward.runtime.conversation import tool_message
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import MAX_ARGUMENTS_BYTES, MAX_RESULT_BYTES, dump_json
from leaseward.runtime.errors import CallTimedOut, InvalidInput, StoreError
from leaseward.runtime.human_requests import Decision, HumanRequest
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import Event, Reason, StepKind, StepStatus
from leaseward.runtime.machine.commands import (
    AFTER_CALL,
    AFTER_INTENT,
    BEFORE_INTENT,
    CHECK_ADMISSION,
    Command,
    Log,
    Metric,
)
from leaseward.runtime.machine.core import CheckedArguments, MachineCore
from leaseward.runtime.machine.events import (
    CutOff,
    LeaseLost,
    MachineEvent,
    TimedOut,
    ToolFailed,
    ToolNotStarted,
    ToolRaised,
    ToolReturned,
    UnexpectedEvent,
)
from leaseward.runtime.machine.phases import (
    Admitting,
    Calling,
    Intent,
    Outcome,
    Raised,
    Soft,
    ToolTurn,
)
from leaseward.runtime.machine.state import Failure, bounded_error, describe
from leaseward.runtime.messages import ToolCall
from leaseward.runtime.settlements import Settlement
from leaseward.runtime.tools import BoundTool

__all__ = ["ToolCallSteps"]


class ToolCallSteps(MachineCore):
    """Making a call the model asked for, and recording how it went."""

    __slots__ = ()

    def _tool_step(
        self, gate: Gate | None, checked: CheckedArguments | None
    ) -> tuple[Command, ...]:
        """Make the next call the model asked for, or answer it as a person decided."""
        talk = self.conversation
        pending = talk.pending[0]
        call = pending.call
        open_attempt = pending.open_attempt
        request = self._request(pending)
        approved = request is not None and request.decision is Decision.APPROVED
        if open_attempt is not None and (
            open_attempt.effect is ToolEffect.NON_IDEMPOTENT_WRITE or approved
        ):
            # Before any other check: whatever the app now says about this tool (removed,
            # its schema changed), the journal says a non-idempotent call may have run.
            # An approved call's intent consumed its approval, whatever its effect: the
            # approval authorised one execution, and that one may have happened.
            self.conversation = msgspec.structs.replace(talk, pending=talk.pending[1:])
            return self._settle(
                Settlement(
                    Event.DEAD_LETTER,
                    Reason.INTERRUPTED_WRITE,
                    error=f"call {call.call_id} of {call.name} was interrupted at epoch "
                    f"{open_attempt.epoch}; its outcome is unknown",
                )
            )
        # The call leaves the pending ones and takes its seq, in one new Conversation.
        seq = talk.next_seq
        self.conversation = msgspec.structs.replace(
            talk, next_seq=seq + 1, pending=talk.pending[1:]
        )
        bound = self.agent.tools.get(call.name)
        effect = self.agent.effects.effect_for(call.name)
        arguments_json, rejection, checked_arguments = (
            checked if checked is not None else self._check_arguments(bound, call)
        )
        if open_attempt is not None and (
            bound is None or rejection is not None or effect is ToolEffect.NON_IDEMPOTENT_WRITE
        ):
            # An earlier attempt's write may have applied, and this app can no longer make
            # the call again under its key (its tool is gone or now refuses its arguments):
            # told of the error, the model would ask again under a new key, a second write.
            # Nor may it when its code now declares a second execution unsafe.
            if bound is None:
                why = "its tool is not in this app"
            elif rejection is not None:
                why = f"now {rejection}"
            else:
                why = f"its tool is now a {effect.value}"
            return self._settle(
                Settlement(
                    Event.DEAD_LETTER,
                    Reason.INTERRUPTED_WRITE,
                    error=f"call {call.call_id} of {call.name} was interrupted at epoch "
                    f"{open_attempt.epoch} and cannot be made again under its key ({why}); "
                    "its outcome is unknown",
                )
            )
        base = StepWrite(
            seq=seq,
            kind=StepKind.TOOL,
            status=StepStatus.STARTED,
            tool=call.name,
            call_id=call.call_id,
            effect=effect,
            idempotency_key=pending.idempotency_key,
            arguments_json=arguments_json,
            source_json=None if bound is None else bound.source_json,
        )
        if bound is None or rejection is not None:
            # Nothing is executed, so nothing needs an intent: the model gets the error.
            output = {"error": rejection}
            self._say(tool_message(call, output, is_error=True))
            failed = msgspec.structs.replace(
                base, status=StepStatus.FAILED, output_json=dump_json(output), error=rejection
            )
            return self._send(Soft(), (failed,))
        if gate is not None and gate.action in (GateAction.REFUSE, GateAction.ANSWER):
            return self._answer_without_call(call, base, gate)
        # An approved call always goes through an intent, even a read: the intent is
        # what consumes the approval, so that no later attempt can execute it again.
        approved_now = gate is not None and gate.request is not None
        turn = ToolTurn(
            pending,
            base,
            arguments=checked_arguments,
            needs_intent=effect.is_write or approved_now,
            timeout_seconds=bound.timeout_seconds,
            tool_effect=bound.effect,
        )
        if not turn.needs_intent:
            self.phase = Admitting(turn)
            return (BEFORE_INTENT, AFTER_INTENT, CHECK_ADMISSION)
        if pending.turn_seq in self.buffer.dropped_turns:
            # G2: stored alone, the intent would be ignored on resume, the model asked
            # again and the call maybe made twice. A retry asks for a turn that stays.
            return (
                BEFORE_INTENT,
                *self._fail(
                    Failure.of(
                        StoreError(
                            f"the provider turn that asked for {call.name} (call "
                            f"{call.call_id}) could not be recorded, so neither can the "
                            "call's intent"
                        )
                    )
                ),
            )
        self.before_intent = self.newest
        # Marked before it is sent: if the attempt ends before the call, with the
        # intent's commit answered or not, the settlement withdraws whatever of it was
        # stored, and the next attempt never takes a call that did not start for one
        # that may have run.
        self.unstarted_intent = base
        used = () if gate is None or gate.request is None else self._decision_used(gate.request)
        return (
            BEFORE_INTENT,
            *self._send(Intent(turn, used), (base,), after_pending=True),
        )

    def _answer_without_call(
        self, call: ToolCall, base: StepWrite, gate: Gate
    ) -> tuple[Command, ...]:
        """Record a person's answer, or the refusal of the call, as the call's result."""
        refused = gate.action is GateAction.REFUSE
        try:
            output_json = dump_json(
                gate.output, what=f"the result of {call.name}", limit=MAX_RESULT_BYTES
            )
            output = gate.output
        except InvalidInput as exc:
            output = {"error": exc.message}
            output_json = dump_json(output)
        self._say(tool_message(call, output, is_error=refused))
        step = msgspec.structs.replace(
            base,
            status=StepStatus.FAILED if refused else StepStatus.SUCCEEDED,
            output_json=output_json,
            error=gate.error,
        )
        used = () if gate.request is None else self._decision_used(gate.request)
        return self._send(Soft(after=used), (step,))

    def _check_arguments(self, bound: BoundTool | None, call: ToolCall) -> CheckedArguments:
        """The arguments' JSON text (None if they have none), why they are refused, and
        the keyword arguments the tool is called with: checked once, here, before any
        intent is recorded.

        Arguments the model sent as text that is not a JSON object are journaled
        as that text, a JSON string.
        """
        name = call.name
        unreadable = call.arguments_problem
        arguments: Any = dict(call.arguments) if unreadable is None else call.invalid_arguments
        try:
            arguments_json = dump_json(
                arguments, what=f"the arguments of {name}", limit=MAX_ARGUMENTS_BYTES
            )
        except InvalidInput as exc:
            return None, exc.message, {}
        if unreadable is not None:
            return arguments_json, f"the arguments of {name} could not be read: {unreadable}", {}
        if bound is None:
            known = ", ".join(sorted(t.name for t in self.agent.tools)) or "none"
            return arguments_json, f"unknown tool {name!r} (available: {known})", {}
        try:
            checked = bound.arguments.parse(arguments)
        except InvalidInput as exc:
            return arguments_json, f"invalid arguments for {name}: {exc.message}", {}
        return arguments_json, None, checked

    def _tool_event(self, phase: Calling, event: MachineEvent) -> tuple[Command, ...]:
        turn = phase.turn
        call = turn.pending.call
        if isinstance(event, ToolReturned):
            return (
                AFTER_CALL,
                *self._finish(turn, StepStatus.SUCCEEDED, event.result),
            )
        if isinstance(event, ToolFailed):
            # The model is told all of it, from the output; the error is for people.
            output = {"error": event.message}
            return (
                AFTER_CALL,
                *self._finish(turn, StepStatus.FAILED, output, bounded_error(event.message)),
            )
        if isinstance(event, TimedOut):
            words = f"{call.name} did not return within {turn.timeout_seconds:.1f} s"
            if turn.tool_effect.is_write:
                words += "; it may have applied"
            observed = Log.of(
                "warning", "tool.timed_out", tool=call.name, call_id=call.call_id, error=words
            )
            return (observed, *self._record_raised(turn, words, CallTimedOut(words)))
        if isinstance(event, ToolRaised):
            words = describe(event.error)
            # A bug in the tool, most likely: whoever fixes it needs the traceback.
            observed = Log(
                "error",
                "tool.raised",
                (("tool", call.name), ("call_id", call.call_id), ("error", words)),
                traceback=True,
            )
            return (observed, *self._record_raised(turn, words, event.error))
        if isinstance(event, ToolNotStarted):
            # Its request never left the process: the intent is withdrawn as for a call
            # that was not admitted, and the run is retried as after a lost connection.
            self.protecting = None
            if turn.needs_intent:
                self.unstarted_intent = turn.base
            return self._fail(Failure.of(event.error))
        if isinstance(event, CutOff):
            # Settled as the reaper would have, but before the lease ran out: if the
            # store takes it in time, the reason says what happened.
            return self._settle(self._recovered_from_interruption(event.reason))
        if isinstance(event, LeaseLost):
            return self._lease_lost()
        raise UnexpectedEvent(f"{type(event).__name__} does not answer a tool call")

    def _finish(
        self, turn: ToolTurn, status: StepStatus, output: Any, error: str | None = None
    ) -> tuple[Command, ...]:
        call = turn.pending.call
        bound = self.agent.tools.get(call.name)
        assert bound is not None, "only known tools are called"
        encoded = bound.encode_result(output, returned=status is StepStatus.SUCCEEDED)
        if encoded.refused is not None:
            # A read's result that cannot be recorded: the model is told of an error, and
            # the journal says the call failed, as it does when a tool raises ToolError.
            status, error = StepStatus.FAILED, bounded_error(encoded.refused)
        self._say(tool_message(call, encoded.value, is_error=status is StepStatus.FAILED))
        outcome = turn.base.ended(status, encoded.text, error, settles=turn.needs_intent)
        if turn.needs_intent:
            return self._send(Outcome(outcome), (outcome,))
        return self._send(Soft(), (outcome,))

    def _record_raised(self, turn: ToolTurn, words: str, error: Exception) -> tuple[Command, ...]:
        """Journal a call that raised or timed out, with what happened, then fail.

        A read's row is settled failed. A write's intent stays open, with the words
        beside it: the write may have applied before it raised, so only an operator
        can say whether it did (G2); recovery takes it for an interrupted write.
        """
        failure = Failure.of(error)
        if not turn.needs_intent:
            failed = msgspec.structs.replace(
                turn.base,
                status=StepStatus.FAILED,
                output_json=dump_json({"error": words}),
                error=words,
            )
            return self._send(Soft(then_fail=failure), (failed,))
        step = msgspec.structs.replace(turn.base, settles=True, error=words)
        return self._send(Raised(step, failure), (step,))

    def _decision_used(self, request: HumanRequest) -> tuple[Log | Metric, ...]:
        used: list[Log | Metric] = []
        if request.decision is not None and request.decided_at is not None:
            used.append(
                Metric(
                    "request_decided",
                    (request.decision, request.decided_at - request.requested_at),
                )
            )
        used.append(
            Log.of(
                "info",
                "request.used",
                call_id=request.call_id,
                tool=request.tool,
                decision=None if request.decision is None else request.decision.value,
                operator=request.operator,
            )
        )
        return tuple(used)
