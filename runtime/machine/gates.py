"""Calls that wait for a person: parking the run with requests for approval or input."""

from __future__ import annotations

from collections.abc import Sequence

from leaseward.runtime.approvals import Gate, GateAction, gate_call
from leaseward.runtime.conversation import PendingCall
from leaseward.runtime.encoding import arguments_digest, dump_json
from leaseward.runtime.errors import StoreError
from leaseward.runtime.human_requests import NewRequest, RequestKind
from leaseward.runtime.machine.commands import Command
from leaseward.runtime.machine.core import CheckedArguments, MachineCore
from leaseward.runtime.settlements import Settlement

__all__ = ["GateSteps"]


class GateSteps(MachineCore):
    """What a person has to do with the next call, and parking the run for it."""

    __slots__ = ()

    def _gate(self, pending: PendingCall) -> tuple[Gate | None, CheckedArguments | None]:
        """What a person has to do with this call; None for a call nobody is asked about:
        one that cannot run (an unknown tool, refused arguments) or that an earlier
        attempt left open (recovery decides it, from its intent). With it, the check of
        the call's arguments, when it was made, so that the call is not checked again."""
        call = pending.call
        bound = self.agent.tools.get(call.name)
        if pending.open_attempt is not None or bound is None:
            return None, None
        checked = self._check_arguments(bound, call)
        if checked[1] is not None:
            return None, checked
        gate = gate_call(
            call.arguments,
            asks_human=bound.asks_human,
            needs_approval=bound.needs_approval(call.arguments),
            request=self._request(pending),
        )
        return gate, checked

    def _gate_turn(self, pending: Sequence[PendingCall]) -> tuple[Command, ...]:
        """Park the run if its next call must wait for a person, else make the call.

        Parking asks at once about every later call of the turn that needs the same
        kind of answer, so that a person sees them together and the run comes back
        once, when all are decided. Calls are still executed in the model's order.
        """
        gate, checked = self._gate(pending[0])
        if gate is None or gate.action is not GateAction.PARK or gate.kind is None:
            return self._tool_step(gate, checked)
        kind = gate.kind
        if pending[0].turn_seq in self.buffer.dropped_turns:
            # A request must stand on the turn that asked for it, as an intent must.
            raise StoreError(
                f"the provider turn that asked for {pending[0].call.name} could not be "
                "recorded, so neither can its request"
            )
        requests: list[NewRequest] = []
        for waiting in pending:
            later, _ = self._gate(waiting)
            if later is None or later.action is not GateAction.PARK or later.kind is not kind:
                continue
            if later.request is None:
                requests.append(self._new_request(waiting, kind))
        return self._settle(Settlement(kind.park_event, requests=tuple(requests)))

    def _new_request(self, pending: PendingCall, kind: RequestKind) -> NewRequest:
        call = pending.call
        bound = self.agent.tools.get(call.name)
        assert bound is not None, "only calls of known tools are gated"
        own = bound.approval_timeout_seconds
        timeout = own if own is not None else self.agent.approval_timeout_seconds
        return NewRequest(
            seq=pending.turn_seq,
            position=pending.index,
            call_id=call.call_id,
            kind=kind,
            tool=call.name,
            effect=bound.effect,
            arguments_json=dump_json(dict(call.arguments), what=f"the arguments of {call.name}"),
            arguments_digest=arguments_digest(call.arguments),
            # Input has no expiry: a question waits for its answer.
            timeout_seconds=timeout if kind is RequestKind.APPROVAL else None,
        )
