"""The RunActor: carries out the commands of one run's RunMachine (``runtime/machine/``,
where every decision is) through the Persister, the provider, the tools and the keeper."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from leaseward.actors.bounds import SharedBounds
from leaseward.actors.first_step import Finished, first_step
from leaseward.actors.lease_keeper import Lease, LeaseKeeper, default_margin
from leaseward.actors.metrics import Metrics
from leaseward.actors.tracing import RunTrace, TraceSettings
from leaseward.runtime import machine as m
from leaseward.runtime.agents import Agent
from leaseward.runtime.clock import Clock
from leaseward.runtime.commits import CommitOutcome, Unanswered
from leaseward.runtime.errors import CallNotStarted, LeasewardError, ToolError
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import RecoveryPolicy
from leaseward.runtime.logs import get_logger
from leaseward.runtime.runs import RunRecord
from leaseward.runtime.settlements import Settlement
from leaseward.runtime.tools import ToolContext
from leaseward.storage.crash_points import ARMED, crash_point
from leaseward.storage.protocol import BatchItem

__all__ = [
    "SETTLE_TIMEOUT_SECONDS",
    "CallRaisedCancelled",
    "RunActor",
    "RunSettings",
    "WriteInFlight",
]

SETTLE_TIMEOUT_SECONDS = 10.0

log = get_logger("leaseward.run")

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
    tracing: TraceSettings = attrs.Factory(TraceSettings)


@attrs.frozen
class WriteInFlight:
    """A call with a durable intent that has started and whose outcome is not yet recorded."""

    run_id: str
    epoch: int
    tool: str
    call_id: str


class CallRaisedCancelled(Exception):
    """The call raised CancelledError, though nothing cancelled it: awaiting a task or
    future of its own that something cancelled raises it so. It is the call's failure;
    let through, it would cancel the task group of the application's Runtime."""

    def __init__(self, raised: BaseException) -> None:
        text = f": {raised}" if str(raised) else ""
        super().__init__(
            f"the call raised CancelledError, though nothing cancelled it{text}; a task or "
            "future it awaited was cancelled"
        )


def _own_cancel(raised: BaseException) -> CallRaisedCancelled:
    """``raised`` as the call's failure, or raised again when it is a cancel of this task
    (a timeout, a lost lease, a stop), which asyncio counts until it is handled."""
    task = asyncio.current_task()
    if task is None or task.cancelling():
        raise raised
    failure = CallRaisedCancelled(raised)
    failure.__cause__ = raised
    return failure


