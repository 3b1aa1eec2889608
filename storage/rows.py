"""Rows as the model's types: how each table's row reads back, and how a set of rows is sent."""

from __future__ import annotations

import enum
import json
import operator
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, Union

import attrs
import pydantic_core

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import load_json
from leaseward.runtime.human_requests import Decision, HumanRequest, RequestKind
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import Reason, RunState
from leaseward.runtime.retention import PurgedRun
from leaseward.runtime.runs import RunRecord
from leaseward.runtime.workers import WorkerInfo
from leaseward.storage.executor import Row

T = TypeVar("T")

__all__ = [
    "RUN_COLUMNS",
    "STEP_COLUMNS",
    "json_set",
    "optional",
    "purged_from_row",
    "request_from_row",
    "run_from_row",
    "step_from_row",
    "worker_from_row",
]


def optional(kind: Any, value: Any) -> Any:
    return None if value is None else kind(value)


@attrs.frozen
class _Column:
    """Where a model field is stored, and how its stored value reads back."""

    name: str
    read: Callable[[Any], Any]
    default: Any
    """What the field holds when a query does not select its column (as ``read_at``,
    which only reads that ask the store's clock return); attrs.NOTHING for a field that
    has no default, whose column every query must select."""


def _reader(kind: Any) -> Callable[[Any], Any]:
    members = [member for member in typing.get_args(kind) if member is not type(None)]
    optional_kind = typing.get_origin(kind) in (Union, types.UnionType)
    base = members[0] if optional_kind else kind
    if isinstance(base, type) and issubclass(base, enum.Enum):
        # A dict's lookup is called without a frame of Python, where Enum(value) takes
        # its metaclass's __call__: a third of a run row's reading, in a claim of many.
        by_value: dict[Any, Any] = {member.value: member for member in base}
        if optional_kind:
            by_value[None] = None
        return by_value.__getitem__
    if base is bool:
        # SQLite stores a flag as 0 or 1.
        return bool
    return _as_stored


def _as_stored(value: Any) -> Any:
    return value


def _columns(model: type[Any]) -> tuple[_Column, ...]:
    """One column per attrs field of ``model``: a field typed Any holds JSON, in its
    ``<name>_json`` column; every other field is stored in the column of its name."""
    hints = typing.get_type_hints(model)
    columns = []
    for field in attrs.fields(model):
        if isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            # A row is made by position with the defaults it lacks, one value for all.
            raise TypeError(f"{model.__name__}.{field.name}'s default is made per object")
        kind = hints[field.name]
        stored_as_json = kind is Any
        columns.append(
            _Column(
                name=f"{field.name}_json" if stored_as_json else field.name,
                read=load_json if stored_as_json else _reader(kind),
                default=field.default,
            )
        )
    return tuple(columns)


RUN_COLUMNS = _columns(RunRecord)
STEP_COLUMNS = _columns(StepInfo)


_READINGS: dict[tuple[type[Any], tuple[str, ...], bool], Callable[[Row], Any]] = {}
"""For each model and shape of row (its columns, and whether it is read by name), what
makes the model of such a row."""


def _reading(
    model: type[T], columns: tuple[_Column, ...], keys: tuple[str, ...], by_name: bool
) -> Callable[[Row], T]:
    """What makes a ``model`` of a row whose columns are ``keys``: every field given by
    position, in the model's order, as its column reads back or, where the row has no
    such column, as its default. A column missing for a field with no default is a
    KeyError: a query that does not select it is a bug."""
    where = {name: index for index, name in enumerate(keys)}
    taken: list[int | str] = []
    defaults: list[tuple[int, Any]] = []
    reads: list[tuple[int, Callable[[Any], Any]]] = []
    for position, column in enumerate(columns):
        if column.name not in where:
            if column.default is attrs.NOTHING:
                raise KeyError(f"the row has no column {column.name!r}")
            defaults.append((position, column.default))
            continue
        taken.append(column.name if by_name else where[column.name])
        if column.read is not _as_stored:
            reads.append((position, column.read))
    take = operator.itemgetter(*taken)
    one = len(taken) == 1

    def make(row: Row) -> T:
        # Given by position: keywords cost a dict a row, and a claim reads runs by the score.
        values = [take(row)] if one else list(take(row))
        for position, default in defaults:
            values.insert(position, default)
        for position, read in reads:
            values[position] = read(values[position])
        return model(*values)

    return make


def _from_row(model: type[T], columns: tuple[_Column, ...], row: Row) -> T:
    # A store's rows (sqlite3.Row, asyncpg's Record) are read by position: by name,
    # sqlite3.Row looks for each name among all of its columns. Neither is a Mapping:
    # a Mapping is read by name, all that it promises.
    keys = tuple(row.keys())
    by_name = isinstance(row, Mapping)
    shape = (model, keys, by_name)
    make = _READINGS.get(shape)
    if make is None:
        make = _READINGS[shape] = _reading(model, columns, keys, by_name)
    return make(row)  # type: ignore[no-any-return]


def run_from_row(row: Row) -> RunRecord:
    return _from_row(RunRecord, RUN_COLUMNS, row)


def step_from_row(row: Row) -> StepInfo:
    return _from_row(StepInfo, STEP_COLUMNS, row)


def request_from_row(row: Row) -> HumanRequest:
    return HumanRequest(
        run_id=row["run_id"],
        agent=row["agent"],
        seq=row["seq"],
        position=row["position"],
        call_id=row["call_id"],
        kind=RequestKind(row["kind"]),
        tool=row["tool"],
        effect=ToolEffect(row["effect"]),
        arguments=load_json(row["arguments_json"]),
        arguments_digest=row["arguments_digest"],
        epoch=row["epoch"],
        requested_at=row["requested_at"],
        expires_at=row["expires_at"],
        decision=optional(Decision, row["decision"]),
        operator=row["operator"],
        note=row["note"],
        value=load_json(row["value_json"]),
        decided_at=row["decided_at"],
        age_seconds=max(0.0, row["now"] - row["requested_at"]),
    )


def worker_from_row(row: Row) -> WorkerInfo:
    return WorkerInfo(
        id=row["id"],
        host=row["host"],
        pid=row["pid"],
        agents=tuple(json.loads(row["agents_json"])),
        started_at=row["started_at"],
        heartbeat_at=row["heartbeat_at"],
        heartbeat_age_seconds=max(0.0, row["now"] - row["heartbeat_at"]),
        stale_after_seconds=row["stale_after_seconds"],
        draining_since=row["draining_since"],
    )


def purged_from_row(key: Row) -> PurgedRun:
    return PurgedRun(
        run_id=key["run_id"],
        agent=key["agent"],
        idempotency_key=key["idempotency_key"],
        state=RunState(key["final_state"]),
        reason=optional(Reason, key["final_reason"]),
        finished_at=key["finished_at"],
        purged_at=key["purged_at"],
    )


def json_set(rows: Iterable[dict[str, Any] | list[Any]]) -> str:
    """A set of rows as the one JSON parameter a set statement reads them from.

    Not ASCII-escaped: text a database cannot store (a lone surrogate) stays
    as it is, so the driver refuses it as a data error instead of the database
    storing something else.
    """
    rows = list(rows)
    try:
        # Every commit encodes its batch's sets holding the interpreter's lock (on the
        # event loop for PostgreSQL): pydantic's encoder takes a third of the json
        # module's time.
        return pydantic_core.to_json(rows, inf_nan_mode="constants").decode()
    except pydantic_core.PydanticSerializationError:
        # It refuses a lone surrogate, which the driver is to refuse instead.
        return json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
