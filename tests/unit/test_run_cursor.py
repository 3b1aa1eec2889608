"""RunCursor: where a page of runs ends, as a token a URL can carry."""

from __future__ import annotations

import base64
import re
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leaseward import InvalidInput, RunInfo
from leaseward.runtime.lifecycle import RunMode, RunState
from leaseward.runtime.listing import MAX_CURSOR_CHARS, RunCursor

run_ids = st.text(min_size=1).filter(lambda text: "\x00" not in text and text.isprintable())
instants = st.floats(allow_nan=False, allow_infinity=False)


@given(created_at=instants, run_id=run_ids)
def test_a_token_reads_back_as_the_same_cursor(created_at: float, run_id: str) -> None:
    cursor = RunCursor(created_at=created_at, id=run_id)
    token = cursor.token()
    assert re.fullmatch(r"[A-Za-z0-9_-]+", token)
    assert RunCursor.parse(token) == cursor


def test_a_cursor_is_made_from_the_last_run_of_a_page() -> None:
    run = RunInfo(
        id="7f1c",
        agent="a",
        mode=RunMode.QUEUED,
        state=RunState.COMPLETED,
        reason=None,
        failure_class=None,
        result=None,
        epoch=1,
        requeues=0,
        created_at=1_700_000_000.123456,
        finished_at=None,
    )
    assert RunCursor.of(run) == RunCursor(created_at=1_700_000_000.123456, id="7f1c")


def test_a_token_for_a_uuid_run_is_compact() -> None:
    token = RunCursor(created_at=1_700_000_000.5, id="0b6f8c1e-3f1a-4c56-9d2e-7a8b9c0d1e2f").token()
    assert len(token) <= 60


def _encoded(packed: bytes) -> str:
    return base64.urlsafe_b64encode(packed).decode().rstrip("=")


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "not a cursor",
        "abc$def",
        "A",  # one base64 character is no whole byte
        _encoded(b"\x00\x00\x00"),  # shorter than the instant
        _encoded(struct.pack(">d", 1.0)),  # no run id
        _encoded(struct.pack(">d", float("nan")) + b"run"),
        _encoded(struct.pack(">d", float("inf")) + b"run"),
        _encoded(struct.pack(">d", 1.0) + b"\xff\xfe"),  # not UTF-8
        _encoded(struct.pack(">d", 1.0) + b"r\x00n"),  # NUL, which no stored id holds
        _encoded(struct.pack(">d", 1.0) + b"run") + "=",  # padding is never written
        "A" * (MAX_CURSOR_CHARS + 4),
    ],
)
def test_garbage_is_not_a_cursor(garbage: str) -> None:
    with pytest.raises(InvalidInput, match="not a cursor"):
        RunCursor.parse(garbage)


def test_a_second_spelling_of_the_same_bytes_is_refused() -> None:
    token = RunCursor(
        created_at=2.0, id="ab"
    ).token()  # 10 bytes: the last character has spare bits
    respelled = token[:-1] + chr(ord(token[-1]) + 1)
    assert base64.urlsafe_b64decode(respelled + "==") == base64.urlsafe_b64decode(token + "==")
    with pytest.raises(InvalidInput):
        RunCursor.parse(respelled)


@pytest.mark.parametrize(
    ("created_at", "run_id"),
    [(float("nan"), "r"), (float("inf"), "r"), (True, "r"), ("1.0", "r"), (1.0, ""), (1.0, 7)],
)
def test_a_cursor_of_a_wrong_value_is_refused(created_at: object, run_id: object) -> None:
    with pytest.raises(InvalidInput):
        RunCursor(created_at=created_at, id=run_id)  # type: ignore[arg-type]
