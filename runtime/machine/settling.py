"""Settling: how an attempt ends, on success, failure, a cancel, or a lost lease."""

from __future__ import annotations

from typing import Any

from leaseward.runtime.commits import Refused, Unanswered
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import Event, RunMode, StepStatus, decide_recovery
from leaseward.runtime.machine.commands import Command, CrashPoint, Log, Metric, Stop
from leaseward.runtime.machine.core import MachineCore
from leaseward.runtime.machine.phases import ReadingBack, Sending, Settling, Stopped
from leaseward.runtime.machine.state import WAITING_STATES, Failure
from leaseward.runtime.settlements import Settlement, settlement_after

__all__ = ["SettlingSteps"]


class SettlingSteps(MachineCore):
    """Ending the attempt."""

    __slots__ = ()

    def _settle(
        self, settlement: Settlement, withdrawn: tuple[StepWrite, ...] = ()
    ) -> tuple[Command, ...]:
        self.protecting = None
        # Requests name the provider turn that asked for their calls: it must be
        # stored with them, never left behind as a pending record.
        return (
            CrashPoint("settle"),
            *self._send(
                Settling(settlement),
                withdrawn,
                settlement,
                after_pending=bool(settlement.requests),
            ),
        )

    def _settled(
        self, settlement: Settlement, failed: Refused | Unanswered | None
    ) -> tuple[Command, ...]:
        if failed is not None:
            # The lease will expire and the reaper applies recovery from the journal.
            # ("event" is the log line's own name: the transition goes under another key.)
            self.phase = Stopped(None)
            return (
                Log.of(
                    "error",
                    "run.settle_failed",
                    transition=settlement.event.value,
                    error=failed.error,
                ),
                Stop(None),
            )
        self.phase = Stopped(settlement)
        observed: list[Command] = [Metric("run_settled", (settlement.target,))]
        if self.buffer.pending:
            # Fail-soft records the store kept refusing; the run is over without them.
            observed.append(self._drop(self.buffer.pending, None))
        fields: dict[str, Any] = {"state": settlement.target.value}
        if settlement.reason is not None:
            fields["reason"] = settlement.reason.value
        if settlement.failure_class is not None:
            fields["failure_class"] = settlement.failure_class.value
        if settlement.event is Event.DEAD_LETTER:
            observed.append(Log.of("error", "run.dead_lettered", error=settlement.error, **fields))
            observed.append(Metric("dead_lettered", (settlement.reason,)))
        elif settlement.target in WAITING_STATES:
            calls = [r.call_id for r in settlement.requests]
            observed.append(Log.of("info", "run.parked", calls=calls, **fields))
        elif settlement.event in (Event.REQUEUE, Event.RELEASE):
            observed.append(
                Log.of(
                    "info",
                    "run.requeued" if settlement.event is Event.REQUEUE else "lease.released",
                    delay_seconds=settlement.delay_seconds,
                    **fields,
                )
            )
        else:
            observed.append(Log.of("info", "run.settled", **fields))
        return (*observed, Stop(settlement))

    def _lease_lost(self) -> tuple[Command, ...]:
        self.protecting = None
        self.phase = Stopped(None)
        return (Log.of("warning", "lease.lost"), Stop(None))

    def _cancelled(self) -> tuple[Command, ...]:
        if isinstance(self.phase, Sending | ReadingBack):
            sending = self.phase if isinstance(self.phase, Sending) else self.phase.sending
            if isinstance(sending.purpose, Settling):
                # The settle's answer is abandoned: the lease expires and the reaper recovers.
                self.phase = Stopped(None)
                return (Stop(None),)
        withdrawn = self._withdraw_unstarted()
        return self._settle(self._stopped(), withdrawn)

    def _fail(self, failure: Failure) -> tuple[Command, ...]:
        withdrawn = self._withdraw_unstarted()
        last_effect, last_status = self.newest
        recovery = decide_recovery(
            mode=self.mode,
            requeues=self.requeues,
            last_effect=last_effect,
            last_status=last_status,
            failure_class=failure.failure_class,
            reaped=False,
            audit_failed=failure.audit_failed,
            policy=self.policy,
            retry_after_seconds=failure.retry_after_seconds,
        )
        observed = Log.of(
            "warning",
            "run.attempt_failed",
            failure_class=failure.failure_class.value,
            action=recovery.action.value,
            error=failure.error,
        )
        settlement = settlement_after(
            recovery,
            failure_class=failure.failure_class,
            error=failure.error,
            cancel_requested=self.cancel_requested,
        )
        return (observed, *self._settle(settlement, withdrawn))

    def _stopped(self) -> Settlement:
        """The settlement for an attempt cut off by this process shutting down, or, for an
        interactive run, by its caller's task being cancelled."""
        if self.mode is RunMode.QUEUED:
            if self.newest[1] is not StepStatus.STARTED:
                return Settlement(Event.RELEASE)
            return self._recovered_from_interruption("the worker stopped during the call")
        # An interactive run ends with its caller's task as well as with its worker.
        return self._recovered_from_interruption(
            "the run stopped before it finished: its caller was cancelled or its worker shut down"
        )

    def _recovered_from_interruption(self, error: str) -> Settlement:
        """What the reaper would decide for this attempt, had its lease expired now."""
        last_effect, last_status = self.newest
        recovery = decide_recovery(
            mode=self.mode,
            requeues=self.requeues,
            last_effect=last_effect,
            last_status=last_status,
            failure_class=FailureClass.CONNECTION,
            reaped=True,
            audit_failed=False,
            policy=self.policy,
        )
        return settlement_after(
            recovery,
            failure_class=FailureClass.CONNECTION,
            error=error,
            cancel_requested=self.cancel_requested,
        )
