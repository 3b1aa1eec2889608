"""The LeaseKeeper: renews the leases of runs inside a call, and stops a call its lease
cannot cover any more.

A lease is short (seconds), so that a dead worker's runs are found in seconds; a
call may last minutes. While calls are in flight, the keeper renews every one of
their leases every ``lease_seconds / 3``, all of them in one grouped write through
the Persister, with those of runs whose commit waits for its turn there. If the
renewals fail for so long that a lease comes within the margin of its end, the
keeper cancels that call: a live worker stops before the store may hand its run to
anybody else.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager

import anyio
import attrs
from anyio.abc import TaskStatus

from leaseward.actors.metrics import Metrics
from leaseward.actors.store_faults import StoreFaults
from leaseward.runtime.clock import Clock
from leaseward.runtime.commits import CommitOutcome, Fenced, Refused, Stored
from leaseward.runtime.errors import LeasewardError
from leaseward.runtime.logs import get_logger
from leaseward.storage.protocol import BatchItem

__all__ = [
    "GUARD_TICK_SECONDS",
    "LOOP_LATE_SECONDS",
    "RENEWALS_PER_LEASE",
    "KeeperStats",
    "Lease",
    "LeaseKeeper",
    "RenewWriter",
    "default_margin",
]

RENEWALS_PER_LEASE = 3
"""Renewals a lease gets in its length: one may fail and the next still lands in time."""
GUARD_TICK_SECONDS = 0.25
LOOP_LATE_SECONDS = 1.0
"""The least lateness of the event loop that ``worker.loop_blocked`` reports, whatever
the guard's margin: a loaded machine's loop is often a few tenths of a second late."""
"""The guard looks at least this often, so that a clock that jumped (the process was
paused) or was moved by a test is noticed promptly, not at the next planned wakeup."""

RenewWriter = Callable[[Sequence[BatchItem]], Awaitable[tuple[CommitOutcome, ...]]]
"""Writes lease renewals together, one outcome each: the Persister's ``renew``."""

log = get_logger("leaseward.leases")


def default_margin(lease_seconds: float) -> float:
    """The guard's margin when none is given: half a renewal interval, so one
    renewal may fail and the call still goes on."""
    return lease_seconds / (2 * RENEWALS_PER_LEASE)


@attrs.define(eq=False)
class Lease:
    """One run's lease as its holder knows it, on the holder's monotonic clock.

    The deadline is when the renewal that granted it was *sent*, plus its
    seconds: the store dated it no earlier, so the store's expiry is never
    before this one, whatever the two wall clocks say.
    """

    run_id: str
    epoch: int
    deadline: float
    cancel_requested: bool = False
    lost: bool = False
    """The store no longer counts this worker as the holder."""
    cut_off: str | None = None
    """Why the keeper cancelled the call in flight, if it did."""
    renewal: BatchItem | None = None
    """The write that renews this lease, once the keeper has made it."""

    def renewed(self, sent_at: float, seconds: float, *, cancel_requested: bool) -> None:
        # Renewals may be answered out of order; the later deadline stands.
        self.deadline = max(self.deadline, sent_at + seconds)
        self.cancel_requested = self.cancel_requested or cancel_requested

    def remaining(self, now: float) -> float:
        return max(0.0, self.deadline - now)


@attrs.define
class KeeperStats:
    renewal_batches: int = 0
    renewals: int = 0
    renewals_failed: int = 0
    guard_cancels: int = 0
    leases_lost: int = 0
    """Leases a renewal found taken (reaped, or claimed again elsewhere)."""
    longest_renewal_seconds: float = 0.0
    """The longest a renewal took to be answered: a lease's headroom is what is left of
    its length after the interval between renewals, the margin and this."""
    loop_stalls: int = 0
    """Times the event loop came back to the keeper ``LOOP_LATE_SECONDS`` late or more,
    and past the guard's margin (``worker.loop_blocked``)."""


@attrs.define(eq=False)
class _Held:
    lease: Lease
    scope: anyio.CancelScope


