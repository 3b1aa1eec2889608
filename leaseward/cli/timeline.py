"""``leaseward show``: a run, its journal as a timeline, what waits for a person, and
what the operator does next. The console draws its run page from the same lines."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence

from leaseward.cli.defaults import DEFAULT_STORE_URL
from leaseward.cli.json_output import total_usage
from leaseward.cli.tables import (
    RUN_COLUMNS,
    count,
    run_row,
    shortened,
    shown,
    table,
    timestamp,
    tokens,
)
from leaseward.runtime.conversation import usage_from_json
from leaseward.runtime.encoding import DIGEST_SHOWN
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.human_requests import Decision, HumanRequest, RequestKind
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import (
    REDRIVABLE_REASONS,
    Reason,
    RecoveryAction,
    RecoveryPolicy,
    RunState,
    StepKind,
    StepStatus,
    decide_recovery,
)
from leaseward.runtime.runs import RunInfo
from leaseward.runtime.workers import WorkerInfo
from leaseward.storage.url import without_password

__all__ = [
    "cancel_line",
    "interrupted_call",
    "lease_lines",
    "nobody_reaps",
    "print_timeline",
    "step_details",
    "took",
]


_STEP_COLUMNS = ("SEQ", "EPOCH", "STEP", "EFFECT", "STATUS", "TOOK")


def took(step: StepInfo) -> str:
    if step.resolved_at is not None:
        # finished_at is when the operator decided, maybe hours later: how long the
        # call itself took is unknown.
        return "unknown"
    if step.finished_at is None:
        return "open"
    seconds = step.finished_at - step.started_at
    latency = step.output.get("latency_ms") if isinstance(step.output, dict) else None
    if step.kind is StepKind.PROVIDER and isinstance(latency, int | float):
        # A provider turn is journaled with the record its run makes next, so its
        # finished_at includes the call that followed: the reply's own wait is kept.
        seconds = latency / 1000
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.1f} s"


def step_details(step: StepInfo, *, arguments: bool = True) -> list[str]:
    """The lines under a step; ``arguments`` False leaves out its arguments, for a page
    that shows them itself."""
    details: list[str] = []
    usage = usage_from_json(step.output) if step.kind is StepKind.PROVIDER else None
    if usage is not None:
        model = step.output.get("model")
        details.append(f"tokens: {tokens(usage)}" + (f" ({model})" if model else ""))
    if arguments and step.tool is not None and step.arguments is not None:
        text = json.dumps(step.arguments, ensure_ascii=False)
        details.append(f"arguments: {shortened(text)}")
    if step.resolved_by is not None:
        output = step.output if isinstance(step.output, dict) else {}
        verdict = str(output.get("resolution", "resolved")).replace("_", " ")
        note = output.get("note")
        when = "" if step.resolved_at is None else f" at {timestamp(step.resolved_at)}"
        details.append(
            f"resolved: {verdict}, by {step.resolved_by}{when}"
            + (f": {shortened(str(note))}" if note else "")
        )
    elif step.error:
        details.append(f"error: {step.error}")
    return details


def cancel_line(run: RunInfo) -> str | None:
    """What becomes of a cancel asked and not yet carried out."""
    if not run.cancel_requested:
        return None
    if run.state is RunState.DEAD_LETTERED:
        return (
            "cancel requested: a resolve keeps it, and the run stops before its next call; "
            "a redrive drops it"
        )
    if run.state.terminal:
        return None
    if run.state is RunState.QUEUED:
        # Asked while it ran, and then released (a drain, a reap) before it stopped:
        # it has no step boundary to reach until a worker claims it again.
        return (
            "cancel requested while it ran: the worker that claims it cancels it before it "
            "runs anything; `leaseward cancel` again cancels it at once"
        )
    return "cancel requested: the run stops at its next step boundary"


def _store_flag(store: str) -> str:
    """``--store URL`` when a command without it would open another store, else nothing;
    a password in the URL is written ``***``, to be typed in again."""
    implied = os.environ.get("LEASEWARD_STORE") or DEFAULT_STORE_URL
    return "" if store == implied else f" --store {shlex.quote(without_password(store))}"


def interrupted_call(run: RunInfo, steps: Sequence[StepInfo]) -> StepInfo | None:
    """The call an interrupted write left open: its outcome is what the operator decides."""
    if run.state is not RunState.DEAD_LETTERED or run.reason is not Reason.INTERRUPTED_WRITE:
        return None
    # By status: an intent whose call raised or timed out has ended, yet stays open. The
    # newest step only, as `resolve` takes it: an older intent stays open when its call
    # was made again under its key, and is no longer anybody's to decide.
    call = steps[-1] if steps else None
    if call is None or call.status is not StepStatus.STARTED or call.tool is None:
        return None
    return call


def _next_steps(run: RunInfo, steps: Sequence[StepInfo], store: str) -> list[str]:
    """What the operator does next with a run that waits for a decision."""
    if run.state is RunState.DEAD_LETTERED and run.reason in REDRIVABLE_REASONS:
        return [
            "fix the cause of the error above, then requeue the run; it resumes from its journal:",
            f"  leaseward redrive {shlex.quote(run.id)}{_store_flag(store)}",
        ]
    if run.state is not RunState.DEAD_LETTERED or run.reason is not Reason.INTERRUPTED_WRITE:
        return []
    call = interrupted_call(run, steps)
    if call is None:
        return [
            "the journal records the outcome of every call: nothing is left to decide.",
            f"  leaseward redrive {shlex.quote(run.id)}{_store_flag(store)}",
        ]
    command = f"leaseward resolve {shlex.quote(run.id)}"
    flag = _store_flag(store)
    return [
        f"call {call.call_id} of {call.tool} (step {call.seq}) was interrupted: nobody knows "
        "whether it applied.",
        f"Check the outside system (idempotency key {call.idempotency_key}), then record "
        "what happened:",
        f"  {command} --applied --step {call.seq}{flag}",
        f"  {command} --not-applied --step {call.seq}{flag}",
        'with --note "..." to keep why in the journal.',
    ]


def _span(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes = int(seconds) // 60
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def _reaper_will(run: RunInfo, steps: Sequence[StepInfo]) -> str:
    """What the next reaper pass does with this run's expired lease (the reaper's own rule,
    under the default recovery policy)."""
    # The reaper looks at the newest journal row, when it is a tool call's.
    last = steps[-1] if steps and steps[-1].kind is StepKind.TOOL else None
    recovery = decide_recovery(
        mode=run.mode,
        requeues=run.requeues,
        last_effect=None if last is None else last.effect,
        last_status=None if last is None else last.status,
        failure_class=FailureClass.CONNECTION,
        reaped=True,
        audit_failed=False,
        policy=RecoveryPolicy(),
    )
    why = "" if recovery.reason is None else f" ({recovery.reason.value})"
    verb = {
        RecoveryAction.REQUEUE: "requeues",
        RecoveryAction.DEAD_LETTER: "dead-letters",
        RecoveryAction.FAIL: "fails",
    }[recovery.action]
    return f"the next reaper pass {verb} it{why}"


def lease_lines(run: RunInfo, steps: Sequence[StepInfo]) -> list[str]:
    """Who holds a running run's lease and for how long, or that it expired; when a
    requeued run's next attempt is due. Times are the store's, as the reaper sees them."""
    now = run.read_at
    if now is None:
        return []
    if run.state is RunState.RUNNING and run.lease_expires_at is not None:
        left = run.lease_expires_at - now
        if left > 0:
            return [f"lease held by {run.lease_owner}, for {_span(left)} more"]
        return [f"lease expired {_span(-left)} ago; {_reaper_will(run, steps)}"]
    if run.state is RunState.QUEUED and run.requeues and run.available_at is not None:
        retries = f"requeued {count(run.requeues, 'time')}"
        if run.available_at > now:
            return [
                f"{retries}; the next attempt is due in {_span(run.available_at - now)} "
                f"(at {timestamp(run.available_at)})"
            ]
        return [f"{retries}; the next attempt is due now"]
    return []


NOBODY_REAPS = (
    "no live worker reaps expired leases now: start a daemon, or run `leaseward reap --once`"
)


def nobody_reaps(run: RunInfo, workers: Sequence[WorkerInfo]) -> str | None:
    """What to do about a run whose lease expired while no worker is live: every worker
    runs a reaper, so "the next reaper pass" comes only once one does."""
    expired = (
        run.state is RunState.RUNNING
        and run.lease_expires_at is not None
        and run.read_at is not None
        and run.lease_expires_at <= run.read_at
    )
    if not expired or any(worker.live for worker in workers):
        return None
    return NOBODY_REAPS


def _request_lines(request: HumanRequest, run: RunInfo) -> list[str]:
    waiting = request.decision is None and not run.state.terminal
    if request.kind is RequestKind.INPUT:
        asked = f"question: {shortened(json.dumps(request.question, ensure_ascii=False))}"
    elif waiting:
        # Whole, with their digest: what an approval authorises is exactly what is shown.
        arguments = json.dumps(request.arguments, ensure_ascii=False)
        asked = f"arguments: {arguments} (digest {request.arguments_digest[:DIGEST_SHOWN]})"
    else:
        asked = f"arguments: {shortened(json.dumps(request.arguments, ensure_ascii=False))}"
    lines = [
        f"call {request.call_id} of {request.tool} ({request.effect.value}, turn "
        f"{request.seq}): {request.kind.value} requested at {timestamp(request.requested_at)}",
        f"  {asked}",
    ]
    if request.decision is None and run.state.terminal:
        lines.append(f"  never decided: the run is {run.state.value}")
        return lines
    if request.decision is None:
        expiry = (
            "" if request.expires_at is None else f", expires at {timestamp(request.expires_at)}"
        )
        lines.append(f"  waiting{expiry}")
        return lines
    by = "" if request.operator is None else f" by {request.operator}"
    when = "" if request.decided_at is None else f" at {timestamp(request.decided_at)}"
    if request.decision is Decision.EXPIRED and request.expires_at is not None:
        # Decided when a reaper pass or a late decision found it, which can be long after.
        when = f" at {timestamp(request.expires_at)}, noticed{when}"
    why = "" if not request.note else f": {shortened(request.note)}"
    lines.append(f"  {request.decision.value}{by}{when}{why}")
    if request.kind is RequestKind.INPUT:
        lines.append(f"  answer: {shortened(json.dumps(request.value, ensure_ascii=False))}")
    return lines


def _waiting_next_steps(run: RunInfo, requests: Sequence[HumanRequest], store: str) -> list[str]:
    """The commands that decide what a waiting run waits for."""
    pending = [r for r in requests if r.pending]
    if not pending or run.state.terminal:
        return []
    command = shlex.quote(run.id)
    flag = _store_flag(store)
    several = len(pending) > 1
    lines: list[str] = []
    for request in pending:
        call = f" --call {shlex.quote(request.call_id)}" if several else ""
        if request.kind is RequestKind.INPUT:
            lines.append(f"  leaseward reply {command}{call} --input JSON{flag}")
        else:
            # Bound to the arguments shown above: if the run moves on to another
            # request meanwhile, this command is refused instead of approving that one.
            named = f" --call {shlex.quote(request.call_id)}"
            digest = f" --digest {request.arguments_digest[:DIGEST_SHOWN]}"
            lines.append(f"  leaseward approve {command}{named}{digest}{flag}")
            lines.append(f'  leaseward reject {command}{call} --reason "..."{flag}')
    what = "input" if run.state is RunState.WAITING_FOR_INPUT else "approval"
    return [f"the run waits for {what} ({count(len(pending), 'call')}); decide with:", *lines]


def print_timeline(
    run: RunInfo,
    steps: Sequence[StepInfo],
    store: str,
    requests: Sequence[HumanRequest] = (),
) -> None:
    for line in table([RUN_COLUMNS, run_row(run)]):
        print(shown(line))
    if run.idempotency_key is not None:
        print(shown(f"idempotency key: {run.idempotency_key}"))
    print(shown(f"input: {json.dumps(run.input, ensure_ascii=False)}"))
    if run.result is not None:
        print(shown(f"result: {json.dumps(run.result, ensure_ascii=False)}"))
    if run.error:
        print(shown(f"error: {run.error}"))
    if run.failure_class is not None:
        print(shown(f"failure class: {run.failure_class.value}"))
    cancel = cancel_line(run)
    if cancel is not None:
        print(cancel)
    for line in lease_lines(run, steps):
        print(shown(line))
    if steps:
        rows = [
            (
                str(step.seq),
                str(step.epoch),
                "provider" if step.tool is None else step.tool,
                "-" if step.effect is None else step.effect.value,
                step.status.value,
                took(step),
            )
            for step in steps
        ]
        lines = table([_STEP_COLUMNS, *rows])
        # Details go under the STEP column.
        indent = " " * lines[0].index("STEP")
        print()
        print(shown(lines[0]))
        for step, line in zip(steps, lines[1:], strict=True):
            print(shown(line))
            for detail in step_details(step):
                print(shown(f"{indent}{detail}"))
        total = total_usage(steps)
        if total is not None:
            usage, turns = total
            print()
            print(shown(f"tokens: {tokens(usage)} in total, over {count(turns, 'provider turn')}"))
    if requests:
        print()
        for request in requests:
            for line in _request_lines(request, run):
                print(shown(line))
    next_steps = _next_steps(run, steps, store) + _waiting_next_steps(run, requests, store)
    if next_steps:
        print()
        for line in next_steps:
            print(shown(line))
