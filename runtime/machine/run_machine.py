"""The run machine: one attempt of one run, driven event by event.

``start()`` and ``feed(event)`` are its entry points (what they return and what
answers it: ``commands``); the steps of each concern come from the classes it
combines, over the state in ``core``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from leaseward.runtime.agents import Agent
from leaseward.runtime.conversation import rebuild
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import Event, Reason, RecoveryPolicy, RunMode, StepKind
from leaseward.runtime.machine.admission import AdmissionSteps
from leaseward.runtime.machine.commands import CHECK_ADMISSION, Command, LoadJournal, Log
from leaseward.runtime.machine.committing import CommittingSteps
from leaseward.runtime.machine.events import (
    AdmissionCheck,
    Cancelled,
    Committed,
    DrainRequested,
    JournalLoaded,
    JournalRead,
    LeaseRenewed,
    LoadFailed,
    MachineEvent,
    ProviderReplied,
    ReadFailed,
    ToolReturned,
    UnexpectedEvent,
)
from leaseward.runtime.machine.gates import GateSteps
from leaseward.runtime.machine.phases import (
    Admitting,
    Asking,
    Calling,
    Idle,
    Loading,
    Phase,
    ProviderTurn,
    ReadingBack,
    Sending,
    Settling,
    Stopped,
)
from leaseward.runtime.machine.provider import ProviderSteps
from leaseward.runtime.machine.settling import SettlingSteps
from leaseward.runtime.machine.state import Conversation, Failure
from leaseward.runtime.machine.tool_calls import ToolCallSteps
from leaseward.runtime.runs import RunRecord
from leaseward.runtime.settlements import Settlement

__all__ = ["RunMachine"]


@attrs.define(eq=False)
class RunMachine(
    AdmissionSteps, ProviderSteps, GateSteps, ToolCallSteps, CommittingSteps, SettlingSteps
):
    """One attempt of one run: events in, commands out (see ``commands``)."""

    @classmethod
    def for_run(
        cls,
        run: RunRecord,
        agent: Agent,
        *,
        lease_seconds: float,
        admission_seconds: float,
        lease_deadline: float,
        policy: RecoveryPolicy,
    ) -> RunMachine:
        return cls(
            agent=agent,
            run_id=run.id,
            epoch=run.epoch,
            mode=run.mode,
            requeues=run.requeues,
            run_input=run.input,
            lease_seconds=lease_seconds,
            admission_seconds=admission_seconds,
            policy=policy,
            deadline=lease_deadline,
            cancel_requested=run.cancel_requested,
        )

    def start(self) -> tuple[Command, ...]:
        if not isinstance(self.phase, Idle):
            raise UnexpectedEvent("the machine has started already")
        if self.epoch == 1:
            # Epoch 1 is a run's first lease: nobody can have written its journal yet.
            return self._begin((), ())
        self.phase = Loading()
        return (LoadJournal(),)

    def feed(self, event: MachineEvent) -> tuple[Command, ...]:
        phase = self.phase
        answer = _ANSWERS.get((type(phase), type(event)))
        if answer is not None:
            try:
                # By name: a machine of a subclass answers with its own step.
                step: Callable[[Any, Any], tuple[Command, ...]] = getattr(self, answer)
                return step(phase, event)
            except UnexpectedEvent:
                raise
            except Exception as exc:
                return self._failed_to_record(exc)
        if isinstance(phase, Stopped):
            raise UnexpectedEvent(f"the attempt is over; {type(event).__name__} came after")
        if isinstance(event, LeaseRenewed):
            self.deadline = max(self.deadline, event.deadline)
            self.cancel_requested = self.cancel_requested or event.cancel_requested
            return ()
        if isinstance(event, DrainRequested):
            # Interactive runs are never released back to the queue, so they never drain.
            self.draining = self.mode is RunMode.QUEUED
            return ()
        if isinstance(event, Cancelled):
            return self._cancelled()
        try:
            return self._dispatch(phase, event)
        except UnexpectedEvent:
            raise
        except Exception as exc:
            return self._failed_to_record(exc)

    def _failed_to_record(self, exc: Exception) -> tuple[Command, ...]:
        """Something the model or a tool gave cannot be journaled (InvalidInput, a result
        encoder's error): the attempt fails, as any failure does."""
        if isinstance(self.phase, Sending) and isinstance(self.phase.purpose, Settling):
            raise exc
        return self._fail(Failure.of(exc))

    def _dispatch(self, phase: Phase, event: MachineEvent) -> tuple[Command, ...]:
        if isinstance(phase, Loading):
            if isinstance(event, JournalLoaded):
                return self._begin(event.steps, event.requests)
            if isinstance(event, LoadFailed):
                return self._fail(Failure.of(event.error))
        elif isinstance(phase, Admitting) and isinstance(event, AdmissionCheck):
            return self._admission(phase, event)
        elif isinstance(phase, Sending) and isinstance(event, Committed):
            return self._committed(phase, event)
        elif isinstance(phase, ReadingBack):
            if isinstance(event, JournalRead):
                return self._read_back(phase, event.steps)
            if isinstance(event, ReadFailed):
                return (
                    Log.of("warning", "commit.undecided", error=event.error),
                    *self._sent(phase.sending, phase.unanswered, answered=False, sent_at=0.0),
                )
        elif isinstance(phase, Asking):
            return self._provider_event(phase, event)
        elif isinstance(phase, Calling):
            return self._tool_event(phase, event)
        raise UnexpectedEvent(f"{type(event).__name__} does not answer {type(phase).__name__}")

    # -- the loop --------------------------------------------------------------------

    def _begin(
        self, steps: Sequence[StepInfo], requests: Sequence[HumanRequest]
    ) -> tuple[Command, ...]:
        self.requests = tuple(requests)
        if steps:
            newest = max(steps, key=lambda s: s.seq)
            self.newest = (
                newest.effect,
                newest.status if newest.kind is StepKind.TOOL else None,
            )
        rebuilt = rebuild(self.run_id, self.agent.instructions, self.run_input, steps)
        self.conversation = Conversation(
            rebuilt.messages,
            rebuilt.next_seq,
            rebuilt.provider_turns,
            rebuilt.pending,
            rebuilt.final_reply,
        )
        return self._next()

    def _next(self) -> tuple[Command, ...]:
        """At a step boundary: what the run does next."""
        self.protecting = None
        talk = self.conversation
        # A finished conversation completes even when a cancel or a drain arrived
        # meanwhile: the work is done and recorded.
        if talk.final is not None:
            return self._settle(
                Settlement(
                    Event.COMPLETE,
                    Reason.COMPLETED,
                    result_json=dump_json(talk.final.text, what="result"),
                )
            )
        if self.cancel_requested:
            return self._settle(Settlement(Event.CANCEL_RUNNING, Reason.CANCELLED))
        if self.draining:
            return self._settle(Settlement(Event.RELEASE))
        if talk.pending:
            return self._gate_turn(talk.pending)
        if talk.turns >= self.agent.max_steps:
            return self._settle(
                Settlement(
                    Event.FAIL,
                    Reason.MAX_STEPS,
                    error=f"the agent used its {self.agent.max_steps} provider steps "
                    "without finishing",
                )
            )
        self.phase = Admitting(ProviderTurn())
        return (CHECK_ADMISSION,)


# The commonest steps by the types of the phase and of the event that answers it: one
# look-up instead of a chain of type checks at every event. Any other pair (news
# between actions, a stopped machine, an event that answers nothing) goes through
# feed's checks in full.
_ANSWERS: dict[tuple[type, type], str] = {
    (Admitting, AdmissionCheck): "_admission",
    (Sending, Committed): "_committed",
    (Asking, ProviderReplied): "_provider_event",
    (Calling, ToolReturned): "_tool_event",
}
