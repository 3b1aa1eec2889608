"""The exception hierarchy: one root, and each class's docstring is its default message."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    # For annotations only: retention imports this module (through lifecycle).
    from leaseward.runtime.retention import PurgedRun

__all__ = [
    "PROVIDER_FAILURE_CLASSES",
    "AmbiguousRequest",
    "ArgumentsNotApproved",
    "AuditPersistenceFailed",
    "CallNotStarted",
    "CallTimedOut",
    "CommitOutcomeUnknown",
    "ConfigurationError",
    "IdempotencyKeyConflict",
    "IllegalTransition",
    "InvalidInput",
    "LastDecision",
    "LeaseLost",
    "LeasewardError",
    "NotAwaitingResolution",
    "NotRedrivable",
    "NothingToDecide",
    "NothingToResolve",
    "OtherCallInterrupted",
    "ProviderError",
    "RequestDecided",
    "RequestExpired",
    "RequestNotFound",
    "RequestsClosed",
    "RunNotFound",
    "RunPurged",
    "RuntimeClosed",
    "SchemaMismatch",
    "StoreError",
    "StoreNotFound",
    "ToolDefinitionError",
    "ToolError",
    "UnknownAgent",
    "UnknownRequestCall",
    "WaitTimeout",
    "WrongRequestKind",
]


class LeasewardError(Exception):
    """A leaseward operation failed."""

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (self.__doc__ or "").strip()
        super().__init__(self.message)


class ConfigurationError(LeasewardError):
    """The runtime is configured in a way it cannot run with."""


class ToolDefinitionError(ConfigurationError):
    """A tool's definition is not usable."""


class UnknownAgent(LeasewardError):
    """No agent with that name is registered in the app."""


class InvalidInput(LeasewardError):
    """The input is not acceptable."""


class RunNotFound(LeasewardError):
    """No run with that id exists."""

    def __init__(self, message: str | None = None, *, run_id: str | None = None) -> None:
        if message is None and run_id is not None:
            message = f"no run with id {run_id!r}"
        super().__init__(message)
        self.run_id = run_id


class RunPurged(RunNotFound):
    """The run was purged: only its idempotency key, and how it ended, are kept."""

    run_id: str

    def __init__(self, purged: PurgedRun) -> None:
        ended = purged.state.value
        if purged.reason is not None and purged.reason.value != ended:
            ended += f" ({purged.reason.value})"
        if purged.finished_at is not None:
            ended += f" at {_utc(purged.finished_at)}"
        super().__init__(
            f"run {purged.run_id} was purged at {_utc(purged.purged_at)}; it had ended "
            f"{ended} (idempotency key {purged.idempotency_key!r})",
            run_id=purged.run_id,
        )
        self.purged = purged


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _state_text(state: str, reason: str | None) -> str:
    return state if reason is None else f"{state} ({reason})"


def _calls(call_ids: tuple[str, ...]) -> str:
    return ", ".join(call_ids) or "none"


class RequestNotFound(LeasewardError):
    """The run has no pending request for a person's decision with that call id."""


class AmbiguousRequest(RequestNotFound):
    """The run waits for several decisions of that kind, and the call was not named."""

    def __init__(self, run_id: str, kind: str, pending: tuple[str, ...]) -> None:
        super().__init__(
            f"run {run_id} waits for {len(pending)} {kind}s; name the call ({_calls(pending)})"
        )
        self.run_id = run_id
        self.kind = kind
        self.pending = pending


class UnknownRequestCall(RequestNotFound):
    """The run has no request for a person under that call id."""

    def __init__(self, run_id: str, call_id: str, pending: tuple[str, ...]) -> None:
        super().__init__(
            f"run {run_id} has no request for call {call_id!r} (pending: {_calls(pending)})"
        )
        self.run_id = run_id
        self.call_id = call_id
        self.pending = pending


class IdempotencyKeyConflict(LeasewardError):
    """The idempotency key was already used to submit a different agent or input."""

    def __init__(
        self,
        message: str | None = None,
        *,
        key: str | None = None,
        run_id: str | None = None,
        stored_agent: str | None = None,
        agent: str | None = None,
    ) -> None:
        if message is None and key is not None:
            what = (
                f"agent {stored_agent!r}, not {agent!r}"
                if stored_agent != agent
                else f"a different input to {stored_agent!r}"
            )
            message = f"the idempotency key {key!r} was already used by run {run_id} for {what}"
        super().__init__(message)
        self.key = key
        self.run_id = run_id
        self.stored_agent = stored_agent
        self.agent = agent


