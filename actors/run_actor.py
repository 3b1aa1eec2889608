"""The RunActor: one run's loop of provider and tool steps, each recorded at a boundary."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import attrs

from leaseward.actors.lease_keeper import Lease, LeaseKeeper, default_margin
from leaseward.actors.metrics import Metrics
from leaseward.runtime.agents import Agent
from leaseward.runtime.approvals import Gate, GateAction, gate_call
from leaseward.runtime.clock import Clock
from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored, Unanswered
from leaseward.runtime.conversation import (
    PendingCall,
    normalize_reply,
    pending_calls,
    rebuild,
    reply_to_json,
    tool_message,
)
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.errors import (
    AuditPersistenceFailed,
    CallTimedOut,
    InvalidInput,
    LeaseLost,
    LeasewardError,
    ProviderError,
    StoreError,
    ToolError,
)
from leaseward.runtime.failures import FailureClass, classify
from leaseward.runtime.lifecycle import (
    Event,
    Reason,
    RecoveryPolicy,
    RunMode,
    StepKind,
    StepStatus,
    decide_recovery,
)
from leaseward.runtime.logs import get_logger
from leaseward.runtime.model import (
    MAX_ARGUMENTS_BYTES,
    MAX_RESULT_BYTES,
    Decision,
    HumanRequest,
    Message,
    NewRequest,
    ProviderReply,
    ProviderRequest,
    RequestKind,
    Role,
    RunRecord,
    Settlement,
    StepInfo,
    StepWrite,
    ToolCall,
    arguments_digest,
    dump_json,
    settlement_after,
)
from leaseward.runtime.tools import BoundTool, ToolContext
from leaseward.storage.crash_points import crash_point
from leaseward.storage.protocol import BatchItem

__all__ = ["RunActor", "RunSettings", "WriteInFlight"]

SETTLE_TIMEOUT_SECONDS = 10.0
MAX_ERROR_CHARS = 2000

_WAITING = frozenset(kind.waiting_state for kind in RequestKind)

log = get_logger("leaseward.run")

_T = TypeVar("_T")

PersistFn = Callable[[BatchItem], Awaitable[CommitOutcome]]
StepsFn = Callable[[str], Awaitable[list[StepInfo]]]
RequestsFn = Callable[[str], Awaitable[list[HumanRequest]]]


@attrs.frozen
class RunSettings:
    lease_seconds: float
    deadline_margin_seconds: float = attrs.field(
        default=attrs.Factory(lambda self: default_margin(self.lease_seconds), takes_self=True)
    )
    """How close to its end a lease may come while a call runs before the call is cut off."""
    policy: RecoveryPolicy = attrs.Factory(RecoveryPolicy)


@attrs.frozen
class WriteInFlight:
    """A call with a durable intent that has started and whose outcome is not yet recorded."""

    run_id: str
    epoch: int
    tool: str
    call_id: str


class _CallNotAdmitted(Exception):
    """The lease could not be made to last until its next renewal, so the call did not start."""


class _CallCutOff(Exception):
    """The lease guard cancelled a call whose lease could not be renewed."""


class _TimedOut(Exception):
    """A call did not return within its own timeout."""


class _ToolRaised(Exception):
    """A tool raised something other than ToolError; ``error`` is what it raised."""

    def __init__(self, error: Exception, words: str) -> None:
        super().__init__(words)
        self.error = error
        self.words = words


class _Stop(Exception):
    """The run reached its settlement at a step boundary."""

    def __init__(self, settlement: Settlement) -> None:
        super().__init__(settlement.event.value)
        self.settlement = settlement


def _describe(exc: BaseException) -> str:
    if isinstance(exc, CallTimedOut):
        # Its words say what timed out and what that means; its type adds nothing.
        return exc.message
    # A tool's exception text is the tool's to write, of any length: the journal, the
    # run's error and the log lines keep a bounded part of it.
    text = str(exc)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RunActor:
    """Executes one claimed run under its lease epoch until it settles or loses the lease.

    Provider steps and read-only tool steps are fail-soft: a record that cannot
    be stored stays pending and goes out with the next request, unless the
    store refused it for what it holds (a data error): that one is dropped. A write tool's
    intent is committed before the call and its outcome after it; the actor
    blocks on the Persister for both and fails closed when either is refused.
    """

    def __init__(
        self,
        run: RunRecord,
        agent: Agent,
        *,
        persist: PersistFn,
        load_steps: StepsFn,
        load_requests: RequestsFn,
        settings: RunSettings,
        clock: Clock,
        worker_id: str,
        lease_deadline: float,
        keeper: LeaseKeeper,
        draining: anyio.Event | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.run_id = run.id
        self._metrics = metrics if metrics is not None else Metrics()
        self._run = run
        self._agent = agent
        self._persist = persist
        self._load_steps = load_steps
        self._load_requests = load_requests
        # What people decided about this run's calls, by (provider turn, call id).
        self._requests: dict[tuple[int, str], HumanRequest] = {}
        self._settings = settings
        self._clock = clock
        # Interactive runs are never released back to the queue, so they never drain.
        self._draining = draining if run.mode is RunMode.QUEUED else None
        self.epoch = run.epoch
        self._next_seq = 0
        self._pending: list[StepWrite] = []
        # Provider turns dropped from the journal: a write one of them asked for has
        # no turn to stand on there, so a resumed run would not know the call.
        self._dropped_turns: set[int] = set()
        self._last_effect: ToolEffect | None = None
        self._last_status: StepStatus | None = None
        # On the monotonic clock, from when the claim was sent: never the database's
        # lease_expires_at, which a worker's clock may be far from.
        self._lease = Lease(
            run.id, run.epoch, deadline=lease_deadline, cancel_requested=run.cancel_requested
        )
        self._keeper = keeper
        # Set when a commit of this actor went unanswered, cleared when a renewal is
        # answered: in between, no call starts (G6, G7).
        self._lease_in_doubt = False
        # A write's intent that is durable but whose call has not started: if the
        # attempt ends here, the intent is withdrawn, so nobody takes the call for
        # one that may have run.
        self._unstarted_intent: StepWrite | None = None
        self._before_intent: tuple[ToolEffect | None, StepStatus | None] = (None, None)
        # The scope of the tool step under way. Once a call with an intent starts, it is
        # shielded: a drain or a cancel from outside waits for the call to return and
        # its outcome to be recorded; only cut_off() lets the cancel through.
        self._step_scope: anyio.CancelScope | None = None
        self.writing: WriteInFlight | None = None
        self._cut_off = False
        self._worker_id = worker_id
        self._log = log.bind(run_id=run.id, epoch=run.epoch, worker_id=worker_id, agent=agent.name)
        self.settlement: Settlement | None = None

    async def run(self) -> Settlement | None:
        """Run until settled; returns the settlement stored, or None if none was."""
        withdrawn: tuple[StepWrite, ...] = ()
        try:
            settlement = await self._execute()
        except LeaseLost:
            self._log.warning("lease.lost")
            return None
        except _CallNotAdmitted as exc:
            self._log.warning("call.not_admitted", error=str(exc))
            withdrawn = self._withdraw_unstarted()
            settlement = Settlement(Event.RELEASE)
        except _CallCutOff as exc:
            # Settled as the reaper would have, but before the lease ran out: if the
            # store takes it in time, the reason says what happened.
            settlement = self._recovered_from_interruption(str(exc))
        except anyio.get_cancelled_exc_class():
            withdrawn = self._withdraw_unstarted()
            with anyio.move_on_after(SETTLE_TIMEOUT_SECONDS, shield=True):
                await self._settle(self._stopped(), withdrawn)
            raise
        except Exception as exc:
            withdrawn = self._withdraw_unstarted()
            settlement = self._after_failure(exc)
        with anyio.move_on_after(SETTLE_TIMEOUT_SECONDS, shield=True):
            await self._settle(settlement, withdrawn)
        return self.settlement

    def _withdraw_unstarted(self) -> tuple[StepWrite, ...]:
        intent = self._unstarted_intent
        if intent is None:
            return ()
        self._unstarted_intent = None
        self._last_effect, self._last_status = self._before_intent
        return (attrs.evolve(intent, withdraws=True),)

    # -- the loop -------------------------------------------------------------------

    async def _execute(self) -> Settlement:
        # Epoch 1 is a run's first lease: nobody can have written its journal yet.
        steps = [] if self.epoch == 1 else await self._load_steps(self.run_id)
        if self.epoch > 1:
            self._requests = {(r.seq, r.call_id): r for r in await self._load_requests(self.run_id)}
        self._remember_newest(steps)
        conversation = rebuild(self.run_id, self._agent.instructions, self._run.input, steps)
        messages = list(conversation.messages)
        self._next_seq = conversation.next_seq
        turns = conversation.provider_turns
        pending = list(conversation.pending)
        final = conversation.final_reply
        try:
            while True:
                # A finished conversation completes even when a cancel or a drain
                # arrived meanwhile: the work is done and recorded.
                if final is not None:
                    return Settlement(
                        Event.COMPLETE,
                        Reason.COMPLETED,
                        result_json=dump_json(final.text, what="result"),
                    )
                self._at_boundary()
                if pending:
                    gate = self._gate_turn(pending)
                    with self._tool_step_scope():
                        messages.append(await self._tool_step(pending.pop(0), gate))
                    continue
                if turns >= self._agent.max_steps:
                    return Settlement(
                        Event.FAIL,
                        Reason.MAX_STEPS,
                        error=f"the agent used its {self._agent.max_steps} provider steps "
                        "without finishing",
                    )
                seq, reply = await self._provider_step(messages)
                turns += 1
                messages.append(Message(Role.ASSISTANT, reply.text, tool_calls=reply.tool_calls))
                pending = pending_calls(self.run_id, seq, reply)
                if not reply.tool_calls:
                    final = reply
        except _Stop as stop:
            return stop.settlement

    def _at_boundary(self) -> None:
        if self._lease.cancel_requested:
            raise _Stop(Settlement(Event.CANCEL_RUNNING, Reason.CANCELLED))
        if self._draining is not None and self._draining.is_set():
            raise _Stop(Settlement(Event.RELEASE))

    @contextmanager
    def _tool_step_scope(self) -> Iterator[None]:
        with anyio.CancelScope() as self._step_scope:
            try:
                yield
            finally:
                self._step_scope = None
                self.writing = None

    def _protect_write(self, tool: str, call_id: str) -> None:
        """G13: the call about to start has a durable intent, so nothing but cut_off()
        stops it: an interrupted write is one a person must resolve."""
        self.writing = WriteInFlight(self.run_id, self.epoch, tool, call_id)
        if self._step_scope is not None and not self._cut_off:
            self._step_scope.shield = True

    def cut_off(self) -> WriteInFlight | None:
        """Let a cancel reach the write in flight; returns that write, if there is one."""
        self._cut_off = True
        if self._step_scope is not None:
            self._step_scope.shield = False
        return self.writing

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    # -- calls that wait for a person ---------------------------------------------------

    def _gate(self, pending: PendingCall) -> Gate | None:
        """What a person has to do with this call; None for a call nobody is asked about:
        one that cannot run (an unknown tool, refused arguments) or that an earlier
        attempt left open (recovery decides it, from its intent)."""
        call = pending.call
        bound = self._agent.tools.get(call.name)
        if pending.open_attempt is not None or bound is None:
            return None
        if self._check_arguments(bound, call)[1] is not None:
            return None
        return gate_call(
            call.arguments,
            asks_human=bound.asks_human,
            needs_approval=bound.needs_approval(call.arguments),
            request=self._requests.get((pending.turn_seq, call.call_id)),
        )

    def _gate_turn(self, pending: Sequence[PendingCall]) -> Gate | None:
        """The gate of the next call; if it must wait for a person, park the run.

        Parking asks at once about every later call of the turn that needs the same
        kind of answer, so that a person sees them together and the run comes back
        once, when all are decided. Calls are still executed in the model's order.
        """
        gate = self._gate(pending[0])
        if gate is None or gate.action is not GateAction.PARK or gate.kind is None:
            return gate
        kind = gate.kind
        if pending[0].turn_seq in self._dropped_turns:
            # A request must stand on the turn that asked for it, as an intent must.
            raise StoreError(
                f"the provider turn that asked for {pending[0].call.name} could not be "
                "recorded, so neither can its request"
            )
        requests: list[NewRequest] = []
        for waiting in pending:
            later = self._gate(waiting)
            if later is None or later.action is not GateAction.PARK or later.kind is not kind:
                continue
            if later.request is None:
                requests.append(self._new_request(waiting, kind))
        raise _Stop(Settlement(kind.park_event, requests=tuple(requests)))

    def _new_request(self, pending: PendingCall, kind: RequestKind) -> NewRequest:
        call = pending.call
        bound = self._agent.tools.get(call.name)
        assert bound is not None, "only calls of known tools are gated"
        own = bound.approval_timeout_seconds
        timeout = own if own is not None else self._agent.approval_timeout_seconds
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

    def _decision_used(self, request: HumanRequest) -> None:
        if request.decision is not None and request.decided_at is not None:
            self._metrics.request_decided(
                request.decision, request.decided_at - request.requested_at
            )
        self._log.info(
            "request.used",
            call_id=request.call_id,
            tool=request.tool,
            decision=None if request.decision is None else request.decision.value,
            operator=request.operator,
        )

    async def _answer_without_call(
        self, pending: PendingCall, gate: Gate, effect: ToolEffect, arguments_json: str | None
    ) -> Any:
        """Record a person's answer, or the refusal of the call, as the call's result."""
        call = pending.call
        refused = gate.action is GateAction.REFUSE
        try:
            output_json = dump_json(
                gate.output, what=f"the result of {call.name}", limit=MAX_RESULT_BYTES
            )
            output = gate.output
        except InvalidInput as exc:
            output = {"error": exc.message}
            output_json = dump_json(output)
        step = StepWrite(
            seq=self._take_seq(),
            kind=StepKind.TOOL,
            status=StepStatus.FAILED if refused else StepStatus.SUCCEEDED,
            tool=call.name,
            call_id=call.call_id,
            effect=effect,
            idempotency_key=pending.idempotency_key,
            arguments_json=arguments_json,
            output_json=output_json,
            error=gate.error,
        )
        await self._record_soft(step)
        if gate.request is not None:
            self._decision_used(gate.request)
        return output

    # -- steps ------------------------------------------------------------------------

    async def _provider_step(self, messages: list[Message]) -> tuple[int, ProviderReply]:
        timeout = self._agent.provider_timeout_seconds
        await self._renew_before_call()
        request = ProviderRequest(
            run_id=self.run_id,
            agent=self._agent.name,
            messages=tuple(messages),
            tools=self._agent.tool_specs,
            model_settings=self._agent.model_settings,
        )
        started_at = self._clock.now()
        self._admit()
        began = self._clock.monotonic()
        try:
            reply = await self._guarded(lambda: self._agent.provider.complete(request), timeout)
        except _TimedOut:
            # A bare TimeoutError would leave the run's error saying nothing of what timed out.
            raise ProviderError(
                f"the provider call timed out (its timeout is {timeout:g} s)",
                failure_class=FailureClass.CONNECTION.value,
            ) from None
        latency_ms = round((self._clock.monotonic() - began) * 1000, 1)
        if not isinstance(reply, ProviderReply):
            raise InvalidInput(f"the provider returned {type(reply).__name__}, not ProviderReply")
        seq = self._take_seq()
        reply = normalize_reply(reply, seq)
        usage = reply.usage
        self._log.info(
            "provider.replied",
            seq=seq,
            model=reply.model,
            input_tokens=None if usage is None else usage.input_tokens,
            output_tokens=None if usage is None else usage.output_tokens,
            latency_ms=latency_ms,
            stop_reason=reply.stop_reason,
        )
        step = StepWrite(
            seq=seq,
            kind=StepKind.PROVIDER,
            status=StepStatus.SUCCEEDED,
            output_json=dump_json(
                reply_to_json(reply, latency_ms=latency_ms), what="the provider reply"
            ),
            started_at=started_at,
        )
        await self._record_soft(step)
        return seq, reply

    async def _tool_step(self, pending: PendingCall, gate: Gate | None) -> Message:
        """Make one call the model asked for, or answer it as a person decided; returns
        its result for the model."""
        call = pending.call
        open_attempt = pending.open_attempt
        request = self._requests.get((pending.turn_seq, call.call_id))
        approved = request is not None and request.decision is Decision.APPROVED
        if open_attempt is not None and (
            open_attempt.effect is ToolEffect.NON_IDEMPOTENT_WRITE or approved
        ):
            # Before any other check: whatever the app now says about this tool (removed,
            # its schema changed), the journal says a non-idempotent call may have run.
            # An approved call's intent consumed its approval, whatever its effect: the
            # approval authorised one execution, and that one may have happened.
            raise _Stop(
                Settlement(
                    Event.DEAD_LETTER,
                    Reason.INTERRUPTED_WRITE,
                    error=f"call {call.call_id} of {call.name} was interrupted at epoch "
                    f"{open_attempt.epoch}; its outcome is unknown",
                )
            )
        bound = self._agent.tools.get(call.name)
        effect = self._agent.effects.effect_for(call.name)
        arguments_json, rejection = self._check_arguments(bound, call)
        if bound is None or rejection is not None:
            # Nothing is executed, so nothing needs an intent: the model gets the error.
            output = {"error": rejection}
            step = StepWrite(
                seq=self._take_seq(),
                kind=StepKind.TOOL,
                status=StepStatus.FAILED,
                tool=call.name,
                call_id=call.call_id,
                effect=effect,
                idempotency_key=pending.idempotency_key,
                arguments_json=arguments_json,
                output_json=dump_json(output),
                error=rejection,
            )
            await self._record_soft(step)
            return tool_message(call, output, is_error=True)
        if gate is not None and gate.action in (GateAction.REFUSE, GateAction.ANSWER):
            answer = await self._answer_without_call(pending, gate, effect, arguments_json)
            return tool_message(call, answer, is_error=gate.action is GateAction.REFUSE)
        # An approved call always goes through an intent, even a read: the intent is
        # what consumes the approval, so that no later attempt can execute it again.
        approved_now = gate is not None and gate.request is not None
        needs_intent = effect.is_write or approved_now
        seq = self._take_seq()
        base = StepWrite(
            seq=seq,
            kind=StepKind.TOOL,
            status=StepStatus.STARTED,
            tool=call.name,
            call_id=call.call_id,
            effect=effect,
            idempotency_key=pending.idempotency_key,
            arguments_json=arguments_json,
        )
        crash_point("before_intent")
        if needs_intent:
            if pending.turn_seq in self._dropped_turns:
                # G2: stored alone, the intent would be ignored on resume, the model asked
                # again and the call maybe made twice. A retry asks for a turn that stays.
                raise StoreError(
                    f"the provider turn that asked for {call.name} (call {call.call_id}) "
                    "could not be recorded, so neither can the call's intent"
                )
            self._before_intent = (self._last_effect, self._last_status)
            # Marked before it is sent: if the attempt ends before the call, with the
            # intent's commit answered or not, the settlement withdraws whatever of it
            # was stored, and the next attempt never takes a call that did not start
            # for one that may have run.
            self._unstarted_intent = base
            # Shielded, within a bound: a stop that lands while the intent is on its way
            # waits for the answer, unless the store hangs.
            with anyio.fail_after(SETTLE_TIMEOUT_SECONDS, shield=True):
                await self._record_intent(base)
            if gate is not None and gate.request is not None:
                self._decision_used(gate.request)
            # The stop takes effect here, the intent withdrawn, before the call starts.
            await anyio.lowlevel.checkpoint_if_cancelled()
        else:
            # A read has no intent row, so its record carries when the call began.
            base = attrs.evolve(base, started_at=self._clock.now())
        crash_point("after_intent")
        await self._renew_before_call()
        try:
            status, output, error = await self._call(bound, pending, dict(call.arguments))
        except _ToolRaised as raised:
            await self._record_raised(base, raised.words, settles=needs_intent)
            raise raised.error from None
        crash_point("after_call")
        encoded = bound.encode_result(output, returned=status is StepStatus.SUCCEEDED)
        output, output_json = encoded.value, encoded.text
        outcome = attrs.evolve(base, status=status, output_json=output_json, error=error)
        if needs_intent:
            await self._record_outcome(attrs.evolve(outcome, settles=True))
        else:
            await self._record_soft(outcome)
        return tool_message(call, output, is_error=status is StepStatus.FAILED)

    def _check_arguments(
        self, bound: BoundTool | None, call: ToolCall
    ) -> tuple[str | None, str | None]:
        """The arguments' JSON text (None if they have none) and why they are refused, if so.

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
            return None, exc.message
        if unreadable is not None:
            return arguments_json, f"the arguments of {name} could not be read: {unreadable}"
        if bound is None:
            known = ", ".join(sorted(t.name for t in self._agent.tools)) or "none"
            return arguments_json, f"unknown tool {name!r} (available: {known})"
        try:
            bound.arguments.parse(arguments)
        except InvalidInput as exc:
            return arguments_json, f"invalid arguments for {name}: {exc.message}"
        return arguments_json, None

    async def _call(
        self, bound: BoundTool, pending: PendingCall, arguments: dict[str, Any]
    ) -> tuple[StepStatus, Any, str | None]:
        ctx = ToolContext(
            run_id=self.run_id,
            epoch=self.epoch,
            call_id=pending.call.call_id,
            idempotency_key=pending.idempotency_key,
            log=self._log.bind(tool=bound.name, call_id=pending.call.call_id),
            lease_remaining=self._lease_remaining,
        )
        self._admit()
        if self._unstarted_intent is not None:
            self._protect_write(bound.name, pending.call.call_id)
        self._unstarted_intent = None
        try:
            result = await self._guarded(
                lambda: bound.implementation(ctx, **arguments), bound.timeout_seconds
            )
        except ToolError as exc:
            return StepStatus.FAILED, {"error": exc.message}, exc.message
        except _TimedOut:
            words = f"{bound.name} did not return within {bound.timeout_seconds:.1f} s"
            if bound.effect.is_write:
                words += "; it may have applied"
            ctx.log.warning("tool.timed_out", error=words)
            raise _ToolRaised(CallTimedOut(words), words) from None
        except (LeaseLost, _CallCutOff):
            raise
        except Exception as exc:
            # A bug in the tool, most likely: whoever fixes it needs the traceback.
            ctx.log.exception("tool.raised", error=_describe(exc))
            raise _ToolRaised(exc, _describe(exc)) from exc
        return StepStatus.SUCCEEDED, result, None

    async def _record_raised(self, base: StepWrite, words: str, *, settles: bool) -> None:
        """Journal a call that raised or timed out, with its arguments and what happened.

        A read's row is settled failed. A write's intent stays open, with the words
        beside it: the write may have applied before it raised, so only an operator
        can say whether it did (G2); recovery takes it for an interrupted write.
        """
        if not settles:
            output_json = dump_json({"error": words})
            failed = attrs.evolve(
                base, status=StepStatus.FAILED, output_json=output_json, error=words
            )
            await self._record_soft(failed)
            return
        outcome = await self._send([attrs.evolve(base, settles=True, error=words)])
        if not isinstance(outcome, Stored):
            # The intent is still there, open: the write is handled as interrupted.
            self._log.warning(
                "step.record_failed", seq=base.seq, tool=base.tool, error=outcome.error
            )

    async def _guarded(self, call: Callable[[], Awaitable[_T]], timeout: float) -> _T:
        """Make ``call``, bounded by its timeout, while the keeper renews the lease;
        raise _CallCutOff if the keeper had to cancel it to stay inside the lease, and
        _TimedOut if its timeout ran out (a TimeoutError the call raised is its own)."""
        with anyio.CancelScope() as guard, self._keeper.guarding(self._lease, guard):
            with anyio.move_on_after(timeout) as timer:
                return await call()
        if self._lease.lost:
            raise LeaseLost(f"run {self.run_id} was taken from epoch {self.epoch} during a call")
        if guard.cancel_called:
            raise _CallCutOff(self._lease.cut_off or "the lease could not be renewed")
        assert timer.cancelled_caught, "a call ends by returning, raising or being cancelled"
        raise _TimedOut()

    # -- records --------------------------------------------------------------------

    async def _send(
        self,
        steps: Sequence[StepWrite],
        settlement: Settlement | None = None,
        *,
        after_pending: bool = False,
    ) -> CommitOutcome:
        """Commit ``steps`` (and the lease renewal or settlement) behind any pending records.

        With ``after_pending`` the steps are stored only together with every
        pending record: a write's intent must never reach the journal without
        the provider turn that asked for it. Otherwise a pending record that
        still cannot be stored stays pending and the rest goes ahead alone.
        """
        outcome = await self._commit(tuple(self._pending), tuple(steps), settlement)
        if isinstance(outcome, Stored):
            self._pending.clear()
        elif self._pending and not after_pending:
            self._log.warning("step.deferred", count=len(self._pending), error=outcome.error)
            refused = outcome
            outcome = await self._commit((), tuple(steps), settlement)
            if isinstance(outcome, Stored) and isinstance(refused, Refused) and refused.data_error:
                # The rest went in without them, so the store refuses what the pending
                # records hold: sent again, they would be refused again, forever.
                self._drop(self._pending, refused.error)
                self._pending.clear()
        return outcome

    async def _commit(
        self,
        resent: tuple[StepWrite, ...],
        fresh: tuple[StepWrite, ...],
        settlement: Settlement | None,
    ) -> CommitOutcome:
        """Commit records sent before (``resent``) and new ones (``fresh``) in one item."""
        steps = (*resent, *fresh)
        lease_seconds = 0.0 if settlement is not None else self._settings.lease_seconds
        item = BatchItem(
            run_id=self.run_id,
            epoch=self.epoch,
            steps=steps,
            lease_seconds=lease_seconds,
            settlement=settlement,
        )
        # The lease runs from when the renewal was sent: however long the commit waits
        # for a lock, the database's expiry is no earlier than this.
        sent_at = self._clock.monotonic()
        outcome = await self._persist(item)
        answered = not isinstance(outcome, Unanswered)
        if isinstance(outcome, Unanswered):
            # Whatever the journal says, nobody told this worker that its fence held
            # when it sent this, let alone now: no call before the store says so.
            self._lease_in_doubt = True
            outcome = await self._read_back(item, fresh, outcome)
        if isinstance(outcome, Fenced):
            raise LeaseLost(f"run {self.run_id} is no longer held at epoch {self.epoch}")
        if not isinstance(outcome, Stored):
            return outcome
        for step in steps:
            self._log.info(
                "step.recorded",
                seq=step.seq,
                kind=step.kind.value,
                tool=step.tool,
                effect=None if step.effect is None else step.effect.value,
                status=step.status.value,
            )
            self._metrics.step_recorded(step.kind, step.effect)
        kept = [step for step in steps if not step.withdraws]
        if kept:
            newest = max(kept, key=lambda s: s.seq)
            self._last_effect = newest.effect
            self._last_status = newest.status if newest.kind is StepKind.TOOL else None
        if settlement is None and answered:
            self._lease.renewed(sent_at, lease_seconds, cancel_requested=outcome.cancel_requested)
            self._lease_in_doubt = False
            self._log.debug("lease.renewed", seconds=lease_seconds)
            self._metrics.lease_renewed()
        return outcome

    async def _read_back(
        self, item: BatchItem, fresh: Sequence[StepWrite], unanswered: Unanswered
    ) -> CommitOutcome:
        """The commit of ``item`` went unanswered: whether it is stored is read from the journal.

        The item's steps were written only if its lease fence held, and all of them or
        none: if every one is in the journal exactly as sent under this epoch, and one
        of them was sent for the first time in it, the item committed, its settlement
        with it. Steps sent before may have been stored by an earlier commit, so
        without a fresh one the journal cannot tell; nor can it when the read fails
        too: the item then counts as not stored, which fails a write closed. Either
        way the read proves records stored, never that the lease holds now, so it
        renews nothing.
        """
        if not fresh:
            self._log.warning("commit.undecided", error=unanswered.error)
            return unanswered
        try:
            journal = {row.seq: row for row in await self._load_steps(self.run_id)}
        except LeasewardError as exc:
            self._log.warning("commit.undecided", error=exc.message)
            return unanswered
        if not all(step.stored_in(journal.get(step.seq), self.epoch) for step in item.steps):
            self._log.warning("commit.not_stored", error=unanswered.error)
            return Refused(unanswered.error)
        self._log.warning("commit.stored", error=unanswered.error)
        # A cancel requested meanwhile is seen at the next renewal.
        return Stored(cancel_requested=self._lease.cancel_requested)

    async def _record_soft(self, step: StepWrite) -> None:
        outcome = await self._send([step])
        if isinstance(outcome, Stored):
            return
        if isinstance(outcome, Refused) and outcome.data_error:
            # Refused for what it holds, not for a passing fault: keeping it pending
            # would only get every later record of this run refused along with it.
            self._drop([step], outcome.error)
            return
        self._pending.append(step)
        self._log.warning("step.record_failed", seq=step.seq, error=outcome.error)

    def _drop(self, steps: Sequence[StepWrite], error: str | None) -> None:
        """Give up on fail-soft records (G5): the run goes on without them in its journal."""
        self._dropped_turns.update(step.seq for step in steps if step.kind is StepKind.PROVIDER)
        self._log.warning(
            "step.dropped", count=len(steps), seqs=[step.seq for step in steps], error=error
        )

    async def _record_intent(self, step: StepWrite) -> None:
        outcome = await self._send([step], after_pending=True)
        if not isinstance(outcome, Stored):
            if not isinstance(outcome, Unanswered):
                # Surely not stored: there is nothing for the settlement to withdraw.
                self._unstarted_intent = None
            # G3: without a durable intent the tool is not called.
            raise StoreError(
                f"the intent of {step.tool} (call {step.call_id}) could not be stored: "
                f"{outcome.error}"
            )

    async def _record_outcome(self, step: StepWrite) -> None:
        outcome = await self._send([step])
        if not isinstance(outcome, Stored):
            self._log.error("audit.failed", seq=step.seq, tool=step.tool, error=outcome.error)
            self._metrics.audit_failed()
            raise AuditPersistenceFailed(
                f"{step.tool} (call {step.call_id}) ran but its result could not be recorded: "
                f"{outcome.error}"
            )

    def _admissible(self) -> bool:
        return (
            not self._lease_in_doubt and self._lease_remaining() >= self._keeper.admission_seconds
        )

    def _lease_remaining(self) -> float:
        return self._lease.remaining(self._clock.monotonic())

    async def _renew_before_call(self) -> None:
        """Renew the lease if it would not last until the keeper's next renewal."""
        if self._admissible():
            return
        outcome = await self._send([])
        if not isinstance(outcome, Stored):
            raise _CallNotAdmitted(
                f"the lease could not be renewed for the next call: {outcome.error}"
            )

    def _admit(self) -> None:
        """G7: the last check before a call, with no await between it and the call.

        The call needs a lease that lasts until the keeper renews it; the keeper
        then renews it while the call runs. A renewal that waited long for the
        store, or a pause of this process, may have eaten the lease: then the
        call does not start, and the run goes back to the queue without
        spending a retry.
        """
        if self._lease_in_doubt:
            raise _CallNotAdmitted("the store has not answered whether the lease still holds")
        if not self._admissible():
            raise _CallNotAdmitted(
                f"the lease has {self._lease_remaining():.1f} s left, less than the "
                f"{self._keeper.admission_seconds:.1f} s a call needs to be renewed in time"
            )

    def _remember_newest(self, steps: Sequence[StepInfo]) -> None:
        if steps:
            newest = max(steps, key=lambda s: s.seq)
            self._last_effect = newest.effect
            self._last_status = newest.status if newest.kind is StepKind.TOOL else None

    # -- settling ---------------------------------------------------------------------

    def _after_failure(self, exc: Exception) -> Settlement:
        failure_class = classify(exc)
        retry_after = exc.retry_after_seconds if isinstance(exc, ProviderError) else None
        recovery = decide_recovery(
            mode=self._run.mode,
            requeues=self._run.requeues,
            last_effect=self._last_effect,
            last_status=self._last_status,
            failure_class=failure_class,
            reaped=False,
            audit_failed=isinstance(exc, AuditPersistenceFailed),
            policy=self._settings.policy,
            retry_after_seconds=retry_after,
        )
        self._log.warning(
            "run.attempt_failed",
            failure_class=failure_class.value,
            action=recovery.action.value,
            error=_describe(exc),
        )
        return settlement_after(
            recovery,
            failure_class=failure_class,
            error=_describe(exc),
            cancel_requested=self._lease.cancel_requested,
        )

    def _stopped(self) -> Settlement:
        """The settlement for an attempt cut off by this process shutting down."""
        if self._run.mode is RunMode.QUEUED and self._last_status is not StepStatus.STARTED:
            return Settlement(Event.RELEASE)
        return self._recovered_from_interruption("the worker stopped during the call")

    def _recovered_from_interruption(self, error: str) -> Settlement:
        """What the reaper would decide for this attempt, had its lease expired now."""
        recovery = decide_recovery(
            mode=self._run.mode,
            requeues=self._run.requeues,
            last_effect=self._last_effect,
            last_status=self._last_status,
            failure_class=FailureClass.CONNECTION,
            reaped=True,
            audit_failed=False,
            policy=self._settings.policy,
        )
        return settlement_after(
            recovery,
            failure_class=FailureClass.CONNECTION,
            error=error,
            cancel_requested=self._lease.cancel_requested,
        )

    async def _settle(self, settlement: Settlement, withdrawn: Sequence[StepWrite] = ()) -> None:
        crash_point("settle")
        try:
            # Requests name the provider turn that asked for their calls: it must be
            # stored with them, never left behind as a pending record.
            outcome = await self._send(
                withdrawn, settlement, after_pending=bool(settlement.requests)
            )
        except LeaseLost:
            self._log.warning("lease.lost", during="settle")
            return
        if not isinstance(outcome, Stored):
            # The lease will expire and the reaper applies recovery from the journal.
            # ("event" is the log line's own name: the transition goes under another key.)
            self._log.error(
                "run.settle_failed", transition=settlement.event.value, error=outcome.error
            )
            return
        self.settlement = settlement
        self._metrics.run_settled(settlement.target)
        if self._pending:
            # Fail-soft records the store kept refusing; the run is over without them.
            self._drop(self._pending, None)
            self._pending.clear()
        fields: dict[str, Any] = {"state": settlement.target.value}
        if settlement.reason is not None:
            fields["reason"] = settlement.reason.value
        if settlement.failure_class is not None:
            fields["failure_class"] = settlement.failure_class.value
        if settlement.event is Event.DEAD_LETTER:
            self._log.error("run.dead_lettered", error=settlement.error, **fields)
            self._metrics.dead_lettered(settlement.reason)
        elif settlement.target in _WAITING:
            self._log.info("run.parked", calls=[r.call_id for r in settlement.requests], **fields)
        elif settlement.event in (Event.REQUEUE, Event.RELEASE):
            self._log.info(
                "run.requeued" if settlement.event is Event.REQUEUE else "lease.released",
                delay_seconds=settlement.delay_seconds,
                **fields,
            )
        else:
            self._log.info("run.settled", **fields)
