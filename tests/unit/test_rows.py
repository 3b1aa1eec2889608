"""Rows read back as the model's types, by columns derived from the model's fields."""

from __future__ import annotations

import sqlite3
import types
from typing import Any

import attrs
import pytest

from leaseward.runtime.failures import FailureClass
from leaseward.runtime.lifecycle import Reason, RunMode, RunState
from leaseward.runtime.runs import RunInfo, RunRecord
from leaseward.storage.executor import Row
from leaseward.storage.rows import RUN_COLUMNS, run_from_row

ROW: dict[str, Any] = {
    "id": "run-1",
    "agent": "agent",
    "mode": "queued",
    "state": "dead_lettered",
    "reason": "not_retryable",
    "failure_class": "client_error",
    "input_json": '{"q":1}',
    "result_json": None,
    "error": "boom",
    "epoch": 3,
    "requeues": 1,
    "lease_owner": None,
    "lease_expires_at": None,
    "available_at": 5.0,
    "cancel_requested": 0,
    "created_at": 1.0,
    "updated_at": 2.0,
    "finished_at": 2.0,
    "idempotency_key": "k",
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "request_digest": "not a field of a run",
}


def test_a_run_row_reads_back_typed() -> None:
    run = run_from_row(ROW)
    assert run.mode is RunMode.QUEUED
    assert run.state is RunState.DEAD_LETTERED
    assert run.reason is Reason.NOT_RETRYABLE
    assert run.failure_class is FailureClass.CLIENT_ERROR
    assert run.input == {"q": 1}
    assert run.result is None
    assert run.cancel_requested is False
    assert run.read_at is None


def test_the_store_clock_is_read_where_a_query_selects_it() -> None:
    assert run_from_row({**ROW, "read_at": 9.0}).read_at == 9.0


def test_every_field_of_a_run_has_its_column() -> None:
    names = {column.name for column in RUN_COLUMNS}
    assert names == {*ROW} - {"request_digest"} | {"read_at"}


def test_a_run_as_users_see_it_is_read_from_its_record() -> None:
    info = run_from_row({**ROW, "read_at": 9.0}).info()
    assert (info.state, info.reason, info.error, info.read_at) == (
        RunState.DEAD_LETTERED,
        Reason.NOT_RETRYABLE,
        "boom",
        9.0,
    )
    assert {field.name for field in attrs.fields(RunInfo)} <= {
        field.name for field in attrs.fields(RunRecord)
    }


def _sqlite_row(columns: dict[str, Any]) -> Row:
    """A row as SQLite's executor returns it."""
    connection = sqlite3.connect(":memory:")
    connection.row_factory = sqlite3.Row
    names = ", ".join(f"? AS {name}" for name in columns)
    row: Row = connection.execute(f"SELECT {names}", tuple(columns.values())).fetchone()
    connection.close()
    return row


def test_a_store_row_reads_back_as_its_mapping_does_whatever_the_order_of_its_columns() -> None:
    as_selected = _sqlite_row(ROW)
    reversed_order = _sqlite_row(dict(reversed(list(ROW.items()))))
    with_clock = _sqlite_row({**ROW, "read_at": 9.0})

    assert run_from_row(as_selected) == run_from_row(ROW)
    assert run_from_row(types.MappingProxyType(ROW)) == run_from_row(ROW)
    assert run_from_row(reversed_order) == run_from_row(ROW)
    assert run_from_row(with_clock).read_at == 9.0
    assert run_from_row(as_selected).read_at is None


def test_a_row_without_a_column_its_record_needs_is_refused() -> None:
    without_state = {name: value for name, value in ROW.items() if name != "state"}
    with pytest.raises(KeyError, match="'state'"):
        run_from_row(without_state)
    with pytest.raises(KeyError, match="'state'"):
        run_from_row(_sqlite_row(without_state))


def test_columns_a_query_leaves_out_read_back_as_their_fields_defaults_in_place() -> None:
    # Without two columns before the clock's: every field after them is still given its
    # own value, not its neighbour's.
    left_out = ("idempotency_key", "traceparent")
    older = {name: value for name, value in ROW.items() if name not in left_out}
    for row in ({**older, "read_at": 9.0}, _sqlite_row({**older, "read_at": 9.0})):
        run = run_from_row(row)
        assert (run.idempotency_key, run.traceparent, run.read_at) == (None, None, 9.0)
        assert (run.finished_at, run.cancel_requested) == (2.0, False)


def test_a_stored_value_that_is_no_member_of_its_kind_is_refused() -> None:
    with pytest.raises(KeyError, match="'sleeping'"):
        run_from_row({**ROW, "state": "sleeping"})
    with pytest.raises(KeyError, match="None"):
        run_from_row({**ROW, "mode": None})
