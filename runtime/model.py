"""The values that cross layers: runs, journal steps, messages, and settlements."""

from __future__ import annotations

import enum
import hashlib
import json
import math
import reprlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeGuard

import attrs
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.errors import ConfigurationError, InvalidInput, ProviderError
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
    "EXPIRED_REASON",
    "MAX_ARGUMENTS_BYTES",
    "MAX_IDEMPOTENCY_KEY_CHARS",
    "MAX_INPUT_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_RESULT_BYTES",
    "Decision",
    "ForgetKeysResult",
    "HumanRequest",
    "Message",
    "ModelSettings",
    "NewRequest",
    "NewRun",
    "ProviderReply",
    "ProviderRequest",
    "PurgeResult",
    "PurgedRun",
    "RequestKind",
    "Role",
    "RunInfo",
    "RunRecord",
    "Settlement",
    "StepInfo",
    "StepWrite",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "WorkerInfo",
    "WorkerRegistration",
    "arguments_digest",
    "check_idempotency_key",
    "dump_json",
    "load_json",
    "request_digest",
    "settlement_after",
    "valid_text",
]

MAX_INPUT_BYTES = 256 * 1024
MAX_ARGUMENTS_BYTES = 64 * 1024
MAX_RESULT_BYTES = 256 * 1024
MAX_JSON_DEPTH = 200
MAX_IDEMPOTENCY_KEY_CHARS = 200
_SHOWN_CHARS = 80


