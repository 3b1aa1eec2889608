"""The values a RunMachine keeps between events, besides its phase."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from leaseward.runtime.conversation import PendingCall
from leaseward.runtime.errors import AuditPersistenceFailed, CallTimedOut, ProviderError
from leaseward.runtime.failures import FailureClass, classify
from leaseward.runtime.human_requests import RequestKind
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import StepKind
from leaseward.runtime.messages import Message, ProviderReply

__all__ = [
    "MAX_ERROR_CHARS",
    "WAITING_STATES",
    "Conversation",
    "Failure",
    "WriteBuffer",
    "WriteRef",
    "bounded_error",
    "describe",
]

MAX_ERROR_CHARS = 2000

WAITING_STATES = frozenset(kind.waiting_state for kind in RequestKind)
"""The states of a run parked until people decide its requests."""


class WriteBuffer(msgspec.Struct, frozen=True):
    """Fail-soft records still to store, and the provider turns given up on."""

    pending: tuple[StepWrite, ...] = ()
    dropped_turns: frozenset[int] = frozenset()
    """Provider turns dropped from the journal: a write one of them asked for has no
    turn to stand on there, so a resumed run would not know the call."""

    def keep(self, step: StepWrite) -> WriteBuffer:
        return WriteBuffer((*self.pending, step), self.dropped_turns)

    def stored(self) -> WriteBuffer:
        return WriteBuffer((), self.dropped_turns) if self.pending else self

    def drop(self, steps: Sequence[StepWrite]) -> WriteBuffer:
        turns = {step.seq for step in steps if step.kind is StepKind.PROVIDER}
        kept = tuple(step for step in self.pending if step not in steps)
        return WriteBuffer(kept, self.dropped_turns | turns)


class WriteRef(msgspec.Struct, frozen=True):
    """The protected write in flight."""

    tool: str
    call_id: str


class Failure(msgspec.Struct, frozen=True):
    """Why the attempt failed, in the terms recovery decides on."""

    failure_class: FailureClass
    error: str
    retry_after_seconds: float | None = None
    audit_failed: bool = False

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        return cls(
            classify(exc),
            describe(exc),
            exc.retry_after_seconds if isinstance(exc, ProviderError) else None,
            isinstance(exc, AuditPersistenceFailed),
        )


class Conversation(msgspec.Struct, frozen=True):
    """The conversation so far, the journal's next seq, and the calls still to make."""

    messages: tuple[Message, ...] = ()
    next_seq: int = 0
    turns: int = 0
    pending: tuple[PendingCall, ...] = ()
    final: ProviderReply | None = None


def describe(exc: BaseException) -> str:
    """An exception in words for the journal, the run's error and the logs, bounded."""
    if isinstance(exc, CallTimedOut):
        # Its words say what timed out and what that means; its type adds nothing.
        return exc.message
    text = bounded_error(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def bounded_error(text: str) -> str:
    """A tool's words of what went wrong, as the journal's error keeps them: the tool's
    (or its MCP server's) to write, of any length, and printed by show and the console."""
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."