class IllegalTransition(LeasewardError):
    """The run cannot make that state transition."""


class RequestDecided(IllegalTransition):
    """The request was already decided; the new decision changed nothing."""

    def __init__(self, run_id: str, call_id: str, decision: str, operator: str | None) -> None:
        super().__init__(f"{_decided_text(run_id, call_id, decision, operator)}; nothing changed")
        self.run_id = run_id
        self.call_id = call_id
        self.decision = decision
        self.operator = operator


def _decided_text(run_id: str, call_id: str, decision: str, operator: str | None) -> str:
    by = f" by {operator}" if operator else ""
    return f"call {call_id} of run {run_id} was already {decision}{by}"


@attrs.frozen
class LastDecision:
    """The newest decided request of a kind: what a refusal to decide one reminds of."""

    call_id: str
    decision: str
    operator: str | None


class NothingToDecide(IllegalTransition):
    """The run waits for no decision of that kind."""

    def __init__(
        self, run_id: str, state: str, reason: str | None, kind: str, last: LastDecision | None
    ) -> None:
        after = (
            ""
            if last is None
            else f" ({_decided_text(run_id, last.call_id, last.decision, last.operator)})"
        )
        super().__init__(
            f"run {run_id} is {_state_text(state, reason)}: it waits for no {kind}{after}"
        )
        self.run_id = run_id
        self.state = state
        self.reason = reason
        self.kind = kind
        self.last = last


class WrongRequestKind(IllegalTransition):
    """The call asks a person for one kind of decision, and the other kind was sent."""

    def __init__(self, run_id: str, call_id: str, asked: str, sent: str) -> None:
        how = "send_input (leaseward reply)" if asked == "input" else "approve or reject"
        super().__init__(
            f"call {call_id} of run {run_id} asks for {asked}, not {sent}: {how} decides it"
        )
        self.run_id = run_id
        self.call_id = call_id
        self.asked = asked
        self.sent = sent


class RequestsClosed(IllegalTransition):
    """The run left its waiting state: none of its requests can be decided any more."""

    def __init__(self, run_id: str, state: str, reason: str | None) -> None:
        super().__init__(
            f"run {run_id} is {_state_text(state, reason)}: its requests can no longer be decided"
        )
        self.run_id = run_id
        self.state = state
        self.reason = reason


class NotRedrivable(IllegalTransition):
    """Only a dead-lettered run the journal leaves nothing to decide about can be redriven."""

    def __init__(self, run_id: str, state: str, reason: str | None) -> None:
        hint = (
            "; an interrupted write needs `resolve` (did the call apply?)"
            if reason == "interrupted_write"
            else ""
        )
        super().__init__(
            f"run {run_id} is {_state_text(state, reason)}: only a run dead-lettered "
            "not_retryable or retries_exhausted, or interrupted_write with its "
            f"call's outcome recorded, can be redriven{hint}"
        )
        self.run_id = run_id
        self.state = state
        self.reason = reason


class NotAwaitingResolution(IllegalTransition):
    """Only a run dead-lettered over an interrupted write waits for a resolution."""

    def __init__(self, run_id: str, state: str, reason: str | None) -> None:
        super().__init__(
            f"run {run_id} is {_state_text(state, reason)}: only a run dead-lettered "
            "interrupted_write waits for a resolution"
        )
        self.run_id = run_id
        self.state = state
        self.reason = reason


class NothingToResolve(IllegalTransition):
    """The run's journal records the outcome of its last call: there is nothing to resolve."""

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id} has no interrupted call to resolve: its journal records "
            "the outcome of its last call; `redrive` puts it back in the queue"
        )
        self.run_id = run_id


class OtherCallInterrupted(IllegalTransition):
    """The run's interrupted call is another than the one the operator checked (named by
    its step): the run moved on, and was interrupted again, since."""

    def __init__(self, run_id: str, step: int, open_step: int, call_id: str, tool: str) -> None:
        super().__init__(
            f"run {run_id}'s interrupted call is call {call_id} of {tool} (step {open_step}), "
            f"not step {step}; nothing changed: check that call before you resolve it"
        )
        self.run_id = run_id
        self.step = step
        self.open_step = open_step
        self.call_id = call_id
        self.tool = tool