def _check_shape(value: Any, what: str) -> None:
    """Refuse what json.dumps would quietly change, or what a reader could not load back."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list | tuple):
            continue
        if depth > MAX_JSON_DEPTH:
            # json.loads recurses: a value that deep could be written here, yet not be
            # read back by a worker whose stack is deeper than this one's.
            raise InvalidInput(
                f"{what} is not a JSON value this store can hold: it is nested more than "
                f"{MAX_JSON_DEPTH} levels deep, or contains itself"
            )
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    # json.dumps would quietly turn 1, None or True keys into strings.
                    raise InvalidInput(
                        f"{what} is not a JSON value: the key {key!r} is not a string"
                    )
                stack.append((inner, depth + 1))
        else:
            stack.extend((inner, depth + 1) for inner in item)


def dump_json(value: Any, *, what: str = "value", limit: int | None = None) -> str:
    """Canonical JSON text of ``value``; raises InvalidInput if it is not JSON or too large.

    The text is always valid UTF-8: a string holding a lone surrogate (as
    ``json.loads('"\\ud83d"')`` makes) is written with JSON escapes, which load
    back to exactly the same string.
    """
    _check_shape(value, what)
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not a JSON value: {exc}") from None
    try:
        size = len(text.encode())
    except UnicodeEncodeError:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
        size = len(text)
    if limit is not None and size > limit:
        raise InvalidInput(f"{what} is {size} bytes of JSON, over the {limit}-byte limit")
    return text


def _is_utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def valid_text(text: str) -> str:
    """``text`` as every store can hold it in a text column, unchanged when it already can.

    A surrogate pair split into two code points is joined; a lone surrogate (no
    UTF-8 can encode it) and NUL (PostgreSQL's text refuses it) are written as
    the backslash escapes Python shows them with. The result holds neither, so
    cleaning it again changes nothing: a resumed run derives the same names,
    call ids and idempotency keys from the journal as the attempt that wrote it.
    """
    if not _is_utf8(text):
        joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        text = joined.encode("utf-8", "backslashreplace").decode()
    return text.replace("\x00", "\\x00")


def _valid_error(text: str | None) -> str | None:
    return None if text is None else valid_text(text)


def load_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def check_idempotency_key(key: Any) -> str:
    """``key`` if it can name a submit; raises InvalidInput otherwise."""
    if not isinstance(key, str) or not key:
        raise InvalidInput(f"an idempotency key must be a non-empty string, not {key!r}")
    if len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise InvalidInput(
            f"an idempotency key is at most {MAX_IDEMPOTENCY_KEY_CHARS} characters, not {len(key)}"
        )
    return key


def request_digest(agent: str, input: Any) -> str:
    """What a submit asked for, as a digest that a retry of it reproduces exactly.

    Keys are sorted: a retry that builds the same object in another order is the
    same request. The stored input keeps the caller's order, which the agent sees.
    ``input`` must already have passed ``dump_json``.
    """
    text = json.dumps(
        [agent, input], sort_keys=True, allow_nan=False, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(text.encode()).hexdigest()


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """The digest of a call's exact arguments: what an approval is bound to.

    Keys are sorted and the text is ASCII, so the same arguments give the same
    digest however they were built or read back from the journal.
    """
    text = json.dumps(dict(arguments), sort_keys=True, allow_nan=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class Role(enum.StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


def _read_arguments(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """A model's argument text as a dict, or None and why it is not one."""
    if not text.strip():
        # Some endpoints send no text at all for a call without arguments.
        return {}, None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"they are not JSON ({exc})"
    if not isinstance(value, dict):
        return None, f"they are a JSON {type(value).__name__}, not an object"
    return value, None


@attrs.frozen
class ToolCall:
    """A call the model asked for. A provider builds these from the model's reply."""

    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    call_id: str = ""
    invalid_arguments: str | None = None
    """The model's argument text when it is not a JSON object (``arguments`` is then
    empty): the call is not made, and the model gets an error result saying why."""

    @classmethod
    def from_text(cls, name: str, text: str, call_id: str = "") -> ToolCall:
        """A call whose arguments arrived as JSON text, as chat-completion APIs send them."""
        arguments, _ = _read_arguments(text)
        if arguments is None:
            return cls(name, {}, call_id, invalid_arguments=text)
        return cls(name, arguments, call_id)

    @property
    def arguments_problem(self) -> str | None:
        """Why the model's arguments could not be read, or None when they could."""
        if self.invalid_arguments is None:
            return None
        return _read_arguments(self.invalid_arguments)[1] or "they are not a JSON object"

    def __attrs_post_init__(self) -> None:
        # Found later, a wrong type fails deep inside leaseward with a message about
        # dicts; found here, it names the provider's call that carried it.
        for field, value in (("name", self.name), ("call id", self.call_id)):
            if not isinstance(value, str):
                raise ProviderError(
                    f"a tool call from the provider has a {field} of type "
                    f"{type(value).__name__}, not str: {_shown(value)}"
                )
        if self.invalid_arguments is not None and not isinstance(self.invalid_arguments, str):
            raise ProviderError(
                f"tool call {self.name!r}: invalid_arguments is the model's argument text, "
                f"a str, not {type(self.invalid_arguments).__name__}"
            )
        if not isinstance(self.arguments, Mapping):
            hint = (
                " (decode the JSON text a model API returns into a dict first)"
                if isinstance(self.arguments, str | bytes)
                else ""
            )
            call = f" (call id {self.call_id!r})" if self.call_id else ""
            raise ProviderError(
                f"tool call {self.name!r}{call} from the provider has arguments of type "
                f"{type(self.arguments).__name__}, not a mapping of names to values: "
                f"{_shown(self.arguments)}{hint}"
            )


# Bounded in depth and length: the value is a provider's, so it may be huge or
# nested deeper than repr() can recurse.
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel = 4
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHOWN_CHARS


def _shown(value: Any) -> str:
    shown = _SHORT_REPR.repr(value)
    return shown if len(shown) <= _SHOWN_CHARS else shown[: _SHOWN_CHARS - 3] + "..."


def _tool_call_tuple(calls: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(calls)


@attrs.frozen
class Message:
    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    """For a tool result: the call failed, was refused, or did not apply."""


@attrs.frozen
class ToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]


def _check_settings(settings: ModelSettings) -> None:
    if settings.model is not None and (not isinstance(settings.model, str) or not settings.model):
        raise ConfigurationError(f"model must be a non-empty string, not {settings.model!r}")
    temperature = settings.temperature
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature < math.inf
    ):
        raise ConfigurationError(f"temperature must be a number of 0 or more, not {temperature!r}")
    max_tokens = settings.max_tokens
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ConfigurationError(f"max_tokens must be a positive integer, not {max_tokens!r}")
    if not isinstance(settings.extra_body, Mapping):
        raise ConfigurationError(
            f"extra_body must be a mapping of field names to JSON values, "
            f"not {type(settings.extra_body).__name__}"
        )
    try:
        dump_json(dict(settings.extra_body), what="extra_body")
    except InvalidInput as exc:
        raise ConfigurationError(exc.message) from None


