"""Admission (G7): a call starts only while the lease has time left for the keeper to renew it."""

from __future__ import annotations

from leaseward.runtime.lifecycle import Event
from leaseward.runtime.machine.commands import AskProvider, CallTool, Command, Log
from leaseward.runtime.machine.core import MachineCore
from leaseward.runtime.machine.events import AdmissionCheck
from leaseward.runtime.machine.phases import (
    Admitting,
    Asking,
    Calling,
    ProviderTurn,
    Renewal,
    ToolTurn,
)
from leaseward.runtime.machine.state import WriteRef
from leaseward.runtime.messages import ProviderRequest
from leaseward.runtime.settlements import Settlement

__all__ = ["AdmissionSteps"]


class AdmissionSteps(MachineCore):
    """Whether the next call may start, and starting it."""

    __slots__ = ()

    def _admission(self, phase: Admitting, check: AdmissionCheck) -> tuple[Command, ...]:
        remaining = max(0.0, self.deadline - check.now)
        if not self.in_doubt and remaining >= self.admission_seconds:
            return self._admitted(phase.call, check.wall)
        if not phase.renewed:
            return self._send(Renewal(phase.call), ())
        if self.in_doubt:
            return self._not_admitted("the store has not answered whether the lease still holds")
        return self._not_admitted(
            f"the lease has {remaining:.1f} s left, less than the "
            f"{self.admission_seconds:.1f} s a call needs to be renewed in time"
        )

    def _not_admitted(self, error: str) -> tuple[Command, ...]:
        """The call did not start: the run goes back to the queue without spending a retry."""
        withdrawn = self._withdraw_unstarted()
        return (
            Log.of("warning", "call.not_admitted", error=error),
            *self._settle(Settlement(Event.RELEASE), withdrawn),
        )

    def _admitted(self, call: ProviderTurn | ToolTurn, wall: float) -> tuple[Command, ...]:
        agent = self.agent
        if isinstance(call, ProviderTurn):
            self.phase = Asking(started_at=wall)
            request = ProviderRequest(
                run_id=self.run_id,
                agent=agent.name,
                messages=self.conversation.messages,
                tools=agent.tool_specs,
                model_settings=agent.model_settings,
            )
            return (AskProvider(request, agent.provider_timeout_seconds),)
        protected = self.unstarted_intent is not None
        self.unstarted_intent = None
        base = call.base
        if protected:
            self.protecting = WriteRef(call.pending.call.name, call.pending.call.call_id)
        elif not call.needs_intent:
            # A read has no intent row, so its record carries when the call began.
            base = base.began(wall)
        turn = ToolTurn(
            call.pending,
            base,
            call.arguments,
            needs_intent=call.needs_intent,
            timeout_seconds=call.timeout_seconds,
            tool_effect=call.tool_effect,
        )
        self.phase = Calling(turn)
        pending_call = call.pending.call
        return (
            CallTool(
                tool=pending_call.name,
                call_id=pending_call.call_id,
                arguments=call.arguments,
                idempotency_key=call.pending.idempotency_key,
                effect=call.tool_effect,
                timeout_seconds=call.timeout_seconds,
                protected=protected,
            ),
        )