class RunActor:
    """Executes one claimed run under its lease epoch until it settles or loses the lease.

    Once a call with a durable intent starts, a drain or a cancel from outside waits
    for it to return and its outcome to be recorded; only ``cut_off()`` lets the
    cancel through. The settlement is shielded, within ``SETTLE_TIMEOUT_SECONDS``.
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
        under_way: Callable[[str, int], None] | None = None,
        bounds: SharedBounds | None = None,
    ) -> None:
        self.run_id = run.id
        self.epoch = run.epoch
        self._machine = m.RunMachine.for_run(
            run,
            agent,
            lease_seconds=settings.lease_seconds,
            admission_seconds=keeper.admission_seconds,
            lease_deadline=lease_deadline,
            policy=settings.policy,
        )
        self._agent = agent
        self._persist = persist
        self._load_steps = load_steps
        self._load_requests = load_requests
        self._clock = clock
        self._keeper = keeper
        self._metrics = metrics if metrics is not None else Metrics()
        self._draining = draining
        # The bounds of intents' commits: one timer for all the runs that share them.
        self._bounds = bounds if bounds is not None else SharedBounds()
        # Told once, at the first commit answered or the first call begun: from then on
        # the lease is renewed by the run's commits or the keeper, not only by its claim.
        self._under_way = under_way
        # On the monotonic clock, from when the claim was sent: never the database's
        # lease_expires_at, which a worker's clock may be far from.
        self._lease = Lease(
            run.id, run.epoch, deadline=lease_deadline, cancel_requested=run.cancel_requested
        )
        self._log = log.bind(run_id=run.id, epoch=run.epoch, worker_id=worker_id, agent=agent.name)
        self._trace = RunTrace(run, agent, worker_id, settings.tracing)
        # Both asked at every event: whether the attempt's span records is set for good
        # as it starts, and the logger's check is taken once, bound to its level.
        self._recording = self._trace.recording
        self._info_enabled = self._log.enabled_check("info")
        # Shielded while a write with an intent is in flight (G13).
        self._scope: anyio.CancelScope | None = None
        # Whether it is, kept here: most events leave it as it was, and anyio's property
        # is a call each time it is read or set.
        self._shielded = False
        self._cut_off = False
        self._settling = False
        # When the intent whose bound passed without an answer was sent: its commit is
        # answered Unanswered once the guard that bound cancelled has ended.
        self._unanswered_intent: float | None = None
        self._raised: Exception | None = None
        self.settlement: Settlement | None = None
        # The event loop's clock, which anyio's deadlines are on under asyncio: taken as
        # the run starts, for every look-up of the running loop is a system call (getpid).
        self._loop_time: Callable[[], float]

    async def run(self) -> Settlement | None:
        """Run until settled; returns the settlement stored, or None if none was."""
        self._loop_time = asyncio.get_running_loop().time
        try:
            with anyio.CancelScope() as self._scope:
                self._see_news()
                await self._drive(self._machine.start())
        except anyio.get_cancelled_exc_class():
            # A provider turn in flight, if there is one, was stopped with the worker.
            self._trace.answered(None)
            if not self._machine.stopped:
                self._settling = True
                await self._settle_within_bound(self._machine.feed(m.Cancelled()))
            raise
        finally:
            self._trace.ended(self.settlement)
        return self.settlement

    @property
    def writing(self) -> WriteInFlight | None:
        """The call with a durable intent in flight, if there is one."""
        ref = self._machine.protecting
        return (
            None if ref is None else WriteInFlight(self.run_id, self.epoch, ref.tool, ref.call_id)
        )

    def cut_off(self) -> WriteInFlight | None:
        """Let a cancel reach the write in flight; returns that write, if there is one."""
        self._cut_off = True
        if self._scope is not None:
            self._scope.shield = self._shielded = False
        return self.writing

    async def _drive(self, commands: Sequence[m.Command]) -> None:
        """Carry out ``commands``, and those the machine answers with, until it stops.

        The calls run in a guard: a scope given a call's deadline while the call is
        in flight, which the keeper cancels to cut the call off. One guard serves
        the calls of an attempt until one of them is stopped: entering and leaving a
        scope around every call cost more than a tenth of a step. It shields the
        commits of intents too (see ``_commit``).
        """
        going_on: Sequence[m.Command] | None = commands
        while going_on is not None:
            with anyio.CancelScope() as guard:
                going_on = await self._steps(going_on, guard)
            if not guard.cancelled_caught:
                continue
            sent_at, self._unanswered_intent = self._unanswered_intent, None
            if sent_at is not None:
                unanswered = (
                    f"the intent's commit was not answered within {SETTLE_TIMEOUT_SECONDS:g} s"
                )
                going_on = self._fed(m.Committed(Unanswered(unanswered), sent_at))
                continue
            stopped = self._stopped_call()
            self._trace.interrupted(stopped)
            going_on = self._fed(stopped)

    async def _steps(
        self, commands: Sequence[m.Command], guard: anyio.CancelScope
    ) -> Sequence[m.Command] | None:
        """Carry out commands in ``guard`` until the machine stops (None), or until a call
        ended as the guard was cancelled (the commands to go on with in a new guard)."""
        while True:
            action = commands[-1]
            if len(commands) > 1:
                self._observe(commands)
            if type(action) is m.CheckAdmission:
                # A stop that came since the run's last await takes effect here, before
                # the call starts: one that landed while the intent was on its way (its
                # commit is shielded), or while the answer that woke the run was
                # already there (a reap's cancel, which waits for the next await).
                await anyio.lowlevel.checkpoint_if_cancelled()
                # Nothing else ran since the last event: no news to see, and a cancel
                # of the guard would have been raised by the checkpoint.
                commands = self._answered(
                    m.AdmissionCheck(now=self._clock.monotonic(), wall=self._clock.now())
                )
                continue
            event: m.MachineEvent
            if isinstance(action, m.Commit):
                if isinstance(action, m.Settle) and not self._settling:
                    self._settling = True
                    await self._settle_within_bound((action,))
                    return None
                event = await self._commit(action, guard)
                if self._under_way is not None:
                    self._set_under_way()
            elif isinstance(action, m.Stop):
                self.settlement = action.settlement
                return None
            else:
                event = await self._carry_out(action, guard)
            commands = self._fed(event)
            if guard.cancel_called:
                return commands

    async def _settle_within_bound(self, commands: Sequence[m.Command]) -> None:
        """Carry out the attempt's last commands, shielded, for at most the bound.

        Past the bound the actor stops with no answer, while the Persister may still
        commit what it was sent (a store locked longer than its busy timeout): nothing
        else would tell the worker's log that this run ended unsettled, nor what
        becomes of it.
        """
        last = commands[-1]
        settlement = last.settlement if isinstance(last, m.Commit) else None
        with anyio.move_on_after(SETTLE_TIMEOUT_SECONDS, shield=True):
            await self._drive(commands)
        if not self._machine.stopped:
            self._log.error(
                "run.settle_unanswered",
                transition=None if settlement is None else settlement.event.value,
                error=(
                    f"the store did not answer within {SETTLE_TIMEOUT_SECONDS:g} s: what was"
                    " sent may still be stored; if not, the reaper settles the run once"
                    " its lease expires"
                ),
            )

    def _fed(self, event: m.MachineEvent) -> Sequence[m.Command]:
        """The machine's answer to ``event``, which came after other tasks had their turn."""
        self._see_news()
        return self._answered(event)

    def _answered(self, event: m.MachineEvent) -> Sequence[m.Command]:
        """The machine's answer to ``event``, news already seen."""
        commands = self._machine.feed(event)
        # G13: a call with a durable intent is shielded; only cut_off() stops it.
        shielded = self._machine.protecting is not None and not self._cut_off
        if shielded is not self._shielded and self._scope is not None:
            self._scope.shield = self._shielded = shielded
        return commands

    def _stopped_call(self) -> m.MachineEvent:
        """What stopped the call in the guard: the keeper, for a lease lost or one it
        could not renew, or else the call's timeout."""
        lease = self._lease
        if lease.lost:
            return m.LeaseLost()
        if lease.cut_off is not None:
            return m.CutOff(lease.cut_off)
        return m.TimedOut()

    def _set_under_way(self) -> None:
        assert self._under_way is not None
        self._under_way(self.run_id, self.epoch)
        self._under_way = None

    def _see_news(self) -> None:
        """As the machine starts and before every event: a drain asked for meanwhile, and
        whether a log handler or the trace takes the run's routine observations (a level
        may be lowered while the run goes on)."""
        machine = self._machine
        if self._draining is not None and self._draining.is_set():
            machine.feed(m.DrainRequested())
        machine.observing = self._recording or self._info_enabled()

    def _observe(self, commands: Sequence[m.Command]) -> None:
        """Carry out the observations of a batch: every command but the last, its action."""
        # In the order of how often they come: a step has metrics and crash points
        # to pass, and logs only when something goes wrong or is watched.
        for command in commands[:-1]:
            if isinstance(command, m.Metric):
                getattr(self._metrics, command.name)(*command.args)
            elif isinstance(command, m.CrashPoint):
                if ARMED:
                    crash_point(command.name)
            elif isinstance(command, m.Log):
                # Most of a step's events are below the level logged: their fields
                # are not even gathered.
                if self._log.enabled_for(command.level):
                    self._emit(command)
                self._trace.observed(command)

    def _emit(self, command: m.Log) -> None:
        if command.traceback and self._raised is not None:
            try:
                raise self._raised
            except Exception:
                # The record carries the traceback for handlers that print it.
                self._log.exception(command.event, **dict(command.fields))
        else:
            getattr(self._log, command.level)(command.event, **dict(command.fields))

    async def _carry_out(self, action: m.Command, guard: anyio.CancelScope) -> m.MachineEvent:
        if isinstance(action, m.AskProvider):
            if not self._recording:
                # With no span of the attempt's recording, none of the call's would.
                return await self._ask(action, guard)
            self._trace.asking(action.request)
            entered = self._trace.entered()
            try:
                replied = await self._ask(action, guard)
            finally:
                self._trace.left(entered)
            self._trace.answered(replied)
            return replied
        if isinstance(action, m.CallTool):
            if not self._recording:
                return await self._call(action, guard)
            self._trace.calling(action)
            entered = self._trace.entered()
            try:
                returned = await self._call(action, guard)
            finally:
                self._trace.left(entered)
            self._trace.returned(returned)
            return returned
        try:
            steps = tuple(await self._load_steps(self.run_id))
            if isinstance(action, m.ReadBack):
                return m.JournalRead(steps)
            requests = tuple(await self._load_requests(self.run_id))
            self._trace.loaded(steps, requests)
            return m.JournalLoaded(steps, requests)
        except Exception as exc:
            if isinstance(action, m.ReadBack):
                return m.ReadFailed(exc.message if isinstance(exc, LeasewardError) else str(exc))
            return m.LoadFailed(exc)

    async def _commit(self, action: m.Commit, guard: anyio.CancelScope) -> m.Committed:
        # The lease runs from when the renewal was sent: however long the commit waits
        # for a lock, the database's expiry is no earlier than this.
        sent_at = self._clock.monotonic()
        item = BatchItem(
            self.run_id, self.epoch, action.steps, action.renewal_at(sent_at), action.settlement
        )
        lease, keeper = self._lease_to_renew(), self._keeper
        keeper.hold_commit(lease)
        try:
            if not isinstance(action, m.RecordIntent):
                return m.Committed(await self._persist(item), sent_at)
            # Shielded, within a bound: a stop that lands while the intent is on its way
            # waits for the answer, unless the store hangs. The guard is the shield, as no
            # call is in flight for the keeper to cut off through it: a scope of the
            # intent's own cost a write step three microseconds. The bound is kept by the
            # timer the runs share; when it passes it cancels the guard, the one thing
            # that can while the shield is up, and _drive answers the intent then.
            guard.shield = True
            self._bounds.bound(guard, self._loop_time() + SETTLE_TIMEOUT_SECONDS)
            try:
                return m.Committed(await self._persist(item), sent_at)
            except anyio.get_cancelled_exc_class():
                if guard.cancel_called:
                    self._unanswered_intent = sent_at
                raise
            finally:
                self._bounds.release(guard)
                guard.shield = False
        finally:
            keeper.release_commit(lease)
            self._see_renewals()

    def _ask(self, action: m.AskProvider, guard: anyio.CancelScope) -> Awaitable[m.MachineEvent]:
        """The provider's answer to ``action``, as an event: not a coroutine, so that the
        commonest action has no frame of its own."""
        request, began = action.request, self._clock.monotonic()
        return self._guarded(
            lambda: self._agent.provider.complete(request),
            action.timeout_seconds,
            guard,
            lambda reply: m.ProviderReplied(
                reply, round((self._clock.monotonic() - began) * 1000, 1)
            ),
            m.ProviderFailed,
        )

    def _call(self, action: m.CallTool, guard: anyio.CancelScope) -> Awaitable[m.MachineEvent]:
        bound = self._agent.tools.get(action.tool)
        assert bound is not None, "the machine calls only known tools"
        ctx = ToolContext(
            run_id=self.run_id,
            epoch=self.epoch,
            call_id=action.call_id,
            idempotency_key=action.idempotency_key,
            log=self._log.bind(tool=action.tool, call_id=action.call_id),
            lease_remaining=lambda: self._lease.remaining(self._clock.monotonic()),
        )
        return self._guarded(
            lambda: bound.implementation(ctx, action.arguments),
            action.timeout_seconds,
            guard,
            m.ToolReturned,
            self._tool_failed,
        )

    def _lease_to_renew(self) -> Lease:
        """The lease as the keeper is to renew it: from what this attempt's own commits
        made of it."""
        lease = self._lease
        lease.deadline = max(lease.deadline, self._machine.deadline)
        return lease

    def _see_renewals(self) -> None:
        """Tell the machine what the keeper's renewals made of the lease meanwhile; most
        calls and commits end before any renewal, and then there is nothing to tell."""
        lease, machine = self._lease, self._machine
        if lease.deadline > machine.deadline or (
            lease.cancel_requested and not machine.cancel_requested
        ):
            machine.feed(m.LeaseRenewed(lease.deadline, lease.cancel_requested))

    def _tool_failed(self, exc: Exception) -> m.MachineEvent:
        if isinstance(exc, ToolError):
            return m.ToolFailed(exc.message)
        if isinstance(exc, CallNotStarted):
            return m.ToolNotStarted(exc)
        self._raised = exc
        return m.ToolRaised(exc)

    async def _guarded(
        self,
        call: Callable[[], Awaitable[Any]],
        timeout: float,
        guard: anyio.CancelScope,
        returned: Callable[[Any], m.MachineEvent],
        raised: Callable[[Exception], m.MachineEvent],
    ) -> m.MachineEvent:
        """Make ``call``, bounded by its timeout, while the keeper renews the lease.

        Bounded from its first suspension: before, nothing could stop it. If it is
        stopped, the cancellation goes on to ``_drive``, where the guard ends.
        """
        deadline = self._loop_time() + timeout
        # Before the call starts: it may read its lease (ctx.lease_remaining) at once.
        lease, keeper = self._lease_to_renew(), self._keeper
        if self._under_way is not None:
            self._set_under_way()
        try:
            step = first_step(call())
            if isinstance(step, Finished):
                return returned(step.value)
        except Exception as exc:
            return raised(exc)
        except asyncio.CancelledError as exc:
            return raised(_own_cancel(exc))
        guard.deadline = deadline
        keeper.hold(lease, guard)
        try:
            return returned(await step)
        except Exception as exc:
            return raised(exc)
        except asyncio.CancelledError as exc:
            return raised(_own_cancel(exc))
        finally:
            keeper.release(lease)
            guard.deadline = math.inf
            self._see_renewals()