def _read_only_copy(value: Any) -> Any:
    # Settings are shared by every request of an agent: nobody may change them in passing.
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else value


@attrs.frozen
class ModelSettings:
    """What to ask the model with; a field left None keeps the provider's own setting.

    An agent carries its settings on every request, so one provider object
    serves agents that want different models or temperatures.
    """

    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    extra_body: Mapping[str, Any] = attrs.field(factory=dict, converter=_read_only_copy)
    """Fields added to the request body as they are, over the provider's own."""

    def __attrs_post_init__(self) -> None:
        _check_settings(self)

    def over(self, defaults: ModelSettings) -> ModelSettings:
        """These settings, with ``defaults`` filling what they leave None."""
        return ModelSettings(
            model=defaults.model if self.model is None else self.model,
            temperature=defaults.temperature if self.temperature is None else self.temperature,
            max_tokens=defaults.max_tokens if self.max_tokens is None else self.max_tokens,
            extra_body={**defaults.extra_body, **self.extra_body},
        )


@attrs.frozen
class ProviderRequest:
    run_id: str
    agent: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    model_settings: ModelSettings = ModelSettings()


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _token_count(owner: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    if not _is_count(value):
        raise ProviderError(
            f"the provider's {attribute.name} must be a count of tokens, not {_shown(value)}"
        )


@attrs.frozen
class Usage:
    """The tokens one provider turn cost."""

    input_tokens: int = attrs.field(default=0, validator=_token_count)
    output_tokens: int = attrs.field(default=0, validator=_token_count)

    @classmethod
    def read(cls, input_tokens: Any, output_tokens: Any) -> Usage | None:
        """The usage in two values read from JSON; None unless both are counts of tokens."""
        if not (_is_count(input_tokens) and _is_count(output_tokens)):
            return None
        return cls(input_tokens, output_tokens)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


@attrs.frozen
class ProviderReply:
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tool_call_tuple)
    usage: Usage | None = None
    model: str | None = None
    """The model that answered, as the provider names it."""
    stop_reason: str | None = None
    """Why the model stopped, in the provider's words (``stop``, ``tool_use``, ...)."""


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
    idempotency_key: str | None = None
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    available_at: float | None = None
    """When a queued run may be claimed: a requeued one's retry is due then."""
    read_at: float | None = attrs.field(default=None, eq=False)
    """The store's clock when the run was read, which its times compare with (a worker's
    clock may differ); None where the store did not say."""


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
    idempotency_key: str | None = None
    read_at: float | None = attrs.field(default=None, eq=False)
    """The store's clock when the row was read, if the read said."""

    def info(self) -> RunInfo:
        # Every field of a RunInfo is a RunRecord's, under the same name.
        return RunInfo(**{field.name: getattr(self, field.name) for field in attrs.fields(RunInfo)})


@attrs.frozen
class NewRun:
    id: str
    agent: str
    mode: RunMode
    input_json: str
    lease_owner: str | None = None
    lease_seconds: float | None = None
    idempotency_key: str | None = None
    request_digest: str | None = None
    """Of agent and input (``request_digest``); set with the key, to tell a retry from a reuse."""


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
class PurgedRun:
    """What a purge keeps of a run submitted with an idempotency key: the key, which
    still names the run, and how the run ended. Its input, result and journal are gone."""

    run_id: str
    agent: str
    idempotency_key: str
    state: RunState
    reason: Reason | None
    finished_at: float | None
    purged_at: float
    """On the store's clock."""


