"""What a RunMachine returns, and what answers it.

Driving it
----------
``machine.start()`` and ``machine.feed(event)`` each return a tuple of commands:
zero or more *observations* (``Log``, ``Metric``, ``CrashPoint``), carried out in
order and answered by nothing, then exactly one *action*, answered by one event:

===============================  ====================================================
action                           answered by
===============================  ====================================================
``LoadJournal``                  ``JournalLoaded(steps, requests)`` | ``LoadFailed``
``CheckAdmission``               ``AdmissionCheck(now, wall)``, fed at once
``AskProvider(request, ...)``    ``ProviderReplied`` | ``ProviderFailed`` | ``TimedOut``
                                 | ``CutOff`` | ``LeaseLost``
``CallTool(..., protected)``     ``ToolReturned`` | ``ToolFailed`` | ``ToolRaised``
                                 | ``ToolNotStarted`` | ``TimedOut`` | ``CutOff``
                                 | ``LeaseLost``
``Commit`` (``RecordSoft``,      ``Committed(outcome, sent_at)``: the CommitOutcome
``RecordIntent``,                of ``runtime/commits.py`` and the monotonic time
``RecordOutcome``, ``Renew``,    the commit was sent at
``Settle``, ``Park``)
``ReadBack``                     ``JournalRead(steps)`` | ``ReadFailed(error)``
``Stop(settlement)``             nothing: the attempt is over
===============================  ====================================================

Rules for the interpreter:

* ``CheckAdmission``: feed ``AdmissionCheck(now=monotonic, wall=wall clock)``; when
  it returns ``AskProvider`` or ``CallTool``, start that call with no await in
  between (G7). It may instead return ``Renew`` or a ``Settle``: carry those out.
  A cancel may be taken at a checkpoint just before feeding ``AdmissionCheck``.
* ``Commit``: send one write request of ``steps``, renewing the lease by
  ``commit.renewal_at(sent_at)`` seconds (0: none, the request only fences) and
  applying ``settlement`` (None: none); take the monotonic ``sent_at`` just before
  sending. ``RecordIntent`` is shielded from a cancel within a bound (if the bound
  passes, answer ``Unanswered``); ``Settle`` and ``Park`` are shielded.
* ``CallTool(protected=True)`` is a write with a durable intent: shield it from a
  drain or a cancel until ``machine.protecting`` is None again (only a cut-off
  lets a cancel through).
* During a call, the keeper's renewals are fed as ``LeaseRenewed(deadline,
  cancel_requested)`` (before the call's own answer); at any time between
  actions a drain may be fed as ``DrainRequested()``. Both return observations
  only. A stop of the worker is fed as ``Cancelled()`` in place of the answer
  awaited; it returns the settle to carry out (shielded), then ``Stop``.
* ``Log(level, event, fields)``: a structlog event of the run's logger;
  ``traceback`` asks for the exception of the ``ToolRaised`` just fed.
  ``Metric(name, args)``: ``getattr(metrics, name)(*args)``. ``CrashPoint(name)``:
  ``storage.crash_points.crash_point(name)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgspec

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.messages import ProviderRequest
from leaseward.runtime.settlements import Settlement

__all__ = [
    "AFTER_CALL",
    "AFTER_INTENT",
    "BEFORE_INTENT",
    "CHECK_ADMISSION",
    "LEASE_RENEWED",
    "AskProvider",
    "CallTool",
    "CheckAdmission",
    "Command",
    "Commit",
    "CrashPoint",
    "LoadJournal",
    "Log",
    "Metric",
    "Park",
    "ReadBack",
    "RecordIntent",
    "RecordOutcome",
    "RecordSoft",
    "Renew",
    "Settle",
    "Stop",
]


class Log(msgspec.Struct, frozen=True):
    level: str
    event: str
    fields: tuple[tuple[str, Any], ...] = ()
    traceback: bool = False

    @classmethod
    def of(cls, level: str, event: str, **fields: Any) -> Log:
        return cls(level, event, tuple(fields.items()))


class Metric(msgspec.Struct, frozen=True):
    name: str
    args: tuple[Any, ...] = ()


class CrashPoint(msgspec.Struct, frozen=True):
    name: str


class LoadJournal(msgspec.Struct, frozen=True):
    pass


class CheckAdmission(msgspec.Struct, frozen=True):
    pass


class AskProvider(msgspec.Struct, frozen=True):
    request: ProviderRequest
    timeout_seconds: float


class CallTool(msgspec.Struct, frozen=True):
    tool: str
    call_id: str
    arguments: Mapping[str, Any]
    """The keyword arguments the tool is called with, checked against its schema."""
    idempotency_key: str
    effect: ToolEffect
    timeout_seconds: float
    protected: bool
    """A write whose intent is durable: nothing but a cut-off may interrupt it."""


class Commit(msgspec.Struct, frozen=True):
    steps: tuple[StepWrite, ...]
    lease_seconds: float
    settlement: Settlement | None = None
    renew_from: float = -math.inf
    """Monotonic: a commit sent from then on renews the lease by ``lease_seconds``; one
    sent earlier only fences, the lease having most of its length left."""

    def renewal_at(self, sent_at: float) -> float:
        """The seconds the commit sent at ``sent_at`` renews the lease by (0: none)."""
        return self.lease_seconds if sent_at >= self.renew_from else 0.0


class RecordSoft(Commit, frozen=True):
    """Fail-soft records: a provider turn, a read's outcome, a refused or answered call."""


class RecordIntent(Commit, frozen=True):
    """A write's intent, behind every pending record: the call waits on it."""


class RecordOutcome(Commit, frozen=True):
    """The outcome of a call that had an intent."""


class Renew(Commit, frozen=True):
    """A lease renewal before a call (with any pending records)."""


class Settle(Commit, frozen=True):
    """The attempt's settlement, with any unstarted intent withdrawn."""


class Park(Settle, frozen=True):
    """A settlement that parks the run until people decide its requests."""


class ReadBack(msgspec.Struct, frozen=True):
    """Read the run's journal: a commit went unanswered."""


class Stop(msgspec.Struct, frozen=True):
    settlement: Settlement | None
    """The settlement stored, or None if none was."""


Command = (
    Log
    | Metric
    | CrashPoint
    | LoadJournal
    | CheckAdmission
    | AskProvider
    | CallTool
    | Commit
    | ReadBack
    | Stop
)

# Commands are values: those that carry nothing of a run's own are made once and shared
# by every run. Made anew, the seven of a write step cost it 2.5% of its instructions
# (bench/step_instructions.py), frozen instances being slow to make.
CHECK_ADMISSION = CheckAdmission()
LEASE_RENEWED = Metric("lease_renewed")
BEFORE_INTENT = CrashPoint("before_intent")
AFTER_INTENT = CrashPoint("after_intent")
AFTER_CALL = CrashPoint("after_call")
