"""StoreFaults: each kind of store failure told once, its repeats summed up now and then,
and the store's first answer after them told once."""

from __future__ import annotations

from typing import Any

from leaseward.actors.store_faults import REPEATS_LOGGED_EVERY_SECONDS, StoreFaults
from leaseward.runtime.clock import ManualClock
from leaseward.runtime.logs import get_logger
from tests.integration.support import capture_logs

log = get_logger("leaseward.test")


def lines(logs: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (line["event"], {k: v for k, v in line.items() if k not in ("event", "log_level")})
        for line in logs
    ]


def test_a_kind_that_keeps_failing_is_told_once_then_summed_up_every_interval() -> None:
    clock = ManualClock()
    faults = StoreFaults(clock)
    with capture_logs() as logs:
        faults.failed(log, "claim.failed", "refused 1")
        for n in range(2, 5):
            clock.advance(1.0)
            faults.failed(log, "claim.failed", f"refused {n}")
        assert lines(logs) == [("claim.failed", {"error": "refused 1"})]
        clock.advance(REPEATS_LOGGED_EVERY_SECONDS - 3.0)
        faults.failed(log, "claim.failed", "refused 5")
        faults.failed(log, "claim.failed", "refused 6")
    assert lines(logs)[1:] == [
        (
            "claim.failed",
            {
                "error": "refused 5",
                "repeated": 4,
                "over_seconds": REPEATS_LOGGED_EVERY_SECONDS,
            },
        )
    ]
    assert all(line["log_level"] == "warning" for line in logs)


def test_each_kind_is_told_with_its_own_fields_and_the_first_answer_ends_the_outage() -> None:
    clock = ManualClock()
    faults = StoreFaults(clock)
    with capture_logs() as logs:
        faults.failed(log, "persister.batch_failed", "gone", items=3, outcome_unknown=False)
        faults.failed(log, "lease.renew_failed", "gone", runs=4)
        faults.failed(log, "persister.batch_failed", "gone", items=1, outcome_unknown=False)
        clock.advance(2.5)
        faults.answered("persister.batch_failed")
        # The outage was told over; the kinds answered later have nothing more to say.
        faults.answered("persister.batch_failed")
        faults.answered("lease.renew_failed")
    assert lines(logs) == [
        ("persister.batch_failed", {"error": "gone", "items": 3, "outcome_unknown": False}),
        ("lease.renew_failed", {"error": "gone", "runs": 4}),
        (
            "store.answering",
            {
                "after_seconds": 2.5,
                "failures": {"persister.batch_failed": 2, "lease.renew_failed": 1},
            },
        ),
    ]
    assert [line["log_level"] for line in logs] == ["warning", "warning", "info"]


def test_a_kind_failing_alone_keeps_to_its_own_lines_until_it_is_answered() -> None:
    clock = ManualClock()
    faults = StoreFaults(clock)
    with capture_logs() as logs:
        faults.failed(log, "reaper.expiry_failed", "refused")
        faults.answered("claim.failed")
        for _ in range(5):
            clock.advance(0.1)
            faults.failed(log, "reaper.expiry_failed", "refused")
            faults.answered("claim.failed")
        assert [event for event, _ in lines(logs)] == ["reaper.expiry_failed"]
        faults.answered("reaper.expiry_failed")
    assert lines(logs)[1:] == [
        ("store.answering", {"after_seconds": 0.5, "failures": {"reaper.expiry_failed": 6}})
    ]


def test_a_kind_that_fails_after_the_store_answered_is_told_from_its_first_line() -> None:
    clock = ManualClock()
    faults = StoreFaults(clock)
    with capture_logs() as logs:
        faults.failed(log, "claim.failed", "down")
        faults.failed(log, "lease.renew_failed", "down", runs=1)
        faults.answered("claim.failed")
        faults.failed(log, "lease.renew_failed", "down again", runs=1)
        faults.answered("lease.renew_failed")
    assert [(event, fields.get("error")) for event, fields in lines(logs)] == [
        ("claim.failed", "down"),
        ("lease.renew_failed", "down"),
        ("store.answering", None),
        ("lease.renew_failed", "down again"),
        ("store.answering", None),
    ]


def test_a_finer_kind_is_summed_up_apart_under_the_same_event() -> None:
    clock = ManualClock()
    faults = StoreFaults(clock)
    with capture_logs() as logs:
        faults.failed(log, "persister.batch_failed", "refused", outcome_unknown=False)
        faults.failed(log, "persister.batch_failed", "lost", kind="unknown", outcome_unknown=True)
        faults.failed(log, "persister.batch_failed", "refused", outcome_unknown=False)
        faults.answered("persister.batch_failed", "unknown")
    assert lines(logs) == [
        ("persister.batch_failed", {"error": "refused", "outcome_unknown": False}),
        ("persister.batch_failed", {"error": "lost", "outcome_unknown": True}),
        (
            "store.answering",
            {"after_seconds": 0.0, "failures": {"persister.batch_failed": 2, "unknown": 1}},
        ),
    ]


def test_a_store_that_never_failed_logs_nothing_when_answered() -> None:
    faults = StoreFaults(ManualClock())
    with capture_logs() as logs:
        faults.answered("claim.failed")
    assert logs == []
