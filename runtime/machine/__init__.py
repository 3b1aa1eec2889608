"""The run protocol as a pure state machine: events in, commands out.

One ``RunMachine`` drives one attempt of one run under one lease epoch. It does
no I/O, reads no clock and awaits nothing: time arrives in events. The actor
that owns it (``actors/run_actor.py``) carries out its commands and feeds back
what happened. A model checker can drive it the same way over a simulated store.

The vocabulary comes first: ``events`` (what the interpreter feeds in) and
``commands`` (what the machine returns, and which event answers which). Then
its state (``state``, ``phases``, ``core``), the steps of each concern
(``admission``, ``provider``, ``gates``, ``tool_calls``, ``committing``,
``settling``), and ``run_machine``, which combines them behind ``start()`` and
``feed(event)``.
"""

from __future__ import annotations

from leaseward.runtime.machine.commands import (
    AskProvider,
    CallTool,
    CheckAdmission,
    Command,
    Commit,
    CrashPoint,
    LoadJournal,
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
from leaseward.runtime.machine.events import (
    AdmissionCheck,
    Cancelled,
    Committed,
    CutOff,
    DrainRequested,
    JournalLoaded,
    JournalRead,
    LeaseLost,
    LeaseRenewed,
    LoadFailed,
    MachineEvent,
    ProviderFailed,
    ProviderReplied,
    ReadFailed,
    TimedOut,
    ToolFailed,
    ToolNotStarted,
    ToolRaised,
    ToolReturned,
    UnexpectedEvent,
)
from leaseward.runtime.machine.run_machine import RunMachine
from leaseward.runtime.machine.state import MAX_ERROR_CHARS, WriteBuffer, WriteRef, describe

__all__ = [
    "MAX_ERROR_CHARS",
    "AdmissionCheck",
    "AskProvider",
    "CallTool",
    "Cancelled",
    "CheckAdmission",
    "Command",
    "Commit",
    "Committed",
    "CrashPoint",
    "CutOff",
    "DrainRequested",
    "JournalLoaded",
    "JournalRead",
    "LeaseLost",
    "LeaseRenewed",
    "LoadFailed",
    "LoadJournal",
    "Log",
    "MachineEvent",
    "Metric",
    "Park",
    "ProviderFailed",
    "ProviderReplied",
    "ReadBack",
    "ReadFailed",
    "RecordIntent",
    "RecordOutcome",
    "RecordSoft",
    "Renew",
    "RunMachine",
    "Settle",
    "Stop",
    "TimedOut",
    "ToolFailed",
    "ToolNotStarted",
    "ToolRaised",
    "ToolReturned",
    "UnexpectedEvent",
    "WriteBuffer",
    "WriteRef",
    "describe",
]