class LeaseKeeper:
    """Keeps the leases of the calls in flight in one process alive, or cuts the calls off."""

    def __init__(
        self,
        renew: RenewWriter,
        clock: Clock,
        *,
        lease_seconds: float,
        margin_seconds: float,
        metrics: Metrics | None = None,
        faults: StoreFaults | None = None,
    ) -> None:
        self._renew_writer = renew
        self._faults = faults if faults is not None else StoreFaults(clock)
        self._clock = clock
        self.lease_seconds = lease_seconds
        self.margin_seconds = margin_seconds
        self.renew_interval = lease_seconds / RENEWALS_PER_LEASE
        self._metrics = metrics if metrics is not None else Metrics()
        self._held: dict[Lease, _Held] = {}
        # Runs whose commit waits for its turn in the Persister: renewed, never cut off
        # (a commit on its way cannot be called back). Behind a hundred thousand other
        # writes, a commit's own renewal would be dated from a send long past.
        self._committing: dict[Lease, None] = {}
        # No held lease is due for the guard before this: with many calls in flight the
        # guard looks through them all only when one may be due, not at every tick.
        # Deadlines only move later, so a value left from before a renewal is merely early.
        self._next_due = math.inf
        self._renewing = False
        self._round_due = False
        self._last_error: str | None = None
        self.stats = KeeperStats()

    @property
    def admission_seconds(self) -> float:
        """What a lease must have left for a call to start: it lasts until the
        keeper's next renewal, and the guard's margin beyond."""
        return self.renew_interval + self.margin_seconds

    @contextmanager
    def guarding(self, lease: Lease, scope: anyio.CancelScope) -> Iterator[None]:
        """While inside, ``lease`` is renewed with the others, and ``scope`` is
        cancelled if the lease is lost or is about to run out unrenewed."""
        self.hold(lease, scope)
        try:
            yield
        finally:
            self.release(lease)

    def hold(self, lease: Lease, scope: anyio.CancelScope) -> None:
        """``guarding()`` without a generator, for a caller on every call's path: from
        now until ``release(lease)``."""
        self._held[lease] = _Held(lease, scope)
        self._next_due = min(self._next_due, lease.deadline - self.margin_seconds)

    def release(self, lease: Lease) -> None:
        self._held.pop(lease, None)

    def hold_commit(self, lease: Lease) -> None:
        """Renew ``lease`` with the others until ``release_commit(lease)``: its run waits
        for a commit to be answered."""
        self._committing[lease] = None

    def release_commit(self, lease: Lease) -> None:
        self._committing.pop(lease, None)

    @property
    def calls_in_flight(self) -> int:
        return len(self._held)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with anyio.create_task_group() as renewals:
            next_renewal = self._clock.monotonic() + self.renew_interval
            while True:
                now = self._clock.monotonic()
                if now >= next_renewal:
                    # One renewal at a time: a store slow enough to overlap them gains
                    # nothing from a second, and the guard meanwhile keeps watching. A
                    # round due while one is written follows it at once: waiting for the
                    # next interval instead, a call that began after the round took its
                    # leases would wait two intervals and more for its first renewal.
                    if self._renewing:
                        self._round_due = True
                    elif self._held or self._committing:
                        self._renewing = True
                        renewals.start_soon(self._renew_all)
                    next_renewal = now + self.renew_interval
                if now >= self._next_due:
                    self._guard(now)
                wake = min(next_renewal, self._next_due)
                pause = min(max(wake - now, 0.0), GUARD_TICK_SECONDS)
                # The event loop's own time: an injected clock may run apart from it.
                slept_from = anyio.current_time()
                await anyio.sleep(pause)
                self._see_lateness(anyio.current_time() - slept_from - pause)

    def _see_lateness(self, late: float) -> None:
        """Say when the event loop came back to the keeper so late that leases may have
        been at stake: nothing renews them meanwhile, and a lease that ran out is reaped
        though its worker lives. A tool that blocks the loop (``time.sleep``, a
        synchronous HTTP client in an ``async def``) is the usual cause, and nothing else
        would name it; tens of thousands of runs woken at once (one event that all their
        calls wait on) are the other: the loop steps each of them before its timers."""
        if late < max(self.margin_seconds, LOOP_LATE_SECONDS):
            return
        self.stats.loop_stalls += 1
        log.warning(
            "worker.loop_blocked",
            seconds=round(late, 2),
            hint="a tool or callback that blocks the event loop, or more runs woken at once "
            "than it steps through in a second, holds up every lease renewal",
        )

    async def _renew_all(self) -> None:
        try:
            # Every lease in one write, however many: a write waits for turns of the
            # event loop on its way and back, and with a hundred thousand runs starting
            # a turn takes a tenth of a second. Written chunk after chunk, a round's
            # turns grew with its leases until it outlasted them.
            while True:
                self._round_due = False
                await self._renew([*self._held, *self._committing])
                if not (self._round_due and (self._held or self._committing)):
                    return
        finally:
            self._renewing = False

    async def _renew(self, leases: list[Lease]) -> None:
        if not leases:
            return
        items = [self._renewal_of(lease) for lease in leases]
        deadlines = [lease.deadline for lease in leases]
        committing = [lease in self._committing for lease in leases]
        sent_at = self._clock.monotonic()
        try:
            outcomes = await self._renew_writer(items)
        except LeasewardError as exc:
            outcomes = (Refused(exc.message),) * len(items)
        self.stats.renewal_batches += 1
        self.stats.longest_renewal_seconds = max(
            self.stats.longest_renewal_seconds, self._clock.monotonic() - sent_at
        )
        failed: list[str | None] = []
        renewed = self.stats.renewals
        for lease, outcome, deadline, was_committing in zip(
            leases, outcomes, deadlines, committing, strict=True
        ):
            self._settle_renewal(lease, outcome, sent_at, deadline, was_committing, failed)
        log.debug("lease.renewed", runs=self.stats.renewals - renewed, seconds=self.lease_seconds)
        self._last_error = failed[0] if failed else None
        if failed:
            self.stats.renewals_failed += len(failed)
            self._faults.failed(log, "lease.renew_failed", failed[0], runs=len(failed))
        elif self.stats.renewals > renewed:
            self._faults.answered("lease.renew_failed")

    def _renewal_of(self, lease: Lease) -> BatchItem:
        # Made once a lease and sent every round: a round of a hundred thousand leases
        # would otherwise be as many new objects for the garbage collector's oldest
        # generation, whose full collections over that many parked runs take seconds.
        item = lease.renewal
        if item is None:
            item = lease.renewal = BatchItem(
                run_id=lease.run_id,
                epoch=lease.epoch,
                lease_seconds=self.lease_seconds,
                passes_a_held_row=True,
            )
        return item

    def _settle_renewal(
        self,
        lease: Lease,
        outcome: CommitOutcome,
        sent_at: float,
        deadline_when_sent: float,
        was_committing: bool,
        failed: list[str | None],
    ) -> None:
        if isinstance(outcome, Stored):
            lease.renewed(sent_at, self.lease_seconds, cancel_requested=outcome.cancel_requested)
            self.stats.renewals += 1
            self._metrics.lease_renewed()
            return
        if isinstance(outcome, Fenced):
            lease.lost = True
            # A commit on its way hears the same from its own answer.
            self._committing.pop(lease, None)
            held = self._held.pop(lease, None)
            if held is not None:
                self.stats.leases_lost += 1
                # Reaped or taken over: nothing this call does can be recorded any more.
                log.warning("lease.lost", run_id=lease.run_id, epoch=lease.epoch, by="renewal")
                held.scope.cancel()
            return
        if lease not in self._held or lease.deadline > deadline_when_sent or was_committing:
            # Its commit, on its way as this renewal was sent or since, renews the lease
            # itself: on PostgreSQL the renewal passes the run's row while that commit's
            # batch holds it, which is no fault to warn of, even once the run's next call
            # holds the lease again.
            return
        failed.append(outcome.error)

    def _guard(self, now: float) -> None:
        next_due = math.inf
        for lease, held in list(self._held.items()):
            due = lease.deadline - self.margin_seconds
            if now < due:
                next_due = min(next_due, due)
                continue
            del self._held[lease]
            lease.cut_off = (
                f"the lease could not be renewed: {lease.remaining(now):.1f} s were left "
                f"(last renewal error: {self._last_error or 'none answered in time'})"
            )
            self.stats.guard_cancels += 1
            self._metrics.call_cut_off()
            log.error(
                "call.cut_off",
                run_id=lease.run_id,
                epoch=lease.epoch,
                lease_left_seconds=round(lease.remaining(now), 3),
                error=lease.cut_off,
            )
            held.scope.cancel()
        self._next_due = next_due