@attrs.frozen
class ForgetKeysResult:
    """What forgetting idempotency keys deleted, or with ``dry_run`` would delete."""

    keys: int
    batches: int
    created_before: float
    """The cutoff, on the store's clock: keys first used before it qualified."""
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
    # Error texts quote whatever failed, a tool's or provider's text included.
    error: str | None = attrs.field(default=None, converter=_valid_error)
    settles: bool = False
    withdraws: bool = False
    """Removes this step's ``started`` intent: its call never started, so it never ran."""
    started_at: float | None = None
    """When the call began, for rows written after it; None means "now" at commit."""

    def stored_in(self, row: StepInfo | None, epoch: int) -> bool:
        """Whether ``row`` (the journal's row at this ``seq``, or None) shows this change made
        under ``epoch``: how a writer whose commit went unanswered learns what it holds, and
        how the store tells a record sent again (stored already) from one it contradicts."""
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


class RequestKind(enum.StrEnum):
    """What a parked call waits for: a person's approval, or a person's input."""

    APPROVAL = "approval"
    INPUT = "input"

    @property
    def waiting_state(self) -> RunState:
        return TRANSITIONS[self.park_event][1]

    @property
    def park_event(self) -> Event:
        return Event.AWAIT_APPROVAL if self is RequestKind.APPROVAL else Event.AWAIT_INPUT

    @property
    def resume_event(self) -> Event:
        """The transition that requeues a run once every request of its turn is decided."""
        return Event.APPROVE if self is RequestKind.APPROVAL else Event.PROVIDE_INPUT


class Decision(enum.StrEnum):
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    """Rejected by the reaper: nobody decided before the request's expiry."""
    ANSWERED = "answered"
    """An input request, answered with a value."""


EXPIRED_REASON = "approval expired"


@attrs.frozen
class NewRequest:
    """A call that waits for a person, recorded with the settlement that parks its run."""

    seq: int
    """The provider turn that asked for the call: with the call id, what names it."""
    position: int
    """The call's place in that turn."""
    call_id: str
    kind: RequestKind
    tool: str
    effect: ToolEffect
    arguments_json: str
    arguments_digest: str
    timeout_seconds: float | None = None
    """Until the request expires as a rejection; None waits for ever (input never expires)."""


@attrs.frozen
class HumanRequest:
    """A journaled request for a person's approval of one call, or for their input."""

    run_id: str
    agent: str
    seq: int
    position: int
    call_id: str
    kind: RequestKind
    tool: str
    effect: ToolEffect
    arguments: Any
    arguments_digest: str
    epoch: int
    """The lease epoch of the attempt that parked the run."""
    requested_at: float
    expires_at: float | None
    decision: Decision | None
    operator: str | None
    note: str | None
    """The approver's note, the rejection's reason, or "approval expired"."""
    value: Any
    """An input request's answer."""
    decided_at: float | None
    age_seconds: float
    """Since the request was made, on the store's clock, when it was read."""

    @property
    def pending(self) -> bool:
        return self.decision is None

    @property
    def question(self) -> Any:
        """What an input request asks: its ``question`` argument, or all its arguments."""
        if isinstance(self.arguments, dict) and "question" in self.arguments:
            return self.arguments["question"]
        return self.arguments


@attrs.frozen
class Settlement:
    """How an attempt leaves a run: the transition and what to record with it."""

    event: Event
    reason: Reason | None = None
    failure_class: FailureClass | None = None
    result_json: str | None = None
    error: str | None = attrs.field(default=None, converter=_valid_error)
    delay_seconds: float = 0.0
    spends_retry: bool = False
    requests: tuple[NewRequest, ...] = ()
    """Calls that wait for a person, stored with a settlement that parks the run."""

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
