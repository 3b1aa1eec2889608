"""The agent the simulated workers run: its tools, its scripted provider, and the
machines with a hole put back.

The RunMachine consults the agent for facts only (effects, argument schemas,
approval policies, timeouts); the simulated worker carries out the calls itself,
so the tools are never called and the provider's replies are made here.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from leaseward.runtime.agents import Agent, ScriptedProvider
from leaseward.runtime.commits import Stored, Unanswered
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.machine import (
    AdmissionCheck,
    Command,
    Committed,
    ReadBack,
    RunMachine,
)
from leaseward.runtime.machine.phases import ReadingBack
from leaseward.runtime.messages import ProviderReply, ProviderRequest, Role, ToolCall
from leaseward.runtime.tools import tool

from .scenario import APPROVAL_TIMEOUT, Call, Holes

__all__ = [
    "KeepsIntentOnStop",
    "ReadBackRenews",
    "SkipsAdmission",
    "TakesLostAnswerAsStored",
    "TrustsLateApprovals",
    "agent_for",
    "machine_for",
    "reply_to",
]


async def _act(what: str) -> str:
    raise AssertionError("the simulated worker makes the calls itself")


@functools.cache
def agent_for(calls: tuple[Call, ...]) -> Agent:
    """One agent per scenario, shared by every machine (and named by its calls when a
    machine's state is pickled for its digest)."""
    tools = [
        tool(
            name=call.name,
            effect=call.effect,
            requires_approval=call.needs_approval,
            approval_timeout_seconds=APPROVAL_TIMEOUT if call.needs_approval else None,
        )(_act)
        for call in calls
    ]
    return Agent("payer", ScriptedProvider([]), tools)


def reply_to(calls: tuple[Call, ...], request: ProviderRequest) -> ProviderReply:
    """Turn 1 asks for every call at once; any later turn replies finally."""
    turn = sum(1 for message in request.messages if message.role is Role.ASSISTANT)
    if turn:
        return ProviderReply(text="done")
    return ProviderReply(
        tool_calls=tuple(ToolCall(call.name, {"what": call.name}, call.call_id) for call in calls)
    )


# -- holes of the protocol, each put back in a machine of its own ---------------------------


@attrs.define(eq=False)
class SkipsAdmission(RunMachine):
    """(1) A call starts whatever its lease has left: a pause before it goes unnoticed."""

    def _admission(self, phase: Any, check: AdmissionCheck) -> tuple[Command, ...]:
        return self._admitted(phase.call, check.wall)


@attrs.define(eq=False)
class TakesLostAnswerAsStored(RunMachine):
    """(3) A commit whose answer was lost counts as stored, and as a renewal, unread."""

    def _committed(self, sending: Any, event: Committed) -> tuple[Command, ...]:
        if isinstance(event.outcome, Unanswered):
            event = Committed(Stored(cancel_requested=self.cancel_requested), event.sent_at)
        return super()._committed(sending, event)


@attrs.define(eq=False)
class ReadBackRenews(RunMachine):
    """(4) A read-back that finds the records stored is taken for a renewal from when
    the commit was sent, even when every record had been sent before."""

    read_back_sent_at: float = 0.0

    def _committed(self, sending: Any, event: Committed) -> tuple[Command, ...]:
        self.read_back_sent_at = event.sent_at
        if isinstance(event.outcome, Unanswered) and not sending.fresh:
            self.in_doubt = True
            self.phase = ReadingBack(sending, event.outcome)
            return (ReadBack(),)
        return super()._committed(sending, event)

    def _read_back(self, phase: Any, rows: Any) -> tuple[Command, ...]:
        journal = {row.seq: row for row in rows}
        if all(step.stored_in(journal.get(step.seq), self.epoch) for step in phase.sending.steps):
            stored = Stored(cancel_requested=self.cancel_requested)
            return self._sent(phase.sending, stored, answered=True, sent_at=self.read_back_sent_at)
        return super()._read_back(phase, rows)


@attrs.define(eq=False)
class TrustsLateApprovals(RunMachine):
    """(6) With the store that takes a decision after its request's expiry: a call
    approved late is executed (the kernel's own check of the decision's time, the
    second of the two that stop it, taken out)."""

    def _request(self, pending: Any) -> HumanRequest | None:
        request = super()._request(pending)
        if request is None or request.expires_at is None or request.decided_at is None:
            return request
        return attrs.evolve(request, decided_at=min(request.decided_at, request.expires_at))


@attrs.define(eq=False)
class KeepsIntentOnStop(RunMachine):
    """(8) A stop between an intent's commit and its call leaves the intent standing."""

    def _cancelled(self) -> tuple[Command, ...]:
        self.unstarted_intent = None
        return super()._cancelled()


def machine_for(holes: Holes) -> type[RunMachine]:
    """The real machine, or the copy of it with the protocol hole ``holes`` puts back."""
    for hole, machine in (
        (holes.skip_admission, SkipsAdmission),
        (holes.unanswered_as_stored, TakesLostAnswerAsStored),
        (holes.read_back_renews, ReadBackRenews),
        (holes.late_decisions, TrustsLateApprovals),
        (holes.keep_intent_on_stop, KeepsIntentOnStop),
    ):
        if hole:
            return machine
    return RunMachine
