"""The run protocol, event sequence in, command sequence out, with no store and no clock."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leaseward.runtime.agents import Agent, ScriptedProvider
from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored, Unanswered
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import arguments_digest, load_json
from leaseward.runtime.errors import CallNotStarted, ProviderError
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.human_requests import Decision, HumanRequest, RequestKind
from leaseward.runtime.journal import StepInfo, StepWrite
from leaseward.runtime.lifecycle import (
    Event,
    Reason,
    RecoveryPolicy,
    RunMode,
    RunState,
    StepKind,
    StepStatus,
)
from leaseward.runtime.machine import (
    AdmissionCheck,
    AskProvider,
    CallTool,
    Cancelled,
    CheckAdmission,
    Command,
    Commit,
    Committed,
    CrashPoint,
    CutOff,
    DrainRequested,
    JournalLoaded,
    JournalRead,
    LeaseLost,
    LeaseRenewed,
    LoadJournal,
    Log,
    MachineEvent,
    Metric,
    Park,
    ProviderFailed,
    ProviderReplied,
    ReadBack,
    ReadFailed,
    RecordIntent,
    RecordOutcome,
    RecordSoft,
    Renew,
    RunMachine,
    Settle,
    Stop,
    TimedOut,
    ToolFailed,
    ToolNotStarted,
    ToolRaised,
    ToolReturned,
    UnexpectedEvent,
)
from leaseward.runtime.messages import ProviderReply, ToolCall
from leaseward.runtime.runs import RunRecord
from leaseward.runtime.tools import ToolContext, tool

EFFECTS = tuple(ToolEffect)
WRITES = (ToolEffect.IDEMPOTENT_WRITE, ToolEffect.NON_IDEMPOTENT_WRITE)
LEASE_SECONDS = 30.0
ADMISSION_SECONDS = 15.0
CALL = ToolCall("act", {"amount": 5}, "call-1")
RENEWED = Metric("lease_renewed")


def agent_for(
    effect: ToolEffect,
    *,
    approval: bool = False,
    asks_human: bool = False,
    replies: Sequence[ProviderReply] | None = None,
    max_steps: int = 5,
) -> Agent:
    @tool(name="act", effect=effect, timeout_seconds=7, requires_approval=approval)
    async def act(ctx: ToolContext, amount: int) -> dict[str, int]:
        raise AssertionError("the machine never calls a tool itself")

    tools: list[Any] = [PersonAsked(effect) if asks_human else act]
    script = replies if replies is not None else [ProviderReply(tool_calls=[CALL]), done()]
    return Agent("agent", ScriptedProvider(script), tools=tools, max_steps=max_steps)


class PersonAsked:
    """A tool named like the others whose calls a person answers."""

    name = "act"
    description = "Asks a person."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"amount": {"type": "integer"}},
        "required": ["amount"],
    }
    asks_human = True
    timeout_seconds = 7

    def __init__(self, effect: ToolEffect) -> None:
        self.effect = effect

    async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any:
        raise AssertionError("a person answers this call")


def done() -> ProviderReply:
    return ProviderReply(text="done")


def record(
    *, epoch: int = 1, mode: RunMode = RunMode.QUEUED, requeues: int = 0, cancel: bool = False
) -> RunRecord:
    return RunRecord(
        id="run-1",
        agent="agent",
        mode=mode,
        state=RunState.RUNNING,
        reason=None,
        failure_class=None,
        input="go",
        result=None,
        error=None,
        epoch=epoch,
        requeues=requeues,
        lease_owner="w",
        lease_expires_at=None,
        available_at=0.0,
        cancel_requested=cancel,
        created_at=0.0,
        updated_at=0.0,
        finished_at=None,
    )


def machine(
    effect: ToolEffect = ToolEffect.READ_ONLY,
    *,
    deadline: float = LEASE_SECONDS,
    run: RunRecord | None = None,
    **agent_options: Any,
) -> RunMachine:
    return RunMachine.for_run(
        run if run is not None else record(),
        agent_for(effect, **agent_options),
        lease_seconds=LEASE_SECONDS,
        admission_seconds=ADMISSION_SECONDS,
        lease_deadline=deadline,
        policy=RecoveryPolicy(max_requeues=3),
    )


def action(commands: Sequence[Command]) -> Command:
    """The one command of a batch that an event answers: the last."""
    *observations, last = commands
    assert all(isinstance(c, Log | Metric | CrashPoint) for c in observations)
    assert not isinstance(last, Log | Metric | CrashPoint)
    return last


def events(commands: Sequence[Command]) -> list[str]:
    return [c.event for c in commands if isinstance(c, Log)]


def names(commands: Sequence[Command]) -> list[str]:
    """The batch, as h11 shows a table: log events by name, other commands by type."""
    return [c.event if isinstance(c, Log) else type(c).__name__ for c in commands]


def stored(at: float = 0.0) -> Committed:
    return Committed(Stored(), sent_at=at)


def admit(m: RunMachine, now: float = 0.0) -> Command:
    return action(m.feed(AdmissionCheck(now=now, wall=1000.0 + now)))


def to_call(m: RunMachine) -> CallTool:
    """From the start to the tool call, every commit stored."""
    assert isinstance(action(m.start()), CheckAdmission)
    assert isinstance(admit(m), AskProvider)
    # The provider turn waits, pending, for the next commit the run makes.
    next_command = action(m.feed(ProviderReplied(ProviderReply(tool_calls=[CALL]))))
    if isinstance(next_command, RecordIntent):
        next_command = action(m.feed(stored()))
    assert isinstance(next_command, CheckAdmission)
    call = admit(m)
    assert isinstance(call, CallTool)
    return call


def to_intent(m: RunMachine) -> RecordIntent:
    m.start()
    admit(m)
    intent = action(m.feed(ProviderReplied(ProviderReply(tool_calls=[CALL]))))
    assert isinstance(intent, RecordIntent)
    return intent


def settled(commands: Sequence[Command]) -> Settle:
    last = action(commands)
    assert isinstance(last, Settle), names(commands)
    assert last.settlement is not None
    return last


def finish(m: RunMachine, commands: Sequence[Command]) -> Stop:
    """Store the settlement the commands end in and return the Stop."""
    settled(commands)
    stop = action(m.feed(stored()))
    assert isinstance(stop, Stop)
    return stop


# -- the happy path, per effect ---------------------------------------------------------


def test_a_read_is_called_with_no_intent_and_its_outcome_recorded_fail_soft() -> None:
    m = machine(ToolEffect.READ_ONLY)
    assert names(m.start()) == ["CheckAdmission"]
    ask = admit(m)
    assert isinstance(ask, AskProvider)
    assert ask.timeout_seconds == m.agent.provider_timeout_seconds
    assert [msg.content for msg in ask.request.messages] == ["go"]
    replied = m.feed(ProviderReplied(ProviderReply(tool_calls=[CALL]), latency_ms=3.0))
    # No commit of its own: the turn waits for the read's result.
    assert names(replied) == ["provider.replied", "CrashPoint", "CrashPoint", "CheckAdmission"]
    assert [c.name for c in replied if isinstance(c, CrashPoint)] == [
        "before_intent",
        "after_intent",
    ]
    [turn] = m.buffer.pending
    assert turn.kind is StepKind.PROVIDER and turn.started_at == 1000.0
    call = admit(m)
    assert isinstance(call, CallTool)
    assert call == CallTool(
        tool="act",
        call_id="call-1",
        arguments={"amount": 5},
        idempotency_key=call.idempotency_key,
        effect=ToolEffect.READ_ONLY,
        timeout_seconds=7.0,
        protected=False,
    )
    returned = m.feed(ToolReturned({"applied": 5}))
    assert names(returned)[0] == "CrashPoint"
    outcome = action(returned)
    assert isinstance(outcome, RecordSoft)
    assert outcome.lease_seconds == LEASE_SECONDS and outcome.settlement is None
    # The turn rides with the read's result, ahead of it: one commit for the step.
    assert outcome.steps[0] == turn
    [row] = outcome.steps[1:]
    assert row.status is StepStatus.SUCCEEDED and not row.settles
    assert row.started_at == 1000.0
    assert load_json(row.output_json) == {"applied": 5}
    # Sent with the whole lease left, the commit only fences: no renewal.
    assert outcome.renewal_at(0.0) == 0.0
    assert names(m.feed(stored())) == [
        "step.recorded",
        "Metric",
        "step.recorded",
        "Metric",
        "CheckAdmission",
    ]
    assert m.buffer.pending == ()
    assert isinstance(admit(m), AskProvider)
    end = settled(m.feed(ProviderReplied(done())))
    assert end.settlement is not None and end.settlement.event is Event.COMPLETE
    # The final turn goes with the settlement.
    assert [s.kind for s in end.steps] == [StepKind.PROVIDER]
    assert names(m.feed(stored())) == ["step.recorded", "Metric", "Metric", "run.settled", "Stop"]
    assert m.stopped


@pytest.mark.parametrize("effect", WRITES)
def test_a_write_is_called_only_after_its_intent_is_stored(effect: ToolEffect) -> None:
    m = machine(effect)
    intent = to_intent(m)
    # The turn that asked for the call rides with its intent, ahead of it.
    turn, row = intent.steps
    assert turn.kind is StepKind.PROVIDER and turn.seq < row.seq
    assert row.status is StepStatus.STARTED and row.effect is effect
    assert m.unstarted_intent == row
    after = m.feed(stored())
    assert names(after)[-3:] == ["Metric", "CrashPoint", "CheckAdmission"]
    assert after[-2] == CrashPoint("after_intent")
    call = admit(m)
    assert isinstance(call, CallTool) and call.protected and call.effect is effect
    assert m.protecting is not None and m.unstarted_intent is None
    outcome = action(m.feed(ToolReturned({"ok": True})))
    assert isinstance(outcome, RecordOutcome)
    [settles] = outcome.steps
    assert settles.settles and settles.status is StepStatus.SUCCEEDED and settles.seq == row.seq
    assert isinstance(action(m.feed(stored())), CheckAdmission)
    assert m.protecting is None


def test_the_crash_points_come_in_protocol_order() -> None:
    m = machine(ToolEffect.NON_IDEMPOTENT_WRITE)
    m.start()
    admit(m)
    points: list[str] = []
    commands = m.feed(ProviderReplied(ProviderReply(tool_calls=[CALL])))
    for event in (stored(), None, ToolReturned(1), stored(), None, ProviderReplied(done())):
        points += [c.name for c in commands if isinstance(c, CrashPoint)]
        commands = m.feed(event) if event is not None else (admit(m),)
    points += [c.name for c in commands if isinstance(c, CrashPoint)]
    commands = m.feed(stored())
    points += [c.name for c in commands if isinstance(c, CrashPoint)]
    assert points == ["before_intent", "after_intent", "after_call", "settle"]


# -- faults at every commit, per effect --------------------------------------------------


def commits_until_call(effect: ToolEffect) -> int:
    return 2 if effect.is_write else 1


@pytest.mark.parametrize("effect", EFFECTS)
@pytest.mark.parametrize("point", ["provider_turn", "intent", "outcome", "settle"])
def test_a_fence_at_any_commit_stops_the_attempt_with_nothing_more(
    effect: ToolEffect, point: str
) -> None:
    m = machine(effect)
    m.start()
    admit(m)
    commands = m.feed(ProviderReplied(ProviderReply(tool_calls=[CALL])))
    if point == "intent" and not effect.is_write:
        return
    # A turn has no commit of its own: a write's rides with the intent, sent at once; a
    # read's with the renewal its call needs first, here, or else with its result.
    if point == "provider_turn" and not effect.is_write:
        commands = m.feed(AdmissionCheck(now=20.0, wall=0.0))
        assert isinstance(action(commands), Renew)
    elif point in ("outcome", "settle"):
        if effect.is_write:
            m.feed(stored())
        admit(m)
        commands = m.feed(ToolReturned(1))
        if point == "settle":
            m.feed(stored())
            admit(m)
            commands = m.feed(ProviderReplied(done()))
    sent = action(commands)
    assert isinstance(sent, Commit)
    carries_turn = not (point == "outcome" and effect.is_write)
    assert (StepKind.PROVIDER in [s.kind for s in sent.steps]) is carries_turn
    fenced = m.feed(Committed(Fenced("taken"), sent_at=0.0))
    assert action(fenced) == Stop(None)
    assert "lease.lost" in events(fenced)
    assert m.stopped
    with pytest.raises(UnexpectedEvent):
        m.feed(stored())


@pytest.mark.parametrize("effect", WRITES)
@pytest.mark.parametrize("data_error", [False, True])
def test_a_refused_intent_fails_closed_and_is_withdrawn_all_the_same(
    effect: ToolEffect, data_error: bool
) -> None:
    m = machine(effect)
    to_intent(m)
    commands = m.feed(Committed(Refused("locked", data_error=data_error), sent_at=0.0))
    assert "run.attempt_failed" in events(commands)
    end = settled(commands)
    # The turn, refused with the intent, pending still; and the intent's withdrawal: a
    # store that committed it and answered "refused" must not leave it open, and
    # withdrawing one that is not there changes nothing.
    assert [(s.kind, s.withdraws) for s in end.steps] == [
        (StepKind.PROVIDER, False),
        (StepKind.TOOL, True),
    ]
    assert m.unstarted_intent is None
    assert end.settlement is not None
    assert end.settlement.event is Event.REQUEUE
    assert end.settlement.failure_class is FailureClass.CONNECTION
    assert not any(isinstance(c, CallTool) for c in commands)


@pytest.mark.parametrize("effect", WRITES)
def test_an_unanswered_intent_read_back_as_stored_still_needs_an_answered_renewal(
    effect: ToolEffect,
) -> None:
    m = machine(effect)
    intent = to_intent(m)
    assert action(m.feed(Committed(Unanswered("lost"), sent_at=0.0))) == ReadBack()
    assert m.in_doubt
    rows = tuple(row_of(step, epoch=1) for step in intent.steps)
    commands = m.feed(JournalRead(rows))
    assert "commit.stored" in events(commands)
    assert "lease.renewed" not in events(commands)
    assert isinstance(action(commands), CheckAdmission)
    assert m.deadline == LEASE_SECONDS
    renew = admit(m)
    assert isinstance(renew, Renew) and renew.steps == ()
    assert isinstance(action(m.feed(stored(at=5.0))), CheckAdmission)
    assert not m.in_doubt and m.deadline == 5.0 + LEASE_SECONDS
    assert isinstance(admit(m, now=5.0), CallTool)


@pytest.mark.parametrize("effect", WRITES)
def test_an_unanswered_renewal_admits_no_call(effect: ToolEffect) -> None:
    m = machine(effect)
    intent = to_intent(m)
    m.feed(Committed(Unanswered("lost"), sent_at=0.0))
    m.feed(JournalRead(tuple(row_of(step, epoch=1) for step in intent.steps)))
    assert isinstance(admit(m), Renew)
    commands = m.feed(Committed(Unanswered("lost again"), sent_at=1.0))
    assert "commit.undecided" in events(commands)
    assert "call.not_admitted" in events(commands)
    end = settled(commands)
    assert end.settlement is not None and end.settlement.event is Event.RELEASE
    # The intent that never started is withdrawn with the release.
    assert [s.withdraws for s in end.steps] == [True]


@pytest.mark.parametrize("effect", WRITES)
def test_an_unanswered_intent_read_back_as_missing_fails_closed(effect: ToolEffect) -> None:
    m = machine(effect)
    to_intent(m)
    m.feed(Committed(Unanswered("lost"), sent_at=0.0))
    commands = m.feed(JournalRead(()))
    assert events(commands)[:2] == ["commit.not_stored", "run.attempt_failed"]
    assert not any(isinstance(c, CallTool) for c in commands)
    # The turn read back as missing is sent again, and the intent withdrawn: the read
    # found none, and withdrawing one that is not there changes nothing.
    assert [(s.kind, s.withdraws) for s in settled(commands).steps] == [
        (StepKind.PROVIDER, False),
        (StepKind.TOOL, True),
    ]


@pytest.mark.parametrize("effect", WRITES)
def test_an_undecided_intent_is_withdrawn_with_the_settlement(effect: ToolEffect) -> None:
    m = machine(effect)
    intent = to_intent(m)
    m.feed(Committed(Unanswered("lost"), sent_at=0.0))
    commands = m.feed(ReadFailed("the read failed too"))
    assert events(commands)[:2] == ["commit.undecided", "run.attempt_failed"]
    end = settled(commands)
    # The turn, maybe stored with the intent, is sent again; the intent is withdrawn.
    assert [(s.kind, s.withdraws) for s in end.steps] == [
        (StepKind.PROVIDER, False),
        (StepKind.TOOL, True),
    ]
    assert [s.seq for s in end.steps] == [s.seq for s in intent.steps]


@pytest.mark.parametrize("effect", WRITES)
@pytest.mark.parametrize("data_error", [False, True])
def test_a_write_whose_outcome_is_not_stored_fails_the_run_audit_failed(
    effect: ToolEffect, data_error: bool
) -> None:
    m = machine(effect)
    to_call(m)
    m.feed(ToolReturned(1))
    commands = m.feed(Committed(Refused("disk", data_error=data_error), sent_at=0.0))
    assert "audit.failed" in events(commands)
    assert Metric("audit_failed") in commands
    settlement = settled(commands).settlement
    assert settlement is not None
    if effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        assert (settlement.event, settlement.reason) == (
            Event.DEAD_LETTER,
            Reason.INTERRUPTED_WRITE,
        )
    else:
        assert (settlement.event, settlement.reason) == (Event.FAIL, Reason.AUDIT_FAILED)


def test_a_read_outcome_not_stored_stays_pending_and_goes_with_the_next_commit() -> None:
    m = machine(ToolEffect.READ_ONLY)
    to_call(m)
    outcome = action(m.feed(ToolReturned(1)))
    assert isinstance(outcome, RecordSoft)
    turn, read = outcome.steps
    # Not stored, it is sent again without the turn that rode with it, then given up on.
    deferred = m.feed(Committed(Refused("locked"), sent_at=0.0))
    assert events(deferred) == ["step.deferred"]
    alone = action(deferred)
    assert isinstance(alone, RecordSoft) and alone.steps == (read,)
    commands = m.feed(Committed(Refused("locked"), sent_at=0.0))
    assert "step.record_failed" in events(commands)
    assert m.buffer.pending == (turn, read)
    assert isinstance(action(commands), CheckAdmission)
    admit(m)
    end = settled(m.feed(ProviderReplied(done())))
    # Sent behind the pending records, with the final turn.
    assert end.steps[:2] == (turn, read) and len(end.steps) == 3
    assert end.steps[2].kind is StepKind.PROVIDER
    m.feed(stored())
    assert not m.buffer.pending


def test_a_pending_record_refused_for_its_data_is_dropped_after_the_rest_goes_in_alone() -> None:
    m = machine(ToolEffect.READ_ONLY)
    to_call(m)
    both = action(m.feed(ToolReturned(1)))
    # The pending record is the turn that asked for the read, riding with its result.
    assert isinstance(both, RecordSoft)
    assert [s.kind for s in both.steps] == [StepKind.PROVIDER, StepKind.TOOL]
    deferred = m.feed(Committed(Refused("bad bytes", data_error=True), sent_at=0.0))
    assert events(deferred) == ["step.deferred"]
    alone = action(deferred)
    assert isinstance(alone, RecordSoft) and alone.steps == both.steps[1:]
    commands = m.feed(stored())
    [dropped] = [c for c in commands if isinstance(c, Log) and c.event == "step.dropped"]
    assert dict(dropped.fields)["seqs"] == [both.steps[0].seq]
    assert m.buffer.pending == ()
    assert m.buffer.dropped_turns == {both.steps[0].seq}
    assert isinstance(action(commands), CheckAdmission)
    admit(m)
    end = settled(m.feed(ProviderReplied(done())))
    assert [s.kind for s in end.steps] == [StepKind.PROVIDER]


def test_a_settle_that_parks_never_leaves_the_asking_turn_behind() -> None:
    m = machine(ToolEffect.READ_ONLY, approval=True)
    m.start()
    admit(m)
    park = action(m.feed(ProviderReplied(ProviderReply(tool_calls=[CALL]))))
    assert isinstance(park, Park) and [s.kind for s in park.steps] == [StepKind.PROVIDER]
    commands = m.feed(Committed(Refused("locked"), sent_at=0.0))
    assert "step.deferred" not in events(commands)
    assert names(commands)[-2:] == ["run.settle_failed", "Stop"]


def test_a_provider_turn_refused_for_its_data_is_dropped_and_its_writes_refused() -> None:
    m = machine(ToolEffect.NON_IDEMPOTENT_WRITE)
    intent = to_intent(m)
    assert [s.kind for s in intent.steps] == [StepKind.PROVIDER, StepKind.TOOL]
    # The intent is refused with the turn it rides with (G3): the run fails closed.
    commands = m.feed(Committed(Refused("too big", data_error=True), sent_at=0.0))
    assert "run.attempt_failed" in events(commands)
    assert not any(isinstance(c, CallTool) for c in commands)
    end = settled(commands)
    assert [(s.kind, s.withdraws) for s in end.steps] == [
        (StepKind.PROVIDER, False),
        (StepKind.TOOL, True),
    ]
    assert end.settlement is not None and end.settlement.event is Event.REQUEUE
    # The settlement goes in without the turn, which is then dropped.
    alone = settled(m.feed(Committed(Refused("too big", data_error=True), sent_at=0.0)))
    assert [(s.kind, s.withdraws) for s in alone.steps] == [(StepKind.TOOL, True)]
    stop = m.feed(stored())
    assert "step.dropped" in events(stop)
    assert 0 in m.buffer.dropped_turns
    assert action(stop) == Stop(alone.settlement)


# -- a provider turn rides with the next commit ------------------------------------------


def reply_for(case: str) -> ProviderReply:
    return done() if case == "settlement" else ProviderReply(tool_calls=[CALL])


def carrier_of(m: RunMachine, case: str) -> Commit:
    """The first commit after the reply: the one that carries the turn."""
    commands = m.feed(ProviderReplied(reply_for(case)))
    assert "provider.replied" in events(commands)
    if case == "read_result":
        assert isinstance(action(commands), CheckAdmission)
        assert isinstance(admit(m), CallTool)
        commands = m.feed(ToolReturned(1))
    elif case == "renewal":
        assert isinstance(action(commands), CheckAdmission)
        commands = m.feed(AdmissionCheck(now=20.0, wall=0.0))
    sent = action(commands)
    assert isinstance(sent, Commit)
    return sent


# The tool's effect, whether its calls need an approval, and the commit the turn rides with.
CARRIERS: dict[str, tuple[ToolEffect, bool, type[Commit]]] = {
    "read_result": (ToolEffect.READ_ONLY, False, RecordSoft),
    "renewal": (ToolEffect.READ_ONLY, False, Renew),
    "intent": (ToolEffect.NON_IDEMPOTENT_WRITE, False, RecordIntent),
    "settlement": (ToolEffect.READ_ONLY, False, Settle),
    "park": (ToolEffect.NON_IDEMPOTENT_WRITE, True, Park),
}


@pytest.mark.parametrize("case", list(CARRIERS))
def test_a_provider_turn_rides_with_the_next_commit_the_run_makes(case: str) -> None:
    effect, approval, carrier = CARRIERS[case]
    m = machine(effect, approval=approval)
    m.start()
    admit(m)
    sent = carrier_of(m, case)
    assert type(sent) is carrier
    turn = sent.steps[0]
    assert turn.kind is StepKind.PROVIDER and turn.seq == 0
    assert m.buffer.pending == (turn,)
    # Stored only with what the run itself needs stored: the turn goes in or not with it.
    assert [s.kind for s in sent.steps[1:]] == (
        [StepKind.TOOL] if case in ("read_result", "intent") else []
    )
    answered = m.feed(stored())
    recorded = next(c for c in answered if isinstance(c, Log) and c.event == "step.recorded")
    assert dict(recorded.fields)["seq"] == 0 and dict(recorded.fields)["kind"] == "provider"
    assert not m.buffer.pending


@pytest.mark.parametrize("case", ["read_result", "renewal", "settlement"])
def test_a_commit_the_turn_rides_with_is_sent_again_without_it(case: str) -> None:
    effect, approval, _ = CARRIERS[case]
    m = machine(effect, approval=approval)
    m.start()
    admit(m)
    sent = carrier_of(m, case)
    deferred = m.feed(Committed(Refused("locked"), sent_at=0.0))
    assert events(deferred) == ["step.deferred"]
    again = action(deferred)
    assert type(again) is type(sent) and again.steps == sent.steps[1:]
    answered = m.feed(stored())
    if case == "settlement":
        # The run is over without it: given up on, logged (G5).
        assert "step.dropped" in events(answered)
        assert m.buffer.pending == ()
        return
    # Fail-soft (G5): the run goes on, the turn still pending for its next commit.
    assert [s.kind for s in m.buffer.pending] == [StepKind.PROVIDER]
    assert "step.dropped" not in events(answered)


@pytest.mark.parametrize("case", ["intent", "park"])
def test_a_commit_that_must_carry_the_turn_is_never_sent_without_it(case: str) -> None:
    effect, approval, _ = CARRIERS[case]
    m = machine(effect, approval=approval)
    m.start()
    admit(m)
    carrier_of(m, case)
    commands = m.feed(Committed(Refused("locked"), sent_at=0.0))
    assert "step.deferred" not in events(commands)
    assert not any(isinstance(c, CallTool) for c in commands)
    if case == "park":
        assert names(commands)[-2:] == ["run.settle_failed", "Stop"]
    else:
        # The intent is not stored, so the write is not called (G3); it is withdrawn
        # all the same, in case the store committed it and answered otherwise.
        assert "run.attempt_failed" in events(commands)
        assert [(s.kind, s.withdraws) for s in settled(commands).steps] == [
            (StepKind.PROVIDER, False),
            (StepKind.TOOL, True),
        ]


@pytest.mark.parametrize("how", ["lease_lost", "cut_off", "cancelled", "fenced"])
def test_an_attempt_that_ends_before_the_turns_commit_never_stores_it_alone(how: str) -> None:
    m = machine(ToolEffect.READ_ONLY)
    to_call(m)
    [turn] = m.buffer.pending
    if how == "fenced":
        riding = action(m.feed(ToolReturned(1)))
        assert isinstance(riding, RecordSoft) and riding.steps[0] == turn
        commands = m.feed(Committed(Fenced("taken"), sent_at=0.0))
    else:
        ending: dict[str, MachineEvent] = {
            "lease_lost": LeaseLost(),
            "cut_off": CutOff("lease"),
            "cancelled": Cancelled(),
        }
        commands = m.feed(ending[how])
    if how in ("lease_lost", "fenced"):
        # This worker may write nothing more (G6): the turn is lost, the next attempt
        # asks the provider again.
        assert action(commands) == Stop(None)
        assert not any(isinstance(c, Commit) for c in commands)
        assert m.buffer.pending == (turn,)
        return
    # The attempt settles, and the turn still pending goes with its settlement.
    end = settled(commands)
    assert end.steps == (turn,)
    assert end.settlement is not None
    expected = Event.RELEASE if how == "cancelled" else Event.REQUEUE
    assert end.settlement.event is expected


def test_a_turn_dropped_with_a_reads_result_refuses_the_writes_it_asked_for() -> None:
    m = RunMachine.for_run(
        record(),
        three_tool_agent(),
        lease_seconds=LEASE_SECONDS,
        admission_seconds=ADMISSION_SECONDS,
        lease_deadline=LEASE_SECONDS,
        policy=RecoveryPolicy(max_requeues=3),
    )
    m.start()
    admit(m)
    m.feed(ProviderReplied(ProviderReply(tool_calls=CALLS)))
    call = admit(m)
    assert isinstance(call, CallTool) and call.tool == "read"
    both = action(m.feed(ToolReturned(1)))
    assert isinstance(both, RecordSoft)
    assert [s.kind for s in both.steps] == [StepKind.PROVIDER, StepKind.TOOL]
    m.feed(Committed(Refused("too big", data_error=True), sent_at=0.0))
    commands = m.feed(stored())
    assert "step.dropped" in events(commands)
    # G2: the write's intent would stand on no turn in the journal; it is never sent.
    assert not any(isinstance(c, RecordIntent | CallTool) for c in commands)
    assert CrashPoint("before_intent") in commands
    assert "run.attempt_failed" in events(commands)
    assert settled(commands).steps == ()


# -- a call that does not return ---------------------------------------------------------


@pytest.mark.parametrize("effect", EFFECTS)
def test_a_tool_error_is_the_models_to_see(effect: ToolEffect) -> None:
    m = machine(effect)
    to_call(m)
    outcome = action(m.feed(ToolFailed("no such account")))
    assert isinstance(outcome, RecordOutcome if effect.is_write else RecordSoft)
    # A read's turn rides with its result; a write's went with its intent.
    *turn, row = outcome.steps
    assert [s.kind for s in turn] == ([] if effect.is_write else [StepKind.PROVIDER])
    assert row.status is StepStatus.FAILED and row.error == "no such account"
    assert isinstance(action(m.feed(stored())), CheckAdmission)


@pytest.mark.parametrize("effect", EFFECTS)
@pytest.mark.parametrize("how", ["raised", "timed_out"])
def test_a_call_that_raises_or_times_out_leaves_a_writes_intent_open(
    effect: ToolEffect, how: str
) -> None:
    m = machine(effect)
    to_call(m)
    event: MachineEvent = ToolRaised(ZeroDivisionError("boom")) if how == "raised" else TimedOut()
    commands = m.feed(event)
    logged = next(c for c in commands if isinstance(c, Log))
    assert logged.event == ("tool.raised" if how == "raised" else "tool.timed_out")
    assert logged.traceback is (how == "raised")
    record_command = action(commands)
    assert isinstance(record_command, RecordOutcome if effect.is_write else RecordSoft)
    *turn, row = record_command.steps
    assert [s.kind for s in turn] == ([] if effect.is_write else [StepKind.PROVIDER])
    if effect.is_write:
        assert row.status is StepStatus.STARTED and row.settles
    else:
        assert row.status is StepStatus.FAILED
    assert row.error is not None
    if how == "timed_out":
        assert ("may have applied" in row.error) is effect.is_write
    failed = m.feed(stored())
    assert "run.attempt_failed" in events(failed)
    settlement = settled(failed).settlement
    assert settlement is not None
    if effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        assert settlement.reason is Reason.INTERRUPTED_WRITE
    elif how == "raised":
        assert settlement.reason is Reason.NOT_RETRYABLE
    else:
        assert settlement.event is Event.REQUEUE


@pytest.mark.parametrize("effect", EFFECTS)
def test_a_call_that_never_started_withdraws_its_intent_and_is_retried(
    effect: ToolEffect,
) -> None:
    m = machine(effect)
    to_call(m)
    commands = m.feed(ToolNotStarted(CallNotStarted("the server could not be reached")))
    assert "run.attempt_failed" in events(commands)
    end = settled(commands)
    # A read wrote nothing before its call, and its turn, pending, goes with the
    # settlement; a write's intent is taken back.
    assert [(s.withdraws, s.status) for s in end.steps] == (
        [(True, StepStatus.STARTED)] if effect.is_write else [(False, StepStatus.SUCCEEDED)]
    )
    assert end.settlement is not None and end.settlement.event is Event.REQUEUE
    assert m.protecting is None


@pytest.mark.parametrize("effect", EFFECTS)
def test_a_cut_off_call_settles_as_the_reaper_would(effect: ToolEffect) -> None:
    m = machine(effect)
    to_call(m)
    settlement = settled(m.feed(CutOff("the lease could not be renewed"))).settlement
    assert settlement is not None
    if effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        assert (settlement.event, settlement.reason) == (
            Event.DEAD_LETTER,
            Reason.INTERRUPTED_WRITE,
        )
    else:
        assert settlement.event is Event.REQUEUE and settlement.delay_seconds == 0.0
    assert m.protecting is None


@pytest.mark.parametrize("effect", EFFECTS)
def test_a_lease_lost_during_a_call_stops_without_settling(effect: ToolEffect) -> None:
    m = machine(effect)
    to_call(m)
    commands = m.feed(LeaseLost())
    assert names(commands) == ["lease.lost", "Stop"]


def test_the_provider_timing_out_fails_the_attempt_as_a_connection_failure() -> None:
    m = machine()
    m.start()
    admit(m)
    settlement = settled(m.feed(TimedOut())).settlement
    assert settlement is not None
    assert settlement.failure_class is FailureClass.CONNECTION
    assert settlement.error is not None and "timed out" in settlement.error


def test_a_provider_error_asking_to_wait_requeues_after_that_wait() -> None:
    m = machine()
    m.start()
    admit(m)
    error = ProviderError("slow down", failure_class="rate_limit", retry_after_seconds=12.0)
    settlement = settled(m.feed(ProviderFailed(error))).settlement
    assert settlement is not None and settlement.delay_seconds == 12.0


def test_a_reply_that_is_not_a_provider_reply_fails_the_attempt() -> None:
    m = machine()
    m.start()
    admit(m)
    settlement = settled(m.feed(ProviderReplied("text"))).settlement
    assert settlement is not None and settlement.reason is Reason.NOT_RETRYABLE


# -- cancels and drains ------------------------------------------------------------------


@pytest.mark.parametrize("effect", WRITES)
def test_a_cancel_while_the_intent_is_in_flight_withdraws_it(effect: ToolEffect) -> None:
    m = machine(effect)
    intent = to_intent(m)
    end = settled(m.feed(Cancelled()))
    assert end.settlement is not None and end.settlement.event is Event.RELEASE
    # The turn in flight with the intent is sent again; the intent is withdrawn.
    assert [(s.kind, s.withdraws) for s in end.steps] == [
        (StepKind.PROVIDER, False),
        (StepKind.TOOL, True),
    ]
    assert [s.seq for s in end.steps] == [s.seq for s in intent.steps]


@pytest.mark.parametrize("effect", WRITES)
def test_a_cancel_before_admission_withdraws_the_stored_intent(effect: ToolEffect) -> None:
    m = machine(effect)
    to_intent(m)
    m.feed(stored())
    end = settled(m.feed(Cancelled()))
    assert end.settlement is not None and end.settlement.event is Event.RELEASE
    assert [s.withdraws for s in end.steps] == [True]


@pytest.mark.parametrize("effect", EFFECTS)
def test_a_cancel_that_reaches_a_call_settles_as_interrupted(effect: ToolEffect) -> None:
    m = machine(effect)
    to_call(m)
    end = settled(m.feed(Cancelled()))
    # Nothing withdrawn; a read's turn, still pending, goes with the settlement.
    assert [s.kind for s in end.steps] == ([] if effect.is_write else [StepKind.PROVIDER])
    settlement = end.settlement
    assert settlement is not None
    if effect.is_write:
        expected = Event.DEAD_LETTER if effect is ToolEffect.NON_IDEMPOTENT_WRITE else Event.REQUEUE
        assert settlement.event is expected
    else:
        assert settlement.event is Event.RELEASE


def test_a_cancel_during_the_settle_abandons_it() -> None:
    m = machine()
    m.start()
    admit(m)
    settled(m.feed(ProviderReplied(done())))
    assert m.feed(Cancelled()) == (Stop(None),)


def test_a_drain_releases_the_run_at_the_next_boundary_but_not_an_interactive_one() -> None:
    m = machine()
    to_call(m)
    assert m.feed(DrainRequested()) == ()
    m.feed(ToolReturned(1))
    settlement = settled(m.feed(stored())).settlement
    assert settlement is not None and settlement.event is Event.RELEASE

    interactive = machine(run=record(mode=RunMode.INTERACTIVE))
    to_call(interactive)
    interactive.feed(DrainRequested())
    interactive.feed(ToolReturned(1))
    assert isinstance(action(interactive.feed(stored())), CheckAdmission)


def test_a_cancel_requested_is_seen_at_the_next_boundary() -> None:
    m = machine()
    to_call(m)
    m.feed(ToolReturned(1))
    settlement = settled(m.feed(Committed(Stored(cancel_requested=True), 0.0))).settlement
    assert settlement is not None and settlement.event is Event.CANCEL_RUNNING


def test_a_cancel_requested_before_the_claim_asks_nothing() -> None:
    m = machine(run=record(cancel=True))
    settlement = settled(m.start()).settlement
    assert settlement is not None and settlement.event is Event.CANCEL_RUNNING


# -- admission (G7) ----------------------------------------------------------------------


def test_a_lease_too_short_for_a_call_is_renewed_first() -> None:
    m = machine(ToolEffect.READ_ONLY)
    m.start()
    renew = admit(m, now=20.0)
    assert isinstance(renew, Renew) and renew.lease_seconds == LEASE_SECONDS
    assert isinstance(action(m.feed(stored(at=20.0))), CheckAdmission)
    assert isinstance(admit(m, now=20.5), AskProvider)


def test_a_renewal_that_came_too_late_admits_no_call() -> None:
    m = machine(ToolEffect.READ_ONLY)
    m.start()
    admit(m, now=20.0)
    m.feed(stored(at=0.0))
    commands = m.feed(AdmissionCheck(now=20.0, wall=0.0))
    assert "call.not_admitted" in events(commands)
    settlement = settled(commands).settlement
    assert settlement is not None and settlement.event is Event.RELEASE


def test_a_refused_renewal_admits_no_call() -> None:
    m = machine(ToolEffect.READ_ONLY)
    m.start()
    admit(m, now=20.0)
    commands = m.feed(Committed(Refused("locked"), sent_at=20.0))
    [log] = [c for c in commands if isinstance(c, Log) and c.event == "call.not_admitted"]
    assert "could not be renewed" in dict(log.fields)["error"]


def test_a_keeper_renewal_extends_the_lease() -> None:
    m = machine(ToolEffect.READ_ONLY)
    to_call(m)
    assert m.feed(LeaseRenewed(deadline=100.0, cancel_requested=True)) == ()
    assert m.deadline == 100.0 and m.cancel_requested
    m.feed(LeaseRenewed(deadline=50.0))
    assert m.deadline == 100.0


def test_a_commit_renews_the_lease_only_once_a_third_of_it_has_passed() -> None:
    """Lease of 30 s until 30.0: a commit sent before 10.0 only fences, and the machine
    counts on no more lease than it had; one sent from then on renews it."""
    m = machine(ToolEffect.NON_IDEMPOTENT_WRITE)
    to_call(m)
    early = action(m.feed(ToolReturned({"applied": 5})))
    assert isinstance(early, RecordOutcome) and early.renew_from == 10.0
    assert (early.renewal_at(9.9), early.renewal_at(10.0)) == (0.0, LEASE_SECONDS)
    commands = m.feed(stored(at=9.9))
    assert "lease.renewed" not in events(commands) and RENEWED not in commands
    assert m.deadline == LEASE_SECONDS
    assert isinstance(admit(m, now=9.9), AskProvider)
    second = ProviderReply(tool_calls=[ToolCall("act", {"amount": 6}, "call-2")])
    intent = action(m.feed(ProviderReplied(second)))
    assert isinstance(intent, RecordIntent) and intent.renewal_at(12.0) == LEASE_SECONDS
    commands = m.feed(stored(at=12.0))
    assert RENEWED in commands and m.deadline == 12.0 + LEASE_SECONDS


def test_a_renewal_before_a_call_always_renews_and_a_settlement_never_does() -> None:
    m = machine(ToolEffect.READ_ONLY)
    m.start()
    renew = admit(m, now=20.0)
    assert isinstance(renew, Renew) and renew.renewal_at(-1e9) == LEASE_SECONDS
    m.feed(stored(at=20.0))
    assert isinstance(admit(m, now=20.0), AskProvider)
    end = settled(m.feed(ProviderReplied(done())))
    assert end.renewal_at(1e9) == 0.0


# -- people ------------------------------------------------------------------------------


def request_for(
    decision: Decision | None,
    *,
    kind: RequestKind = RequestKind.APPROVAL,
    decided_at: float | None = 5.0,
    expires_at: float | None = 10.0,
    arguments: dict[str, Any] | None = None,
    value: Any = None,
) -> HumanRequest:
    args = arguments if arguments is not None else dict(CALL.arguments)
    return HumanRequest(
        run_id="run-1",
        agent="agent",
        seq=0,
        position=0,
        call_id="call-1",
        kind=kind,
        tool="act",
        effect=ToolEffect.READ_ONLY,
        arguments=args,
        arguments_digest=arguments_digest(args),
        epoch=1,
        requested_at=1.0,
        expires_at=expires_at,
        decision=decision,
        operator="ann",
        note="no",
        value=value,
        decided_at=decided_at if decision is not None else None,
        age_seconds=0.0,
    )


def provider_row() -> StepInfo:
    return StepInfo(
        run_id="run-1",
        seq=0,
        epoch=1,
        kind=StepKind.PROVIDER,
        tool=None,
        call_id=None,
        effect=None,
        status=StepStatus.SUCCEEDED,
        idempotency_key=None,
        arguments=None,
        output={
            "text": None,
            "tool_calls": [{"name": "act", "arguments": {"amount": 5}, "call_id": "call-1"}],
        },
        error=None,
        started_at=0.0,
        finished_at=0.0,
    )


def row_of(step: StepWrite, *, epoch: int) -> StepInfo:
    return StepInfo(
        run_id="run-1",
        seq=step.seq,
        epoch=epoch,
        kind=step.kind,
        tool=step.tool,
        call_id=step.call_id,
        effect=step.effect,
        status=step.status,
        idempotency_key=step.idempotency_key,
        arguments=load_json(step.arguments_json),
        output=load_json(step.output_json),
        error=step.error,
        started_at=0.0,
        finished_at=None,
    )


def resumed(
    effect: ToolEffect,
    steps: Sequence[StepInfo],
    requests: Sequence[HumanRequest] = (),
    **agent_options: Any,
) -> tuple[RunMachine, tuple[Command, ...]]:
    m = machine(effect, run=record(epoch=2), **agent_options)
    assert m.start() == (LoadJournal(),)
    return m, m.feed(JournalLoaded(tuple(steps), tuple(requests)))


@pytest.mark.parametrize("kind", list(RequestKind))
def test_a_call_that_needs_a_person_parks_the_run_with_its_request(kind: RequestKind) -> None:
    approval = kind is RequestKind.APPROVAL
    m = machine(ToolEffect.NON_IDEMPOTENT_WRITE, approval=approval, asks_human=not approval)
    m.start()
    admit(m)
    commands = m.feed(ProviderReplied(ProviderReply(tool_calls=[CALL])))
    park = action(commands)
    assert isinstance(park, Park)
    # The turn that asked goes with the park, stored only with it.
    assert [s.kind for s in park.steps] == [StepKind.PROVIDER]
    assert park.settlement is not None
    assert park.settlement.event is kind.park_event
    assert [r.call_id for r in park.settlement.requests] == ["call-1"]
    assert "run.parked" in events(m.feed(stored()))


def test_an_approved_call_executes_through_an_intent_even_a_read() -> None:
    m, commands = resumed(
        ToolEffect.READ_ONLY, [provider_row()], [request_for(Decision.APPROVED)], approval=True
    )
    intent = action(commands)
    assert isinstance(intent, RecordIntent)
    after = m.feed(stored())
    assert "request.used" in events(after)
    call = admit(m)
    assert isinstance(call, CallTool) and call.protected


@pytest.mark.parametrize(
    "request_",
    [
        request_for(Decision.REJECTED),
        request_for(Decision.EXPIRED),
        request_for(Decision.APPROVED, decided_at=11.0, expires_at=10.0),
        request_for(Decision.APPROVED, arguments={"amount": 6}),
    ],
    ids=["rejected", "expired", "decided_late", "other_arguments"],
)
def test_a_call_not_approved_is_answered_with_its_refusal_and_never_made(
    request_: HumanRequest,
) -> None:
    m, commands = resumed(
        ToolEffect.NON_IDEMPOTENT_WRITE, [provider_row()], [request_], approval=True
    )
    refusal = action(commands)
    assert isinstance(refusal, RecordSoft)
    [row] = refusal.steps
    assert row.status is StepStatus.FAILED and row.error is not None
    after = m.feed(stored())
    assert "request.used" in events(after)
    assert isinstance(action(after), CheckAdmission)
    assert isinstance(admit(m), AskProvider)


def test_a_pending_request_parks_again_without_asking_twice() -> None:
    _m, commands = resumed(
        ToolEffect.READ_ONLY, [provider_row()], [request_for(None)], approval=True
    )
    park = action(commands)
    assert isinstance(park, Park) and park.settlement is not None
    assert park.settlement.requests == ()


def test_an_answered_input_is_the_calls_result() -> None:
    _m, commands = resumed(
        ToolEffect.READ_ONLY,
        [provider_row()],
        [request_for(Decision.ANSWERED, kind=RequestKind.INPUT, value="blue")],
        asks_human=True,
    )
    answer = action(commands)
    assert isinstance(answer, RecordSoft)
    [row] = answer.steps
    assert row.status is StepStatus.SUCCEEDED and load_json(row.output_json) == "blue"


# -- resume from the journal -------------------------------------------------------------


def open_intent(effect: ToolEffect, *, epoch: int = 1) -> StepInfo:
    return attrs.evolve(
        provider_row(),
        seq=1,
        epoch=epoch,
        kind=StepKind.TOOL,
        tool="act",
        call_id="call-1",
        effect=effect,
        status=StepStatus.STARTED,
        output=None,
        idempotency_key="key",
    )


def test_an_open_non_idempotent_intent_dead_letters_the_run_without_a_call() -> None:
    _m, commands = resumed(
        ToolEffect.NON_IDEMPOTENT_WRITE,
        [provider_row(), open_intent(ToolEffect.NON_IDEMPOTENT_WRITE)],
    )
    settlement = settled(commands).settlement
    assert settlement is not None
    assert (settlement.event, settlement.reason) == (Event.DEAD_LETTER, Reason.INTERRUPTED_WRITE)


def test_an_open_idempotent_intent_is_called_again_with_the_same_key() -> None:
    m, commands = resumed(
        ToolEffect.IDEMPOTENT_WRITE, [provider_row(), open_intent(ToolEffect.IDEMPOTENT_WRITE)]
    )
    assert isinstance(action(commands), RecordIntent)
    m.feed(stored())
    call = admit(m)
    assert isinstance(call, CallTool)
    fresh = machine(ToolEffect.IDEMPOTENT_WRITE)
    assert call.idempotency_key == to_call(fresh).idempotency_key


def test_an_open_intent_of_an_approved_call_dead_letters_whatever_its_effect() -> None:
    _m, commands = resumed(
        ToolEffect.READ_ONLY,
        [provider_row(), open_intent(ToolEffect.READ_ONLY)],
        [request_for(Decision.APPROVED)],
        approval=True,
    )
    settlement = settled(commands).settlement
    assert settlement is not None and settlement.reason is Reason.INTERRUPTED_WRITE


def test_a_journal_with_its_final_reply_completes_at_once() -> None:
    final = attrs.evolve(provider_row(), output={"text": "done", "tool_calls": []})
    _m, commands = resumed(ToolEffect.READ_ONLY, [final])
    settlement = settled(commands).settlement
    assert settlement is not None and settlement.event is Event.COMPLETE
    assert settlement.result_json == '"done"'


def test_a_journal_without_the_turn_that_asked_asks_again() -> None:
    m, commands = resumed(ToolEffect.NON_IDEMPOTENT_WRITE, [])
    assert isinstance(action(commands), CheckAdmission)
    assert isinstance(admit(m), AskProvider)


def test_max_steps_fails_the_run() -> None:
    replies = [ProviderReply(tool_calls=[CALL])]
    m = machine(replies=replies, max_steps=1)
    to_call(m)
    m.feed(ToolReturned(1))
    settlement = settled(m.feed(stored())).settlement
    assert settlement is not None and settlement.reason is Reason.MAX_STEPS


# -- value semantics ---------------------------------------------------------------------


def test_a_copy_is_an_independent_machine_with_an_equal_snapshot() -> None:
    m = machine(ToolEffect.NON_IDEMPOTENT_WRITE)
    to_intent(m)
    twin = copy.deepcopy(m)
    assert twin.snapshot() == m.snapshot()
    assert hash(twin.snapshot()) == hash(m.snapshot())
    m.feed(stored())
    assert twin.snapshot() != m.snapshot()
    twin.feed(stored())
    assert twin.snapshot() == m.snapshot()
    assert {twin.snapshot(), m.snapshot()} == {m.snapshot()}


def test_an_event_the_machine_does_not_wait_for_is_refused() -> None:
    m = machine()
    with pytest.raises(UnexpectedEvent):
        m.feed(stored())
    m.start()
    with pytest.raises(UnexpectedEvent):
        m.feed(ToolReturned(1))


# -- invariants over generated event sequences -------------------------------------------

OUTCOMES: list[CommitOutcome] = [
    Stored(),
    Stored(cancel_requested=True),
    Fenced("taken"),
    Refused("locked"),
    Refused("bad", data_error=True),
    Unanswered("lost"),
]

CALLS = [
    ToolCall("read", {"amount": 1}, "r"),
    ToolCall("idem", {"amount": 2}, "i"),
    ToolCall("charge", {"amount": 3}, "c"),
]


def three_tool_agent() -> Agent:
    tools = []
    for name, effect in (
        ("read", ToolEffect.READ_ONLY),
        ("idem", ToolEffect.IDEMPOTENT_WRITE),
        ("charge", ToolEffect.NON_IDEMPOTENT_WRITE),
    ):

        @tool(name=name, effect=effect, timeout_seconds=7)
        async def body(ctx: ToolContext, amount: int) -> int:
            return amount

        tools.append(body)
    provider = ScriptedProvider([ProviderReply(tool_calls=CALLS), done()])
    return Agent("agent", provider, tools=tools)


def rows_of(sent: Commit | None) -> tuple[StepInfo, ...]:
    steps = () if sent is None else sent.steps
    return tuple(row_of(step, epoch=1) for step in steps if not step.withdraws)


def intent_ids(steps: Sequence[StepWrite]) -> set[str]:
    return {
        s.call_id or ""
        for s in steps
        if s.status is StepStatus.STARTED and not s.settles and not s.withdraws
    }


class Watch:
    """What the interpreter saw, and the invariants over it."""

    def __init__(self) -> None:
        self.stored_intents: set[str] = set()
        self.called: set[str] = set()
        self.in_doubt = False
        self.fenced = False
        self.last_commit: Commit | None = None

    def saw(self, pending: Command, event: MachineEvent) -> None:
        if isinstance(event, Committed) and isinstance(pending, Commit):
            self.last_commit = pending
            if isinstance(event.outcome, Unanswered):
                self.in_doubt = True
            elif isinstance(event.outcome, Fenced):
                self.fenced = True
            elif isinstance(event.outcome, Stored) and pending.settlement is None:
                self.in_doubt = False
                if isinstance(pending, RecordIntent):
                    self.stored_intents.update(intent_ids(pending.steps))
        if (
            isinstance(event, JournalRead)
            and event.steps
            and isinstance(pending, ReadBack)
            and isinstance(self.last_commit, RecordIntent)
        ):
            # The generated journal holds the item just sent: read back as stored.
            self.stored_intents.update(intent_ids(self.last_commit.steps))

    def check(self, m: RunMachine, event: MachineEvent, commands: Sequence[Command]) -> None:
        if self.fenced:
            assert names(commands)[-1] == "Stop", "after a fence, nothing but a stop"
        for command in commands:
            if isinstance(command, CallTool):
                assert isinstance(event, AdmissionCheck), "a call starts only on an admission"
                assert event.now + ADMISSION_SECONDS <= m.deadline
                assert not self.in_doubt, "no call while a commit's answer is in doubt"
                assert command.call_id not in self.called, "one call id is called once"
                self.called.add(command.call_id)
                if command.effect.is_write:
                    assert command.call_id in self.stored_intents, "a write needs its intent"
                    assert command.protected


@given(st.data())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_invariants_hold_after_every_event(data: st.DataObject) -> None:
    m = RunMachine.for_run(
        record(epoch=1),
        three_tool_agent(),
        lease_seconds=LEASE_SECONDS,
        admission_seconds=ADMISSION_SECONDS,
        lease_deadline=LEASE_SECONDS,
        policy=RecoveryPolicy(),
    )
    watch = Watch()
    commands = m.start()
    now = 0.0
    for _ in range(80):
        pending = action(commands)
        if isinstance(pending, Stop):
            assert m.stopped
            return
        event = data.draw(answers(pending, now, watch.last_commit), label=type(pending).__name__)
        if isinstance(event, LeaseRenewed | DrainRequested):
            assert m.feed(event) == ()
            continue
        if isinstance(event, AdmissionCheck):
            now = event.now
        watch.saw(pending, event)
        commands = m.feed(event)
        watch.check(m, event, commands)
    raise AssertionError("the attempt did not end")


def answers(pending: Command, now: float, sent: Commit | None) -> st.SearchStrategy[MachineEvent]:
    cancel = st.just(Cancelled())
    if isinstance(pending, CheckAdmission):
        return st.builds(AdmissionCheck, now=st.floats(now, now + 40.0), wall=st.just(0.0))
    if isinstance(pending, Commit):
        sent_at = st.floats(now, now + 1.0)
        return st.one_of(st.builds(Committed, st.sampled_from(OUTCOMES), sent_at), cancel)
    if isinstance(pending, ReadBack):
        return st.one_of(
            st.builds(JournalRead, st.just(())),
            st.just(ReadFailed("down")),
            st.just(JournalRead(rows_of(sent))),
            cancel,
        )
    calls = [TimedOut(), CutOff("lease"), LeaseLost(), DrainRequested(), Cancelled()]
    if isinstance(pending, AskProvider):
        turns = sum(1 for msg in pending.request.messages if msg.role.value == "assistant")
        reply = ProviderReply(tool_calls=CALLS) if turns == 0 else done()
        return st.one_of(
            st.sampled_from(
                [ProviderReplied(reply), ProviderFailed(ProviderError("down")), *calls]
            ),
            st.builds(LeaseRenewed, st.floats(now, now + 60.0)),
        )
    if isinstance(pending, CallTool):
        return st.one_of(
            st.sampled_from(
                [
                    ToolReturned(1),
                    ToolFailed("no"),
                    ToolRaised(ValueError("bug")),
                    ToolNotStarted(CallNotStarted("unreachable")),
                    *calls,
                ]
            ),
            st.builds(LeaseRenewed, st.floats(now, now + 60.0)),
        )
    raise AssertionError(f"no answers for {pending!r}")


@pytest.mark.parametrize("effect", WRITES)
def test_an_intent_goes_only_with_the_pending_turn_that_asked_for_it(effect: ToolEffect) -> None:
    m = machine(effect)
    intent = to_intent(m)
    assert [s.kind for s in intent.steps] == [StepKind.PROVIDER, StepKind.TOOL]
    commands = m.feed(Committed(Refused("locked"), sent_at=0.0))
    # Never sent again alone: stored without its turn, a resumed run would not know it.
    assert "step.deferred" not in events(commands)
    assert not any(isinstance(c, CallTool) for c in commands)
    assert [(s.kind, s.withdraws) for s in settled(commands).steps] == [
        (StepKind.PROVIDER, False),
        (StepKind.TOOL, True),
    ]


@pytest.mark.parametrize("effect", EFFECTS)
@pytest.mark.parametrize(
    "outcome",
    [Refused("locked"), Refused("bad", data_error=True), Unanswered("lost")],
    ids=["refused", "data_error", "unanswered"],
)
def test_a_settle_not_stored_leaves_the_run_to_the_reaper(
    effect: ToolEffect, outcome: CommitOutcome
) -> None:
    m = machine(effect)
    to_call(m)
    end = settled(m.feed(CutOff("lease")))
    if not effect.is_write:
        # A read's turn, still pending, goes with the settlement; not stored, the
        # settlement is sent again without it, as any commit without its resent rows.
        assert [s.kind for s in end.steps] == [StepKind.PROVIDER]
        deferred = m.feed(Committed(outcome, sent_at=0.0))
        assert "step.deferred" in events(deferred)
        end = settled(deferred)
    assert end.steps == ()
    commands = m.feed(Committed(outcome, sent_at=0.0))
    # With nothing fresh in it, an unanswered settle cannot be read back.
    assert names(commands)[-2:] == ["run.settle_failed", "Stop"]
    assert action(commands) == Stop(None)


@pytest.mark.parametrize("effect", EFFECTS)
def test_an_open_attempt_is_resumed_by_its_effect(effect: ToolEffect) -> None:
    m, commands = resumed(effect, [provider_row(), open_intent(effect)])
    if effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        settlement = settled(commands).settlement
        assert settlement is not None and settlement.reason is Reason.INTERRUPTED_WRITE
        return
    if effect.is_write:
        assert isinstance(action(commands), RecordIntent)
        commands = m.feed(stored())
    call = action(m.feed(AdmissionCheck(now=0.0, wall=0.0)))
    assert isinstance(call, CallTool) and call.protected is effect.is_write
    # A new row after the open one: the journal keeps what the earlier attempt wrote.
    outcome = action(m.feed(ToolReturned(1)))
    assert isinstance(outcome, Commit) and outcome.steps[-1].seq == 2
