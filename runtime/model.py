"""The values that cross layers: runs, journal steps, messages, and settlements."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.errors import InvalidInput, ProviderError
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.lifecycle import (
    TRANSITIONS,
    Event,
    Reason,
    Recovery,
    RecoveryAction,
    RunMode,
    RunState,
    StepKind,
    StepStatus,
)

__all__ = [
    "MAX_ARGUMENTS_BYTES",
    "MAX_INPUT_BYTES",
    "MAX_RESULT_BYTES",
    "Message",
    "NewRun",
    "ProviderReply",
    "ProviderRequest",
    "PurgeResult",
    "Role",
    "RunInfo",
    "RunRecord",
    "Settlement",
    "StepInfo",
    "StepWrite",
    "ToolCall",
    "ToolSpec",
    "WorkerInfo",
    "WorkerRegistration",
    "dump_json",
    "load_json",
    "settlement_after",
]

MAX_INPUT_BYTES = 256 * 1024
MAX_ARGUMENTS_BYTES = 64 * 1024
MAX_RESULT_BYTES = 256 * 1024
_SHOWN_CHARS = 80


def _refuse_non_string_keys(value: Any, what: str) -> None:
    # json.dumps would quietly turn 1, None or True keys into strings.
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue  # a cycle: json.dumps reports it
        seen.add(id(item))
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise InvalidInput(
                        f"{what} is not a JSON value: the key {key!r} is not a string"
                    )
                stack.append(inner)
        elif isinstance(item, list | tuple):
            stack.extend(item)


def dump_json(value: Any, *, what: str = "value", limit: int | None = None) -> str:
    """Canonical JSON text of ``value``; raises InvalidInput if it is not JSON or too large."""
    _refuse_non_string_keys(value, what)
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not a JSON value: {exc}") from None
    if limit is not None:
        size = len(text.encode())
        if size > limit:
            raise InvalidInput(f"{what} is {size} bytes of JSON, over the {limit}-byte limit")
    return text


def load_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class Role(enum.StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@attrs.frozen
class ToolCall:
    """A call the model asked for. A provider builds these from the model's reply."""

    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    call_id: str = ""

    def __attrs_post_init__(self) -> None:
        # Found later, a wrong type fails deep inside leaseward with a message about
        # dicts; found here, it names the provider's call that carried it.
        if not isinstance(self.arguments, Mapping):
            hint = (
                " (decode the JSON text a model API returns into a dict first)"
                if isinstance(self.arguments, str | bytes)
                else ""
            )
            shown = repr(self.arguments)
            if len(shown) > _SHOWN_CHARS:
                shown = shown[: _SHOWN_CHARS - 3] + "..."
            call = f" (call id {self.call_id!r})" if self.call_id else ""
            raise ProviderError(
                f"tool call {self.name!r}{call} from the provider has arguments of type "
                f"{type(self.arguments).__name__}, not a mapping of names to values: "
                f"{shown}{hint}"
            )


def _tool_call_tuple(calls: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(calls)


@attrs.frozen
class Message:
    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


@attrs.frozen
class ToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]


@attrs.frozen
class ProviderRequest:
    run_id: str
    agent: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]


@attrs.frozen
class ProviderReply:
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tool_call_tuple)


@attrs.frozen
class RunInfo:
    """A run as users see it."""

    id: str
    agent: str
    mode: RunMode
    state: RunState
    reason: Reason | None
    failure_class: FailureClass | None
    result: Any
    epoch: int
    requeues: int
    created_at: float
    finished_at: float | None
    error: str | None = None


@attrs.frozen
class RunRecord:
    """A run row as the store holds it, lease fields included."""

    id: str
    agent: str
    mode: RunMode
    state: RunState
    reason: Reason | None
    failure_class: FailureClass | None
    input: Any
    result: Any
    error: str | None
    epoch: int
    requeues: int
    lease_owner: str | None
    lease_expires_at: float | None
    available_at: float
    cancel_requested: bool
    created_at: float
    updated_at: float
    finished_at: float | None

    def info(self) -> RunInfo:
        return RunInfo(
            id=self.id,
            agent=self.agent,
            mode=self.mode,
            state=self.state,
            reason=self.reason,
            failure_class=self.failure_class,
            result=self.result,
            epoch=self.epoch,
            requeues=self.requeues,
            created_at=self.created_at,
            finished_at=self.finished_at,
            error=self.error,
        )


