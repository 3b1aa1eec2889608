"""Commits: records sent behind the pending ones, their answers, and the read-back of an
unanswered one."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored, Unanswered
from leaseward.runtime.conversation import usage_from_json
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import load_json
from leaseward.runtime.errors import AuditPersistenceFailed, StoreError
from leaseward.runtime.journal import StepInfo, StepWrite
from leaseward.runtime.lifecycle import StepKind
from leaseward.runtime.machine.commands import (
    AFTER_INTENT,
    CHECK_ADMISSION,
    LEASE_RENEWED,
    Command,
    Commit,
    Log,
    Metric,
    Park,
    ReadBack,
    RecordIntent,
    RecordOutcome,
    RecordSoft,
    Renew,
    Settle,
    Stop,
)
from leaseward.runtime.machine.core import MachineCore
from leaseward.runtime.machine.events import Committed
from leaseward.runtime.machine.phases import (
    Admitting,
    Intent,
    Outcome,
    Purpose,
    Raised,
    ReadingBack,
    Renewal,
    Sending,
    Settling,
    Soft,
    Stopped,
)
from leaseward.runtime.machine.state import WAITING_STATES, Failure
from leaseward.runtime.settlements import Settlement

__all__ = ["RENEW_WITH_LEFT", "CommittingSteps"]

RENEW_WITH_LEFT = 2 / 3
"""A commit renews the lease once no more than this share of it is left: a third of
its length after the last renewal, as often as the keeper renews the leases of calls
in flight. Before then it only fences, and the run's row is not written: most commits
of a run that steps without waiting are so. A call still starts only with the lease
its admission asks for, renewed first where it is short (``Renew``)."""

# A metric per kind and effect of step, made once, as the commands shared in commands.py.
_STEP_RECORDED = {
    (kind, effect): Metric("step_recorded", (kind, effect))
    for kind in StepKind
    for effect in (None, *ToolEffect)
}

# What each purpose of a commit is sent as.
_COMMANDS: dict[type[Any], type[Commit]] = {
    Soft: RecordSoft,
    Intent: RecordIntent,
    Outcome: RecordOutcome,
    Raised: RecordOutcome,
    Renewal: Renew,
    Settling: Settle,
}


class CommittingSteps(MachineCore):
    """Sending records to the store and carrying on once it answers."""

    __slots__ = ()

    def _send(
        self,
        purpose: Purpose,
        fresh: tuple[StepWrite, ...],
        settlement: Settlement | None = None,
        *,
        after_pending: bool = False,
    ) -> tuple[Command, ...]:
        """Commit ``fresh`` (and a renewal or ``settlement``) behind the pending records.

        With ``after_pending`` they are stored only together with every pending
        record: a write's intent must never reach the journal without the provider
        turn that asked for it. Otherwise, if the commit is not stored, the pending
        records stay pending and the rest is sent again alone.
        """
        if settlement is not None or isinstance(purpose, Renewal):
            renew_from = -math.inf
        else:
            renew_from = self.deadline - self.lease_seconds * RENEW_WITH_LEFT
        sending = Sending(
            purpose, self.buffer.pending, fresh, settlement, after_pending, renew_from
        )
        return self._commit(sending)

    def _commit(self, sending: Sending) -> tuple[Command, ...]:
        self.phase = sending
        lease_seconds = 0.0 if sending.settlement is not None else self.lease_seconds
        settlement = sending.settlement
        command = _COMMANDS[type(sending.purpose)]
        if settlement is not None and settlement.target in WAITING_STATES:
            command = Park
        return (command(sending.steps, lease_seconds, settlement, sending.renew_from),)

    def _committed(self, sending: Sending, event: Committed) -> tuple[Command, ...]:
        outcome = event.outcome
        if isinstance(outcome, Unanswered):
            # Whatever the journal says, nobody told this worker that its fence held
            # when it sent this, let alone now: no call before the store says so.
            self.in_doubt = True
            if sending.fresh:
                self.phase = ReadingBack(sending, outcome)
                return (ReadBack(),)
            return (
                Log.of("warning", "commit.undecided", error=outcome.error),
                *self._sent(sending, outcome, answered=False, sent_at=event.sent_at),
            )
        return self._sent(sending, outcome, answered=True, sent_at=event.sent_at)

    def _read_back(self, phase: ReadingBack, rows: Sequence[StepInfo]) -> tuple[Command, ...]:
        """The commit went unanswered: whether it is stored is read from the journal.

        The item's steps were written only if its lease fence held, and all of them
        or none: if every one is in the journal exactly as sent under this epoch, and
        one of them was sent for the first time in it, the item committed. The read
        proves records stored, never that the lease holds now: it renews nothing.
        """
        sending, unanswered = phase.sending, phase.unanswered
        journal = {row.seq: row for row in rows}
        if not all(step.stored_in(journal.get(step.seq), self.epoch) for step in sending.steps):
            return (
                Log.of("warning", "commit.not_stored", error=unanswered.error),
                *self._sent(sending, Refused(unanswered.error), answered=False, sent_at=0.0),
            )
        return (
            Log.of("warning", "commit.stored", error=unanswered.error),
            *self._sent(
                sending,
                Stored(cancel_requested=self.cancel_requested),
                answered=False,
                sent_at=0.0,
            ),
        )

    def _sent(
        self, sending: Sending, outcome: CommitOutcome, *, answered: bool, sent_at: float
    ) -> tuple[Command, ...]:
        if isinstance(outcome, Fenced):
            if isinstance(sending.purpose, Settling):
                self.phase = Stopped(None)
                return (Log.of("warning", "lease.lost", during="settle"), Stop(None))
            return self._lease_lost()
        if isinstance(outcome, Stored):
            observed = list(self._recorded(sending.steps))
            if sending.settlement is None and answered:
                self.cancel_requested = self.cancel_requested or outcome.cancel_requested
                self.in_doubt = False
                if sent_at >= sending.renew_from:
                    self.deadline = max(self.deadline, sent_at + self.lease_seconds)
                    if self.observing:
                        observed.append(
                            Log.of("debug", "lease.renewed", seconds=self.lease_seconds)
                        )
                    observed.append(LEASE_RENEWED)
            if sending.first_try is None:
                self.buffer = self.buffer.stored()
            elif isinstance(sending.first_try, Refused) and sending.first_try.data_error:
                # The rest went in without them, so the store refuses what the pending
                # records hold: sent again, they would be refused again, forever.
                observed.append(self._drop(self.buffer.pending, sending.first_try.error))
            return (*observed, *self._done(sending, None))
        if sending.first_try is None and sending.resent and not sending.after_pending:
            retry = msgspec.structs.replace(sending, resent=(), first_try=outcome)
            return (
                Log.of("warning", "step.deferred", count=len(sending.resent), error=outcome.error),
                *self._commit(retry),
            )
        return self._done(sending, outcome)

    def _recorded(self, steps: Sequence[StepWrite]) -> tuple[Log | Metric, ...]:
        observed: list[Log | Metric] = []
        for step in steps:
            if self.observing:
                observed.append(
                    Log.of(
                        "info",
                        "step.recorded",
                        seq=step.seq,
                        kind=step.kind.value,
                        tool=step.tool,
                        call_id=step.call_id,
                        effect=None if step.effect is None else step.effect.value,
                        status=step.status.value,
                    )
                )
            observed.append(_STEP_RECORDED[step.kind, step.effect])
            if (
                step.kind is StepKind.PROVIDER
                and step.output_json is not None
                # A reply without usage never spells the key: it need not be read back.
                and '"usage":' in step.output_json
            ):
                # Counted from the journal's row, once it is stored: a resumed run reads
                # its earlier turns back and never records them, so never counts them, again.
                reply = load_json(step.output_json)
                usage = usage_from_json(reply)
                if usage is not None:
                    observed.append(
                        Metric(
                            "tokens_recorded",
                            (self.agent.name, reply.get("model"), usage),
                        )
                    )
        kept = [step for step in steps if not step.withdraws]
        if kept:
            newest = max(kept, key=lambda s: s.seq)
            self.newest = (
                newest.effect,
                newest.status if newest.kind is StepKind.TOOL else None,
            )
        return tuple(observed)

    def _drop(self, steps: Sequence[StepWrite], error: str | None) -> Log:
        """Give up on fail-soft records (G5): the run goes on without them in its journal."""
        self.buffer = self.buffer.drop(steps)
        return Log.of(
            "warning",
            "step.dropped",
            count=len(steps),
            seqs=[step.seq for step in steps],
            error=error,
        )

    def _done(self, sending: Sending, failed: Refused | Unanswered | None) -> tuple[Command, ...]:
        """Carry on after a commit: ``failed`` says how it was not stored, None if it was."""
        purpose = sending.purpose
        if isinstance(purpose, Soft):
            observed: tuple[Command, ...] = ()
            if isinstance(failed, Refused) and failed.data_error:
                # Refused for what it holds, not for a passing fault: kept pending, it
                # would get every later record of this run refused along with it.
                observed = (self._drop(sending.fresh, failed.error),)
            elif failed is not None:
                self.buffer = msgspec.structs.replace(
                    self.buffer, pending=(*self.buffer.pending, *sending.fresh)
                )
                observed = tuple(
                    Log.of("warning", "step.record_failed", seq=step.seq, error=failed.error)
                    for step in sending.fresh
                )
            if purpose.then_fail is not None:
                return (*observed, *purpose.after, *self._fail(purpose.then_fail))
            return (*observed, *purpose.after, *self._next())
        if isinstance(purpose, Intent):
            if failed is None:
                self.phase = Admitting(purpose.turn)
                return (*purpose.after, AFTER_INTENT, CHECK_ADMISSION)
            # The settlement withdraws the intent even when the store says it is not
            # stored: withdrawing one that is not there changes nothing, while an
            # intent a store committed but answered as refused would otherwise be
            # left open for a call that never started, and dead-letter the next attempt.
            call = purpose.turn.pending.call
            # G3: without a durable intent the tool is not called.
            error = StoreError(
                f"the intent of {call.name} (call {call.call_id}) could not be stored: "
                f"{failed.error}"
            )
            return self._fail(Failure.of(error))
        if isinstance(purpose, Outcome):
            if failed is None:
                return self._next()
            step = purpose.step
            return (
                Log.of("error", "audit.failed", seq=step.seq, tool=step.tool, error=failed.error),
                Metric("audit_failed"),
                *self._fail(
                    Failure.of(
                        AuditPersistenceFailed(
                            f"{step.tool} (call {step.call_id}) ran but its result could not "
                            f"be recorded: {failed.error}"
                        )
                    )
                ),
            )
        if isinstance(purpose, Raised):
            observed = ()
            if failed is not None:
                # The intent is still there, open: the write is handled as interrupted.
                step = purpose.step
                observed = (
                    Log.of(
                        "warning",
                        "step.record_failed",
                        seq=step.seq,
                        tool=step.tool,
                        error=failed.error,
                    ),
                )
            return (*observed, *self._fail(purpose.failure))
        if isinstance(purpose, Renewal):
            if failed is None:
                self.phase = Admitting(purpose.call, renewed=True)
                return (CHECK_ADMISSION,)
            return self._not_admitted(
                f"the lease could not be renewed for the next call: {failed.error}"
            )
        return self._settled(purpose.settlement, failed)
