"""The run state machine table (DESIGN section 3, G9) and the backoff of the recovery policy."""

from __future__ import annotations

import itertools

import pytest

from leaseward.runtime.errors import IllegalTransition, LeasewardError
from leaseward.runtime.lifecycle import (
    BACKOFF_BASE_SECONDS,
    BACKOFF_CAP_SECONDS,
    MAX_REQUEUES,
    TERMINAL_STATES,
    TRANSITIONS,
    Event,
    Recovery,
    RecoveryAction,
    RecoveryPolicy,
    RunState,
    source_state,
    transition,
)

Q = RunState.QUEUED
R = RunState.RUNNING
WA = RunState.WAITING_FOR_APPROVAL
WI = RunState.WAITING_FOR_INPUT

# Written out by hand from DESIGN section 3, not read from the module under test.
EXPECTED: dict[str, tuple[str | None, str]] = {
    "submit": (None, "queued"),
    "start_interactive": (None, "running"),
    "claim": ("queued", "running"),
    "complete": ("running", "completed"),
    "fail": ("running", "failed"),
    "dead_letter": ("running", "dead_lettered"),
    "requeue": ("running", "queued"),
    "release": ("running", "queued"),
    "cancel_queued": ("queued", "cancelled"),
    "cancel_running": ("running", "cancelled"),
    "await_approval": ("running", "waiting_for_approval"),
    "await_input": ("running", "waiting_for_input"),
    "approve": ("waiting_for_approval", "queued"),
    "provide_input": ("waiting_for_input", "queued"),
    "cancel_waiting_approval": ("waiting_for_approval", "cancelled"),
    "cancel_waiting_input": ("waiting_for_input", "cancelled"),
    "redrive": ("dead_lettered", "queued"),
    "resolve": ("dead_lettered", "queued"),
}

# G9: a terminal run changes only by an explicit operator action.
OPERATOR_EVENTS = {Event.REDRIVE, Event.RESOLVE}

TERMINAL = {"completed", "failed", "cancelled", "dead_lettered"}
ALL_STATES: list[RunState | None] = [None, *RunState]


def test_states_are_the_designed_ones() -> None:
    assert {s.value for s in RunState} == {
        "queued",
        "running",
        "waiting_for_approval",
        "waiting_for_input",
        *TERMINAL,
    }


def test_terminal_states() -> None:
    assert {s.value for s in TERMINAL_STATES} == TERMINAL
    for state in RunState:
        assert state.terminal is (state.value in TERMINAL)


def test_table_matches_the_design() -> None:
    actual = {
        event.value: (None if src is None else src.value, dst.value)
        for event, (src, dst) in TRANSITIONS.items()
    }
    assert actual == EXPECTED
    assert set(TRANSITIONS) == set(Event)


@pytest.mark.parametrize(
    ("state", "event"), list(itertools.product(ALL_STATES, Event)), ids=lambda v: str(v)
)
def test_transition_every_pair(state: RunState | None, event: Event) -> None:
    source, target = EXPECTED[event.value]
    legal = (state is None and source is None) or (state is not None and state.value == source)
    if legal:
        result = transition(state, event)
        assert isinstance(result, RunState)
        assert result.value == target
    else:
        with pytest.raises(IllegalTransition) as info:
            transition(state, event)
        assert isinstance(info.value, LeasewardError)
        assert str(info.value)


def test_each_state_has_exactly_its_legal_events() -> None:
    for state in ALL_STATES:
        allowed = set()
        for event in Event:
            try:
                transition(state, event)
            except IllegalTransition:
                continue
            allowed.add(event.value)
        expected = {
            name
            for name, (src, _) in EXPECTED.items()
            if src == (None if state is None else state.value)
        }
        assert allowed == expected, state


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
def test_terminal_is_terminal(state: RunState) -> None:
    # G9: only operator actions leave a terminal state.
    leaving = {event for event, (src, _) in TRANSITIONS.items() if src is state}
    assert leaving <= OPERATOR_EVENTS
    for event in Event:
        if event in leaving:
            continue
        with pytest.raises(IllegalTransition):
            transition(state, event)


def test_non_terminal_states_all_have_a_way_out() -> None:
    for state in RunState:
        if not state.terminal:
            assert any(src is state for src, _ in TRANSITIONS.values()), state


def test_nothing_enters_a_creation_event_from_an_existing_run() -> None:
    for state in RunState:
        for event in (Event.SUBMIT, Event.START_INTERACTIVE):
            with pytest.raises(IllegalTransition):
                transition(state, event)


@pytest.mark.parametrize("event", list(Event))
def test_source_state(event: Event) -> None:
    source = EXPECTED[event.value][0]
    if source is None:
        with pytest.raises(IllegalTransition):
            source_state(event)
    else:
        assert source_state(event) is RunState(source)


def test_illegal_transition_message_names_state_and_event() -> None:
    with pytest.raises(IllegalTransition, match="completed") as info:
        transition(RunState.COMPLETED, Event.REQUEUE)
    assert "requeue" in str(info.value)
    with pytest.raises(IllegalTransition, match="nothing"):
        transition(None, Event.CLAIM)


def test_recovery_event_mapping() -> None:
    assert Recovery(RecoveryAction.REQUEUE, None).event is Event.REQUEUE
    assert Recovery(RecoveryAction.DEAD_LETTER, None).event is Event.DEAD_LETTER
    assert Recovery(RecoveryAction.FAIL, None).event is Event.FAIL
    assert Recovery(RecoveryAction.FAIL, None).delay_seconds == 0.0


def test_policy_defaults() -> None:
    assert MAX_REQUEUES == 3
    assert BACKOFF_BASE_SECONDS == 30.0
    assert BACKOFF_CAP_SECONDS == 600.0
    policy = RecoveryPolicy()
    assert policy.max_requeues == 3
    assert policy.backoff_base_seconds == 30.0
    assert policy.backoff_cap_seconds == 600.0


@pytest.mark.parametrize(
    ("n", "expected"),
    [(0, 30.0), (1, 60.0), (2, 120.0), (3, 240.0), (4, 480.0), (5, 600.0), (6, 600.0), (20, 600.0)],
)
def test_default_backoff(n: int, expected: float) -> None:
    result = RecoveryPolicy().backoff_seconds(n)
    assert isinstance(result, float)
    assert result == expected


def test_custom_backoff_is_base_times_power_of_two_capped() -> None:
    policy = RecoveryPolicy(max_requeues=10, backoff_base_seconds=1.5, backoff_cap_seconds=10.0)
    assert [policy.backoff_seconds(n) for n in range(6)] == [1.5, 3.0, 6.0, 10.0, 10.0, 10.0]
    for n in range(40):
        assert policy.backoff_seconds(n) == min(10.0, 1.5 * 2**n)


def test_backoff_is_monotonic_and_never_over_the_cap() -> None:
    policy = RecoveryPolicy()
    values = [policy.backoff_seconds(n) for n in range(64)]
    assert values == sorted(values)
    assert max(values) == BACKOFF_CAP_SECONDS


def test_backoff_for_a_huge_requeue_count_is_the_cap() -> None:
    assert RecoveryPolicy(max_requeues=5000).backoff_seconds(1100) == BACKOFF_CAP_SECONDS