@attrs.frozen
class NewRun:
    id: str
    agent: str
    mode: RunMode
    input_json: str
    lease_owner: str | None = None
    lease_seconds: float | None = None


@attrs.frozen
class WorkerRegistration:
    """What a worker process tells the store about itself when it starts and on every beat."""

    id: str
    host: str
    pid: int
    agents: tuple[str, ...]
    stale_after_seconds: float
    """How long after its last beat the worker counts as gone: its own promise, kept in
    its row, so that readers need not know its settings."""


@attrs.frozen
class WorkerInfo:
    """A registered worker, its last heartbeat's age measured on the store's clock."""

    id: str
    host: str
    pid: int
    agents: tuple[str, ...]
    started_at: float
    heartbeat_at: float
    heartbeat_age_seconds: float
    stale_after_seconds: float

    @property
    def live(self) -> bool:
        return self.heartbeat_age_seconds <= self.stale_after_seconds


@attrs.frozen
class PurgeResult:
    """What a purge deleted, or with ``dry_run`` would delete."""

    runs: int
    steps: int
    batches: int
    finished_before: float
    """The cutoff, on the store's clock: runs that finished before it qualified."""
    dry_run: bool


@attrs.frozen
class StepInfo:
    """One journal row."""

    run_id: str
    seq: int
    epoch: int
    kind: StepKind
    tool: str | None
    call_id: str | None
    effect: ToolEffect | None
    status: StepStatus
    idempotency_key: str | None
    arguments: Any
    output: Any
    error: str | None
    started_at: float
    finished_at: float | None
    resolved_by: str | None = None
    resolved_at: float | None = None


@attrs.frozen
class StepWrite:
    """A journal change: a new row (``settles`` False) or the outcome of a started one.

    Times are filled in by the store from its clock, so every row of one batch
    and the lease renewal beside it agree on "now".
    """

    seq: int
    kind: StepKind
    status: StepStatus
    tool: str | None = None
    call_id: str | None = None
    effect: ToolEffect | None = None
    idempotency_key: str | None = None
    arguments_json: str | None = None
    output_json: str | None = None
    error: str | None = None
    settles: bool = False
    withdraws: bool = False
    """Removes this step's ``started`` intent: its call never started, so it never ran."""
    started_at: float | None = None
    """When the call began, for rows written after it; None means "now" at commit."""

    def stored_in(self, row: StepInfo | None, epoch: int) -> bool:
        """Whether ``row`` (the journal's row at this ``seq``, or None) shows this change made
        under ``epoch``: how a writer whose commit went unanswered learns what it holds."""
        if self.withdraws:
            return row is None
        return (
            row is not None
            and row.seq == self.seq
            and row.epoch == epoch
            and row.kind is self.kind
            and row.status is self.status
            and row.tool == self.tool
            and row.call_id == self.call_id
            and row.effect is self.effect
            and row.idempotency_key == self.idempotency_key
            and row.arguments == load_json(self.arguments_json)
            and row.output == load_json(self.output_json)
            and row.error == self.error
        )


@attrs.frozen
class Settlement:
    """How an attempt leaves a run: the transition and what to record with it."""

    event: Event
    reason: Reason | None = None
    failure_class: FailureClass | None = None
    result_json: str | None = None
    error: str | None = None
    delay_seconds: float = 0.0
    spends_retry: bool = False

    @property
    def target(self) -> RunState:
        return TRANSITIONS[self.event][1]


def settlement_after(
    recovery: Recovery, *, failure_class: FailureClass, error: str, cancel_requested: bool
) -> Settlement:
    """The settlement that carries out a recovery decision.

    A run someone asked to cancel is not put back in the queue: it is cancelled.
    """
    if recovery.action is RecoveryAction.REQUEUE:
        if cancel_requested:
            return Settlement(Event.CANCEL_RUNNING, Reason.CANCELLED, error=error)
        return Settlement(
            Event.REQUEUE,
            None,
            failure_class=failure_class,
            error=error,
            delay_seconds=recovery.delay_seconds,
            spends_retry=True,
        )
    return Settlement(recovery.event, recovery.reason, failure_class=failure_class, error=error)
