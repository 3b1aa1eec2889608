"""What `leaseward show` prints of text a model or a tool wrote: escaped, never acted on."""

from __future__ import annotations

import attrs
import pytest

from leaseward.cli.timeline import print_timeline, took
from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import Reason, RunMode, RunState, StepKind, StepStatus
from leaseward.runtime.runs import RunInfo


def test_control_and_bidi_characters_of_a_tool_are_printed_as_escapes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = RunInfo(
        id="r1", agent="payer", mode=RunMode.QUEUED, state=RunState.FAILED,
        reason=Reason.NOT_RETRYABLE,
        failure_class=None, result=None, epoch=1, requeues=0, created_at=1.0,
        finished_at=2.0, error="boom\x1b[2J\nforged line", idempotency_key=None,
    )  # fmt: skip
    step = StepInfo(
        run_id="r1", seq=1, epoch=1, kind=StepKind.TOOL, tool="charge\x1b]0;owned\x07",
        call_id="c1", effect=ToolEffect.READ_ONLY, status=StepStatus.FAILED,
        idempotency_key="k", arguments={}, output=None, error="bad\u202eelif\r",
        started_at=1.0, finished_at=1.5,
    )  # fmt: skip
    print_timeline(run, [step], "sqlite:///runs.db")
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\x07" not in printed and "\u202e" not in printed
    assert "\r" not in printed
    assert "error: boom\\x1b[2J\\x0aforged line" in printed
    assert "charge\\x1b]0;owned\\x07" in printed
    assert "error: bad\\u202eelif\\x0d" in printed


@pytest.mark.parametrize("reason", [Reason.NOT_RETRYABLE, Reason.RETRIES_EXHAUSTED])
def test_a_dead_letter_that_needs_no_verdict_is_shown_with_its_redrive(
    capsys: pytest.CaptureFixture[str], reason: Reason
) -> None:
    run = RunInfo(
        id="r1", agent="payer", mode=RunMode.QUEUED, state=RunState.DEAD_LETTERED,
        reason=reason, failure_class=None, result=None, epoch=1, requeues=3,
        created_at=1.0, finished_at=2.0, error="quota exceeded", idempotency_key=None,
    )  # fmt: skip
    print_timeline(run, [], "sqlite:///other runs.db")
    printed = capsys.readouterr().out
    assert "  leaseward redrive r1 --store 'sqlite:///other runs.db'\n" in printed
    # Printed for a ticket or a chat: the store's password is never in it.
    print_timeline(run, [], "postgresql://ops:s3cret@db.internal:5432/runs?sslmode=require")
    printed = capsys.readouterr().out
    assert "s3cret" not in printed
    assert (
        "  leaseward redrive r1 --store 'postgresql://ops:***@db.internal:5432/runs?sslmode=require'"
        in printed
    )


def test_an_intent_left_open_by_an_attempt_made_again_is_not_shown_for_a_verdict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Step 1 is the intent of an idempotent write whose attempt was interrupted and
    made again as step 2; the run was dead-lettered over step 4, whose outcome did get
    stored. `resolve` looks at the newest step only, so show must too: redrive."""
    run = RunInfo(
        id="r1", agent="payer", mode=RunMode.QUEUED, state=RunState.DEAD_LETTERED,
        reason=Reason.INTERRUPTED_WRITE, failure_class=None, result=None, epoch=2,
        requeues=1, created_at=1.0, finished_at=2.0, error="lost answer",
        idempotency_key=None,
    )  # fmt: skip

    def step(seq: int, tool: str | None, effect: ToolEffect | None, status: StepStatus) -> StepInfo:
        return StepInfo(
            run_id="r1", seq=seq, epoch=1 if seq < 2 else 2,
            kind=StepKind.PROVIDER if tool is None else StepKind.TOOL, tool=tool,
            call_id=None if tool is None else f"{tool}-1", effect=effect, status=status,
            idempotency_key=None if tool is None else "k", arguments=None, output=None,
            error=None, started_at=1.0, finished_at=None if status is StepStatus.STARTED else 1.5,
        )  # fmt: skip

    steps = [
        step(0, None, None, StepStatus.SUCCEEDED),
        step(1, "stamp", ToolEffect.IDEMPOTENT_WRITE, StepStatus.STARTED),
        step(2, "stamp", ToolEffect.IDEMPOTENT_WRITE, StepStatus.SUCCEEDED),
        step(3, None, None, StepStatus.SUCCEEDED),
        step(4, "charge", ToolEffect.NON_IDEMPOTENT_WRITE, StepStatus.SUCCEEDED),
    ]
    print_timeline(run, steps, "sqlite:///runs.db")
    printed = capsys.readouterr().out
    assert "leaseward resolve" not in printed
    assert "  leaseward redrive r1 --store sqlite:///runs.db\n" in printed


@pytest.mark.parametrize(
    ("state", "reason", "shown"),
    [
        (RunState.RUNNING, None, "cancel requested: the run stops at its next step boundary"),
        (
            RunState.QUEUED,
            None,
            "cancel requested while it ran: the worker that claims it cancels it before it "
            "runs anything; `leaseward cancel` again cancels it at once",
        ),
        (
            RunState.DEAD_LETTERED,
            Reason.INTERRUPTED_WRITE,
            "cancel requested: a resolve keeps it, and the run stops before its next call; "
            "a redrive drops it",
        ),
        (RunState.CANCELLED, Reason.CANCELLED, None),
    ],
)
def test_a_cancel_not_yet_carried_out_is_shown_with_what_becomes_of_it(
    capsys: pytest.CaptureFixture[str], state: RunState, reason: Reason | None, shown: str | None
) -> None:
    run = RunInfo(
        id="r1", agent="payer", mode=RunMode.QUEUED, state=state, reason=reason,
        failure_class=None, result=None, epoch=1, requeues=0, created_at=1.0,
        finished_at=None, cancel_requested=True,
    )  # fmt: skip
    print_timeline(run, [], "sqlite:///runs.db")
    printed = capsys.readouterr().out
    if shown is None:
        assert "cancel requested" not in printed
    else:
        assert f"\n{shown}\n" in printed


def test_a_provider_turn_took_as_long_as_its_reply_not_the_call_journaled_with_it() -> None:
    """The turn's row is committed with the read that followed it, two seconds later."""
    turn = StepInfo(
        run_id="r1", seq=0, epoch=1, kind=StepKind.PROVIDER, tool=None, call_id=None,
        effect=None, status=StepStatus.SUCCEEDED, idempotency_key=None, arguments=None,
        output={"text": None, "latency_ms": 12.5}, error=None, started_at=1.0,
        finished_at=3.0,
    )  # fmt: skip
    assert took(turn) == "12.5 ms"
    older = StepInfo(**{**attrs.asdict(turn, recurse=False), "output": {"text": "hi"}})
    assert took(older) == "2.0 s"