class ArgumentsNotApproved(IllegalTransition):
    """The request waits for approval of other arguments than those the approver was
    shown (named by their digest): the run moved on to another request since."""

    def __init__(self, run_id: str, call_id: str, waiting: str, shown: str) -> None:
        super().__init__(
            f"call {call_id} of run {run_id} waits for approval of arguments with digest "
            f"{waiting}, not of those shown ({shown}); nothing changed: look at its "
            "arguments again"
        )
        self.run_id = run_id
        self.call_id = call_id
        self.waiting = waiting
        self.shown = shown


class RequestExpired(IllegalTransition):
    """The request expired before this decision; it was rejected as expired."""

    def __init__(self, run_id: str, call_id: str, expires_at: float) -> None:
        # Whole seconds in UTC, as `show` prints a request's times.
        super().__init__(
            f"call {call_id} of run {run_id}: the request expired at {_utc(expires_at)}; "
            "it was rejected as expired"
        )
        self.run_id = run_id
        self.call_id = call_id
        self.expires_at = expires_at


class LeaseLost(LeasewardError):
    """This worker no longer holds the run's lease; it may change nothing."""


class AuditPersistenceFailed(LeasewardError):
    """A write tool ran but its audit record could not be stored; the run fails closed."""


class RuntimeClosed(LeasewardError):
    """The Runtime is closed: its ``async with Runtime.open(...)`` block was left, and it
    executes and writes nothing more. Open a Runtime again, or a Client, to go on."""


class StoreError(LeasewardError):
    """The store could not carry out the operation."""

    def __init__(self, message: str | None = None, *, data_error: bool = False) -> None:
        super().__init__(message)
        # True when the store refused what it was given (text it cannot encode, a
        # number out of range, a row that contradicts a stored one): sending the same
        # again fails the same way. False for faults that may pass (I/O, locks, network).
        self.data_error = data_error


class StoreNotFound(StoreError):
    """No leaseward store is there."""

    def __init__(self, location: str, message: str | None = None) -> None:
        super().__init__(message or f"no leaseward store at {location}")
        # The absolute path of a SQLite file, or a PostgreSQL URL without its password.
        self.location = location
        # Whether the message says more than that no store is there (what is there instead).
        self.explained = message is not None


class SchemaMismatch(StoreError):
    """The store's schema is at another version than this leaseward's."""

    def __init__(self, location: str, version: int, newest: int) -> None:
        how = (
            f"older than this leaseward's ({newest}); bring it up to date with `leaseward migrate`"
            if version < newest
            else f"newer than this leaseward knows ({newest}); upgrade leaseward"
        )
        super().__init__(f"the schema in {location} is at version {version}, {how}")
        self.location = location
        self.version = version
        self.newest = newest


class CommitOutcomeUnknown(StoreError):
    """The store's connection was lost during a commit: the change may or may not be stored."""


class CallTimedOut(LeasewardError):
    """A tool did not return within its timeout; a write may have applied."""


class CallNotStarted(LeasewardError):
    """A tool call failed before its request left this process (its server could not be
    reached): nothing was applied, so the call may be made again."""


class ToolError(LeasewardError):
    """The tool failed without applying its effect; the model sees this as an error result."""


PROVIDER_FAILURE_CLASSES = frozenset(
    {
        "connection",
        "rate_limit",
        "server_error",
        "circuit_open",
        "timeout",
        "auth",
        "configuration",
        "client_error",
        "unknown",
    }
)
"""The values of ``FailureClass``, which a ProviderError may name as its own."""


class ProviderError(LeasewardError):
    """The model provider failed."""

    def __init__(
        self,
        message: str | None = None,
        *,
        failure_class: str = "unknown",
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(message)
        # A plain string keeps this module free of the failures module; the
        # classifier turns it into a FailureClass.
        if failure_class not in PROVIDER_FAILURE_CLASSES:
            # A typo ("ratelimit") would make a failure worth a retry a permanent one.
            raise ConfigurationError(
                f"ProviderError's failure_class must be one of "
                f"{', '.join(sorted(PROVIDER_FAILURE_CLASSES))}, not {failure_class!r}"
            )
        self.failure_class = failure_class
        # How long the provider asked to be left alone (an HTTP Retry-After): a
        # requeue waits that long instead of guessing with its backoff.
        self.retry_after_seconds = retry_after_seconds


class WaitTimeout(LeasewardError, TimeoutError):
    """The run did not reach a terminal state within the timeout."""
