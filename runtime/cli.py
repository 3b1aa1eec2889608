"""The ``leaseward`` command: the daemon and the operator's tools.

Every configuration flag (the store, the daemon's settings, who operates) has a
``LEASEWARD_*`` environment variable, shown in ``--help``. Flags that say what
one invocation does (``--input``, ``--wait``, ``--json``, filters) have none: a
variable left in the environment must not silently change a one-off command.
Mistakes print one line on stderr and exit 2; failures exit 1; neither changes
anything.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import anyio

from leaseward.actors.reaper import LeaseReaper
from leaseward.runtime.app import (
    CONCURRENCY,
    DRAIN_SECONDS,
    LEASE_SECONDS,
    POLL_INTERVAL_SECONDS,
    REAP_INTERVAL_SECONDS,
    default_worker_id,
)
from leaseward.runtime.client import Client, default_operator, open_existing_store
from leaseward.runtime.conversation import usage_from_json
from leaseward.runtime.daemon import DaemonSettings, load_app, serve
from leaseward.runtime.errors import (
    ConfigurationError,
    IllegalTransition,
    InvalidInput,
    LeasewardError,
    RunNotFound,
    StoreError,
    UnknownAgent,
)
from leaseward.runtime.failures import FailureClass
from leaseward.runtime.lifecycle import (
    Reason,
    RecoveryAction,
    RecoveryPolicy,
    RunState,
    StepKind,
    StepStatus,
    decide_recovery,
)
from leaseward.runtime.logs import LOG_FORMATS, LOG_LEVELS, configure_logging, default_log_format
from leaseward.runtime.model import (
    MAX_INPUT_BYTES,
    HumanRequest,
    RequestKind,
    RunInfo,
    StepInfo,
    Usage,
    WorkerInfo,
)
from leaseward.runtime.version import VERSION
from leaseward.storage.connect import open_store
from leaseward.storage.url import store_location

__all__ = ["DEFAULT_STORE_URL", "EXIT_FAILURE", "EXIT_USAGE", "main"]

DEFAULT_STORE_URL = "sqlite:///leaseward.db"
EXIT_FAILURE = 1
EXIT_USAGE = 2

USAGE_ERRORS = (ConfigurationError, InvalidInput, UnknownAgent)
_SHOWN_CHARS = 80
"""How much of a step's arguments ``show`` prints."""


class UsageError(Exception):
    """A mistake in how the command was called."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block: the full usage is one --help away.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class _EnvFlag:
    """Adds flags whose default comes from an environment variable, named in the help;
    with ``env=False``, a flag that has none (one that says what this invocation does).

    Only the command being run reads its variables (``use_env``), so a variable
    meant for the daemon cannot break ``leaseward runs``.
    """

    def __init__(self, parser: argparse.ArgumentParser, *, use_env: bool) -> None:
        self.parser = parser
        self._use_env = use_env

    def add(
        self,
        flag: str,
        *,
        help: str,
        default: Any = None,
        kind: Callable[[str], Any] = str,
        switch: bool = False,
        env: bool = True,
        **kwargs: Any,
    ) -> None:
        if not env:
            if switch:
                self.parser.add_argument(flag, action="store_true", help=help, **kwargs)
                return
            shown = "" if default is None else f" [default: {default}]"
            self.parser.add_argument(
                flag, type=kind, default=default, help=f"{help}{shown}", **kwargs
            )
            return
        variable = "LEASEWARD_" + flag.lstrip("-").upper().replace("-", "_")
        raw = os.environ.get(variable) if self._use_env else None
        if switch:
            value = default if raw is None else _parse_switch(variable, raw)
            self.parser.add_argument(
                flag,
                action="store_true",
                default=value,
                help=f"{help} [env: {variable}]",
                **kwargs,
            )
            return
        shown = "" if default is None else f"; default: {default}"
        # A string default goes through ``type`` only when the flag is not given,
        # so the command line wins over the variable, and a bad variable for a
        # flag given on the command line is never read.
        self.parser.add_argument(
            flag,
            type=kind if raw is None else _from_env(variable, raw, kind),
            default=default if raw is None else raw,
            help=f"{help} [env: {variable}{shown}]",
            **kwargs,
        )


def _parse_switch(variable: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("", "0", "false", "no", "off"):
        return False
    raise UsageError(f"{variable}={raw!r} is not a boolean (use 1/0, true/false)")


def _from_env(variable: str, raw: str, kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """``kind``, naming the variable when it is the variable's value that is wrong."""

    def convert(text: str) -> Any:
        try:
            return kind(text)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            if text == raw:
                raise argparse.ArgumentTypeError(f"{variable}={raw!r}: {exc}") from None
            raise

    return convert


def _number(
    convert: Callable[[str], float], noun: str, accept: Callable[[float], bool], requirement: str
) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text, then refuse what ``accept`` does not."""

    def parse(text: str) -> float:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"{text!r} {requirement}")
        return value

    return parse


_positive_int = _number(int, "a whole number", lambda v: v >= 1, "must be at least 1")
_positive_float = _number(float, "a number", lambda v: v > 0, "must be greater than 0")
_non_negative_float = _number(float, "a number", lambda v: v >= 0, "must be 0 or more")
_port = _number(int, "a port number", lambda v: 0 <= v <= 65535, "is not a port number")


def _state(text: str) -> RunState:
    try:
        return RunState(text)
    except ValueError:
        known = ", ".join(s.value for s in RunState)
        raise argparse.ArgumentTypeError(f"{text!r} is not a run state ({known})") from None


def _reason(text: str) -> Reason:
    try:
        return Reason(text)
    except ValueError:
        known = ", ".join(r.value for r in Reason)
        raise argparse.ArgumentTypeError(f"{text!r} is not a reason ({known})") from None


def _log_format(text: str) -> str:
    if text not in LOG_FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(LOG_FORMATS)}")
    return text


def _log_level(text: str) -> int:
    try:
        return LOG_LEVELS[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not one of {', '.join(LOG_LEVELS)}"
        ) from None


_DURATION = re.compile(r"(\d+)([dhms])")
_DURATION_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def _duration(text: str) -> timedelta:
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: use a whole number and a unit, e.g. 30d, 12h, 45m, 90s"
        )
    try:
        value = timedelta(**{_DURATION_UNITS[match[2]]: int(match[1])})
    except OverflowError:
        raise argparse.ArgumentTypeError(f"{text!r} is too long a duration") from None
    if not value:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    return value


def _finished_state(text: str) -> RunState:
    state = _state(text)
    if not state.terminal:
        known = ", ".join(s.value for s in RunState if s.terminal)
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a finished state: only finished runs are purged ({known})"
        )
    return state


def build_parser(command_name: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="leaseward",
        description="A durable runtime for LLM agent runs: daemon and operator tools.",
        epilog="Configuration flags can also be set by the environment variable named "
        "in each command's --help ([env: LEASEWARD_...]); flags without one, such as "
        "--input, --wait and --json, are given on the command line only.",
    )
    parser.add_argument("--version", action="version", version=f"leaseward {VERSION}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    def command(name: str, help: str) -> _EnvFlag:
        sub = commands.add_parser(name, help=help, description=help)
        flags = _EnvFlag(sub, use_env=name == command_name)
        flags.add("--store", help="store URL, e.g. sqlite:///runs.db", default=DEFAULT_STORE_URL)
        return flags

    daemon = command("daemon", "run the worker: claim, execute and reap runs until signalled")
    daemon.add("--app", help="the App to serve, as module:attribute", default=None)
    daemon.add(
        "--concurrency", help="runs executed at once", default=CONCURRENCY, kind=_positive_int
    )
    daemon.add("--lease-seconds", help="lease length", default=LEASE_SECONDS, kind=_positive_float)
    daemon.add(
        "--reap-interval-seconds",
        help="time between reaper passes",
        default=REAP_INTERVAL_SECONDS,
        kind=_positive_float,
    )
    daemon.add(
        "--poll-interval-seconds",
        help="time between claim polls when idle",
        default=POLL_INTERVAL_SECONDS,
        kind=_positive_float,
    )
    daemon.add("--worker-id", help="this worker's name in leases", default=default_worker_id())
    daemon.add(
        "--drain-seconds",
        help="on SIGTERM/SIGINT, time runs get to reach a step boundary "
        "(a write call in flight always finishes, within its own timeout)",
        default=DRAIN_SECONDS,
        kind=_non_negative_float,
    )
    daemon.add(
        "--metrics-port", help="serve Prometheus metrics on this port (off if unset)", kind=_port
    )
    daemon.add("--metrics-host", help="address the metrics server binds", default="127.0.0.1")
    daemon.add(
        "--log-format",
        help="json or console (console when stderr is a terminal)",
        default=default_log_format(),
        kind=_log_format,
    )
    daemon.add(
        "--log-level",
        help="leaseward's log level: " + ", ".join(LOG_LEVELS) + " (others log info and above)",
        default="info",
        kind=_log_level,
    )

    submit = command("submit", "queue a run and print its id")
    submit.parser.add_argument("agent", metavar="AGENT", help="the agent to run")
    submit.add(
        "--input",
        help="the run input: JSON text (a string is written in quotes: '\"hello\"'), "
        "or @file holding JSON",
        default="null",
        env=False,
    )
    submit.add(
        "--idempotency-key",
        help="submit once however often retried: a key already used for the same agent "
        "and input prints that run's id and queues nothing; for other ones it is refused",
        env=False,
    )
    submit.add("--wait", help="wait for the run to finish and print it", switch=True, env=False)
    submit.add(
        "--timeout",
        help="with --wait, give up after this many seconds",
        kind=_positive_float,
        env=False,
    )
    submit.add("--json", help="print JSON", switch=True, env=False)

    runs = command("runs", "list runs, newest first")
    runs.add("--state", help="only runs in this state", kind=_state, env=False)
    runs.add("--agent", help="only runs of this agent", env=False)
    runs.add("--limit", help="at most this many", default=50, kind=_positive_int, env=False)
    runs.add("--json", help="print JSON", switch=True, env=False)

    show = command("show", "show a run and its journal as a timeline")
    show.parser.add_argument("run", metavar="RUN", help="run id")
    show.add("--json", help="print JSON", switch=True, env=False)

    cancel = command("cancel", "cancel a run (at its next step boundary if it is running)")
    cancel.parser.add_argument("run", metavar="RUN", help="run id")

    dead = command("dead-letters", "list dead-lettered runs")
    dead.add("--reason", help="only this reason", kind=_reason, env=False)
    dead.add("--limit", help="at most this many", default=50, kind=_positive_int, env=False)
    dead.add("--json", help="print JSON", switch=True, env=False)

    redrive = command(
        "redrive", "requeue a dead-lettered run that needs no verdict, under a new epoch"
    )
    redrive.parser.add_argument("run", metavar="RUN", help="run id")

    resolve = command("resolve", "record whether an interrupted write applied, and resume its run")
    resolve.parser.add_argument("run", metavar="RUN", help="run id")
    verdict = resolve.parser.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--applied", action="store_true", help="the call took effect")
    verdict.add_argument("--not-applied", action="store_true", help="the call had no effect")
    resolve.add("--note", help="why you decided so (kept in the journal)", env=False)
    resolve.add("--operator", help="who decides (kept in the journal)", default=None)

    approvals = command("approvals", "list the calls that wait for a person, oldest first")
    approvals.add("--limit", help="at most this many", default=50, kind=_positive_int, env=False)
    approvals.add("--json", help="print JSON", switch=True, env=False)

    approve = command("approve", "approve a call that waits for approval; its run resumes")
    approve.parser.add_argument("run", metavar="RUN", help="run id")
    approve.add("--call", help="the call's id (needed when the run waits for several)", env=False)
    approve.add("--note", help="why you approve (kept in the journal)", env=False)
    approve.add("--operator", help="who decides (kept in the journal)", default=None)

    reject = command("reject", "reject a call that waits for approval; it never executes")
    reject.parser.add_argument("run", metavar="RUN", help="run id")
    reject.add("--call", help="the call's id (needed when the run waits for several)", env=False)
    reject.add(
        "--reason",
        help="why (kept in the journal, and the model is told)",
        env=False,
        required=True,
    )
    reject.add("--operator", help="who decides (kept in the journal)", default=None)

    reply = command("reply", "answer a run that waits for input (ask_human); it resumes")
    reply.parser.add_argument("run", metavar="RUN", help="run id")
    reply.add(
        "--input",
        help="the answer: JSON text (a string is written in quotes: '\"blue\"'), or @file",
        env=False,
        required=True,
    )
    reply.add("--call", help="the call's id (needed when the run asks several)", env=False)
    reply.add("--operator", help="who answers (kept in the journal)", default=None)

    reap = command("reap", "settle runs whose lease expired, and expired approvals, once")
    reap.parser.add_argument(
        "--once",
        action="store_true",
        required=True,
        help=(
            "one reaper pass: it watches the running leases for as long as they were "
            "granted, then reaps those not renewed meanwhile (the daemon reaps continuously)"
        ),
    )

    command("migrate", "create the schema or bring it to the newest version")

    workers = command("workers", "list the workers serving this store, live and gone")
    workers.add("--json", help="print JSON", switch=True, env=False)

    purge = command(
        "purge",
        "delete finished runs and their journals, in short batches (their idempotency "
        "keys are kept); forget old keys",
    )
    purge.add(
        "--finished-before",
        help="delete runs that finished longer ago than this, e.g. 30d, 12h, 45m, 90s",
        kind=_duration,
        env=False,
    )
    purge.add("--state", help="only runs in this finished state", kind=_finished_state, env=False)
    purge.add(
        "--include-dead-letters",
        help="delete dead-lettered runs too (kept otherwise: they wait for an operator)",
        switch=True,
        env=False,
    )
    purge.add(
        "--forget-keys-older-than",
        help="forget the idempotency keys of purged runs first used longer ago than this "
        "(e.g. 90d): a submit with one of them then creates a new run",
        kind=_duration,
        env=False,
    )
    purge.add(
        "--dry-run",
        help="count what would be deleted or forgotten; change nothing",
        switch=True,
        env=False,
    )
    return parser


# -- output ---------------------------------------------------------------------------


def _run_json(run: RunInfo) -> dict[str, Any]:
    return {
        "id": run.id,
        "agent": run.agent,
        "mode": run.mode.value,
        "state": run.state.value,
        "reason": None if run.reason is None else run.reason.value,
        "failure_class": None if run.failure_class is None else run.failure_class.value,
        "result": run.result,
        "error": run.error,
        "epoch": run.epoch,
        "requeues": run.requeues,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "idempotency_key": run.idempotency_key,
    }


def _step_json(step: StepInfo) -> dict[str, Any]:
    return {
        "seq": step.seq,
        "epoch": step.epoch,
        "kind": step.kind.value,
        "tool": step.tool,
        "call_id": step.call_id,
        "effect": None if step.effect is None else step.effect.value,
        "status": step.status.value,
        "idempotency_key": step.idempotency_key,
        "arguments": step.arguments,
        "output": step.output,
        "error": step.error,
        "started_at": step.started_at,
        "finished_at": step.finished_at,
        "resolved_by": step.resolved_by,
        "resolved_at": step.resolved_at,
    }


def _request_json(request: HumanRequest) -> dict[str, Any]:
    return {
        "run_id": request.run_id,
        "agent": request.agent,
        "call_id": request.call_id,
        "kind": request.kind.value,
        "tool": request.tool,
        "effect": request.effect.value,
        "arguments": request.arguments,
        "arguments_digest": request.arguments_digest,
        "turn_seq": request.seq,
        "requested_at": request.requested_at,
        "expires_at": request.expires_at,
        "age_seconds": request.age_seconds,
        "decision": None if request.decision is None else request.decision.value,
        "operator": request.operator,
        "note": request.note,
        "value": request.value,
        "decided_at": request.decided_at,
    }


def _usage(steps: Sequence[StepInfo]) -> tuple[Usage, int] | None:
    """The tokens of every provider turn that recorded its usage, and how many did."""
    found = [
        usage
        for step in steps
        if step.kind is StepKind.PROVIDER and (usage := usage_from_json(step.output)) is not None
    ]
    return (sum(found, Usage()), len(found)) if found else None


def _usage_json(steps: Sequence[StepInfo]) -> dict[str, int] | None:
    total = _usage(steps)
    if total is None:
        return None
    usage, turns = total
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "provider_turns": turns,
    }


def _tokens(usage: Usage) -> str:
    return f"{usage.input_tokens:,} in, {usage.output_tokens:,} out"


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _timestamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _shortened(text: str, limit: int = _SHOWN_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as columns two spaces apart, each as wide as its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


_RUN_COLUMNS = ("RUN", "STATE", "REASON", "MODE", "AGENT", "EPOCH", "REQUEUES", "CREATED")


def _run_row(run: RunInfo) -> tuple[str, ...]:
    return (
        run.id,
        run.state.value,
        "-" if run.reason is None else run.reason.value,
        run.mode.value,
        run.agent,
        str(run.epoch),
        str(run.requeues),
        _timestamp(run.created_at),
    )


def _print_runs(
    runs: Sequence[RunInfo], *, as_json: bool, unserved: frozenset[str] = frozenset()
) -> None:
    if as_json:
        _print_json([_run_json(r) for r in runs])
        return
    if not runs:
        print("no runs")
        return
    header, *lines = _table([_RUN_COLUMNS, *(_run_row(r) for r in runs)])
    print(header)
    for run, line in zip(runs, lines, strict=True):
        note = f"  no live worker serves {run.agent}" if run.agent in unserved else ""
        print(line + note)


_STEP_COLUMNS = ("SEQ", "EPOCH", "STEP", "EFFECT", "STATUS", "TOOK")


def _took(step: StepInfo) -> str:
    if step.resolved_at is not None:
        # finished_at is when the operator decided, maybe hours later: how long the
        # call itself took is unknown.
        return "unknown"
    if step.finished_at is None:
        return "open"
    seconds = step.finished_at - step.started_at
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _step_details(step: StepInfo) -> list[str]:
    details: list[str] = []
    usage = usage_from_json(step.output) if step.kind is StepKind.PROVIDER else None
    if usage is not None:
        model = step.output.get("model")
        details.append(f"tokens: {_tokens(usage)}" + (f" ({model})" if model else ""))
    if step.tool is not None and step.arguments is not None:
        arguments = json.dumps(step.arguments, ensure_ascii=False)
        details.append(f"arguments: {_shortened(arguments)}")
    if step.resolved_by is not None:
        output = step.output if isinstance(step.output, dict) else {}
        verdict = str(output.get("resolution", "resolved")).replace("_", " ")
        note = output.get("note")
        when = "" if step.resolved_at is None else f" at {_timestamp(step.resolved_at)}"
        details.append(
            f"resolved: {verdict}, by {step.resolved_by}{when}"
            + (f": {_shortened(str(note))}" if note else "")
        )
    elif step.error:
        details.append(f"error: {step.error}")
    return details


def _store_flag(store: str) -> str:
    """``--store URL`` when a command without it would open another store, else nothing."""
    implied = os.environ.get("LEASEWARD_STORE") or DEFAULT_STORE_URL
    return "" if store == implied else f" --store {shlex.quote(store)}"


def _next_steps(run: RunInfo, steps: Sequence[StepInfo], store: str) -> list[str]:
    """What the operator does next with a run that waits for a decision."""
    if run.state is not RunState.DEAD_LETTERED or run.reason is not Reason.INTERRUPTED_WRITE:
        return []
    # By status: an intent whose call raised or timed out has ended, yet stays open.
    open_calls = [s for s in steps if s.status is StepStatus.STARTED and s.tool is not None]
    if not open_calls:
        return [
            "the journal records the outcome of every call: nothing is left to decide.",
            f"  leaseward redrive {shlex.quote(run.id)}{_store_flag(store)}",
        ]
    call = open_calls[-1]
    command = f"leaseward resolve {shlex.quote(run.id)}"
    flag = _store_flag(store)
    return [
        f"call {call.call_id} of {call.tool} (step {call.seq}) was interrupted: nobody knows "
        "whether it applied.",
        f"Check the outside system (idempotency key {call.idempotency_key}), then record "
        "what happened:",
        f"  {command} --applied{flag}",
        f"  {command} --not-applied{flag}",
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


def _lease_lines(run: RunInfo, steps: Sequence[StepInfo]) -> list[str]:
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
        retries = f"requeued {_count(run.requeues, 'time')}"
        if run.available_at > now:
            return [
                f"{retries}; the next attempt is due in {_span(run.available_at - now)} "
                f"(at {_timestamp(run.available_at)})"
            ]
        return [f"{retries}; the next attempt is due now"]
    return []


def _request_lines(request: HumanRequest, run: RunInfo) -> list[str]:
    asked = (
        f"question: {_shortened(json.dumps(request.question, ensure_ascii=False))}"
        if request.kind is RequestKind.INPUT
        else f"arguments: {_shortened(json.dumps(request.arguments, ensure_ascii=False))}"
    )
    lines = [
        f"call {request.call_id} of {request.tool} ({request.effect.value}, turn "
        f"{request.seq}): {request.kind.value} requested at {_timestamp(request.requested_at)}",
        f"  {asked}",
    ]
    if request.decision is None and run.state.terminal:
        lines.append(f"  never decided: the run is {run.state.value}")
        return lines
    if request.decision is None:
        expiry = (
            "" if request.expires_at is None else f", expires at {_timestamp(request.expires_at)}"
        )
        lines.append(f"  waiting{expiry}")
        return lines
    by = "" if request.operator is None else f" by {request.operator}"
    when = "" if request.decided_at is None else f" at {_timestamp(request.decided_at)}"
    why = "" if not request.note else f": {_shortened(request.note)}"
    lines.append(f"  {request.decision.value}{by}{when}{why}")
    if request.kind is RequestKind.INPUT:
        lines.append(f"  answer: {_shortened(json.dumps(request.value, ensure_ascii=False))}")
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
            lines.append(f"  leaseward approve {command}{call}{flag}")
            lines.append(f'  leaseward reject {command}{call} --reason "..."{flag}')
    what = "input" if run.state is RunState.WAITING_FOR_INPUT else "approval"
    return [f"the run waits for {what} ({_count(len(pending), 'call')}); decide with:", *lines]


def _print_timeline(
    run: RunInfo,
    steps: Sequence[StepInfo],
    store: str,
    requests: Sequence[HumanRequest] = (),
) -> None:
    for line in _table([_RUN_COLUMNS, _run_row(run)]):
        print(line)
    if run.idempotency_key is not None:
        print(f"idempotency key: {run.idempotency_key}")
    if run.result is not None:
        print(f"result: {json.dumps(run.result, ensure_ascii=False)}")
    if run.error:
        print(f"error: {run.error}")
    if run.failure_class is not None:
        print(f"failure class: {run.failure_class.value}")
    for line in _lease_lines(run, steps):
        print(line)
    if steps:
        rows = [
            (
                str(step.seq),
                str(step.epoch),
                "provider" if step.tool is None else step.tool,
                "-" if step.effect is None else step.effect.value,
                step.status.value,
                _took(step),
            )
            for step in steps
        ]
        lines = _table([_STEP_COLUMNS, *rows])
        # Details go under the STEP column.
        indent = " " * lines[0].index("STEP")
        print()
        print(lines[0])
        for step, line in zip(steps, lines[1:], strict=True):
            print(line)
            for detail in _step_details(step):
                print(f"{indent}{detail}")
        total = _usage(steps)
        if total is not None:
            usage, turns = total
            print()
            print(f"tokens: {_tokens(usage)} in total, over {_count(turns, 'provider turn')}")
    if requests:
        print()
        for request in requests:
            for line in _request_lines(request, run):
                print(line)
    next_steps = _next_steps(run, steps, store) + _waiting_next_steps(run, requests, store)
    if next_steps:
        print()
        for line in next_steps:
            print(line)


# -- commands -------------------------------------------------------------------------


def _read_input(text: str) -> Any:
    if text.startswith("@"):
        return _read_input_file(Path(text[1:]))
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        hint = ""
        first = text.strip()[:1]
        if not first or first not in '{["-0123456789':
            # A bare word is the usual slip: the shell ate the quotes of a JSON string.
            quoted = shlex.quote(json.dumps(text, ensure_ascii=False))
            hint = f"; a JSON string is written in quotes: --input {quoted}"
        raise UsageError(f"--input is not JSON: {exc}{hint}") from None


def _read_input_file(path: Path) -> Any:
    # At most one byte over the limit is read: a huge file is refused without
    # holding it in memory (the canonical JSON of the input is held to the same limit).
    try:
        with path.open("rb") as file:
            data = file.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--input @{path}: {exc.strerror or exc}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(
            f"--input @{path} is larger than the input limit ({MAX_INPUT_BYTES} bytes)"
        )
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(f"--input @{path} is not UTF-8 text: {exc.reason}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--input @{path} is not JSON: {exc}") from None


ClientCommand = Callable[[Client, argparse.Namespace], Awaitable[int]]


def _client_command(
    body: ClientCommand, *, read_only: bool = False
) -> Callable[[argparse.Namespace], Awaitable[int]]:
    """A command on an existing store: a mistyped path must not create a database."""

    async def command(args: argparse.Namespace) -> int:
        store = await open_existing_store(args.store, read_only=read_only)
        try:
            return await body(Client(store), args)
        finally:
            with anyio.CancelScope(shield=True):
                await store.aclose()

    return command


def _read_only_command(body: ClientCommand) -> Callable[[argparse.Namespace], Awaitable[int]]:
    """A command that only looks: it works on a store this user may only read, and
    never migrates one."""
    return _client_command(body, read_only=True)


@_client_command
async def _submit(client: Client, args: argparse.Namespace) -> int:
    value = _read_input(args.input)
    run_id = await _submit_served(client, args, value)
    if not args.wait:
        print(json.dumps({"id": run_id}) if args.json else run_id)
        return 0
    run = await client.wait(run_id, timeout=args.timeout)
    if args.json:
        _print_json(_run_json(run))
    else:
        _print_runs([run], as_json=False)
    return 0 if run.state is RunState.COMPLETED else EXIT_FAILURE


@_read_only_command
async def _runs(client: Client, args: argparse.Namespace) -> int:
    runs = await client.runs(state=args.state, agent=args.agent, limit=args.limit)
    _print_runs(runs, as_json=args.json, unserved=await _unserved(client, runs))
    return 0


@_read_only_command
async def _show(client: Client, args: argparse.Namespace) -> int:
    run = await client.get(args.run)
    steps = await client.steps(args.run)
    requests = await client.requests(args.run)
    if args.json:
        _print_json(
            {
                **_run_json(run),
                "usage": _usage_json(steps),
                "steps": [_step_json(s) for s in steps],
                "requests": [_request_json(r) for r in requests],
            }
        )
    else:
        _print_timeline(run, steps, args.store, requests)
        if run.agent in await _unserved(client, [run]):
            print(f"note: no live worker serves {run.agent}; the run waits until one does")
    return 0


@_client_command
async def _cancel(client: Client, args: argparse.Namespace) -> int:
    cancelled = await client.cancel(args.run)
    run = await client.get(args.run)
    if not cancelled:
        print(
            f"leaseward: run {args.run} had already finished ({run.state.value})", file=sys.stderr
        )
        return EXIT_FAILURE
    if run.state is RunState.CANCELLED:
        print(f"run {args.run} cancelled")
    else:
        print(f"run {args.run}: cancel requested; it stops at its next step boundary")
    return 0


@_read_only_command
async def _dead_letters(client: Client, args: argparse.Namespace) -> int:
    runs = await client.dead_letters(reason=args.reason, limit=args.limit)
    _print_runs(runs, as_json=args.json)
    return 0


@_client_command
async def _redrive(client: Client, args: argparse.Namespace) -> int:
    run = await client.redrive(args.run)
    print(f"run {run.id} requeued: {_next_attempt(run)}")
    return 0


def _next_attempt(run: RunInfo) -> str:
    # The operator's action opened an epoch of its own (G9); the claim that resumes the
    # run opens the next one, which its new steps carry and show then reports.
    return f"it resumes from its journal at epoch {run.epoch + 1}"


@_client_command
async def _resolve(client: Client, args: argparse.Namespace) -> int:
    run = await client.resolve(
        args.run,
        applied=bool(args.applied),
        operator=args.operator or default_operator(),
        note=args.note,
    )
    verdict = "applied" if args.applied else "not applied"
    print(f"run {run.id}: call recorded as {verdict}; requeued: {_next_attempt(run)}")
    return 0


_APPROVAL_COLUMNS = ("RUN", "CALL", "AGENT", "TOOL", "EFFECT", "WAITS FOR", "AGE", "ARGUMENTS")


@_read_only_command
async def _approvals(client: Client, args: argparse.Namespace) -> int:
    requests = await client.approvals(limit=args.limit)
    if args.json:
        _print_json([_request_json(r) for r in requests])
        return 0
    if not requests:
        print("nothing waits for a person")
        return 0
    rows = [
        (
            r.run_id,
            r.call_id,
            r.agent,
            r.tool,
            r.effect.value,
            r.kind.value,
            _age(r.age_seconds),
            _shortened(json.dumps(r.arguments, ensure_ascii=False), 60),
        )
        for r in requests
    ]
    for line in _table([_APPROVAL_COLUMNS, *rows]):
        print(line)
    return 0


def _decided(run: RunInfo, what: str) -> str:
    if run.state is RunState.QUEUED:
        return f"run {run.id}: {what}; every call is decided, requeued"
    return f"run {run.id}: {what}; it still waits for other calls ({run.state.value})"


@_client_command
async def _approve(client: Client, args: argparse.Namespace) -> int:
    run = await client.approve(
        args.run, args.call, operator=args.operator or default_operator(), note=args.note
    )
    print(_decided(run, "approved"))
    return 0


@_client_command
async def _reject(client: Client, args: argparse.Namespace) -> int:
    run = await client.reject(
        args.run, args.call, operator=args.operator or default_operator(), reason=args.reason
    )
    print(_decided(run, "rejected"))
    return 0


@_client_command
async def _reply(client: Client, args: argparse.Namespace) -> int:
    value = _read_input(args.input)
    run = await client.send_input(
        args.run, value, call_id=args.call, operator=args.operator or default_operator()
    )
    print(_decided(run, "answered"))
    return 0


async def _reap(args: argparse.Namespace) -> int:
    store = await open_existing_store(args.store)
    try:
        reaper = LeaseReaper(store, interval_seconds=1.0, policy=RecoveryPolicy())
        reaped = await reaper.reap_watching()
        expired = await reaper.expire_once()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()
    for request in expired:
        then = "requeued" if request.requeued else "still waits for other calls"
        print(f"run {request.run_id}: approval of call {request.call_id} expired; {then}")
    if not reaped:
        print("no expired leases")
    for item in reaped:
        settled = item.settlement
        why = "" if settled.reason is None else f" ({settled.reason.value})"
        print(f"run {item.run_id} epoch {item.epoch}: lease expired -> {settled.target.value}{why}")
    return 0


async def _migrate(args: argparse.Namespace) -> int:
    store = await open_store(args.store, migrate=False)
    try:
        created = not await store.schema_present()
        version = await store.migrate()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()
    if created:
        print(f"created a leaseward store at {store_location(args.store)}")
    print(f"schema at version {version}")
    return 0


async def _daemon(args: argparse.Namespace) -> int:
    if not args.app:
        raise UsageError("--app is required (or LEASEWARD_APP), e.g. --app myproject.agents:app")
    if args.reap_interval_seconds >= args.lease_seconds:
        raise UsageError(
            f"--reap-interval-seconds ({args.reap_interval_seconds:g}) must be shorter than "
            f"--lease-seconds ({args.lease_seconds:g}): a dead worker's runs wait up to the "
            "lease plus the reap interval to be recovered"
        )
    app = load_app(args.app)
    settings = DaemonSettings(
        store_url=args.store,
        concurrency=args.concurrency,
        lease_seconds=args.lease_seconds,
        reap_interval_seconds=args.reap_interval_seconds,
        poll_interval_seconds=args.poll_interval_seconds,
        worker_id=args.worker_id,
        drain_seconds=args.drain_seconds,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        log_format=args.log_format,
        log_level=args.log_level,
    )
    return await serve(settings, app)


# -- workers, and runs nobody serves ----------------------------------------------------


async def _unserved(client: Client, runs: Sequence[RunInfo]) -> frozenset[str]:
    """The agents of these queued runs that no live worker serves."""
    queued = {run.agent for run in runs if run.state is RunState.QUEUED}
    if not queued:
        return frozenset()
    return frozenset(queued - await client.served_agents())


def _serving(served: frozenset[str]) -> str:
    return f"live workers serve {', '.join(sorted(served))}" if served else "no worker is live"


async def _submit_served(client: Client, args: argparse.Namespace, value: Any) -> str:
    """Submit, saying so when no live worker serves the agent.

    The run is queued all the same (its workers may be restarting), except under
    --wait without --timeout: that wait could never end, and a command that fails
    changes nothing, so a script that retries it cannot queue the run twice.
    """
    served = await client.served_agents()
    if args.agent in served:
        return await client.submit(args.agent, value, idempotency_key=args.idempotency_key)
    if args.wait and args.timeout is None:
        raise UsageError(
            f"no live worker serves agent {args.agent!r} ({_serving(served)}), so --wait "
            "would never return; nothing was queued (add --timeout, or drop --wait)"
        )
    run_id = await client.submit(args.agent, value, idempotency_key=args.idempotency_key)
    print(
        f"leaseward: warning: no live worker serves agent {args.agent!r} ({_serving(served)}); "
        f"run {run_id} stays queued until one does",
        file=sys.stderr,
    )
    return run_id


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s ago"
    minutes = int(seconds) // 60
    if minutes >= 24 * 60:
        return f"{minutes // (24 * 60)}d{minutes // 60 % 24}h ago"
    if minutes >= 60:
        return f"{minutes // 60}h{minutes % 60}m ago"
    return f"{minutes}m{int(seconds) % 60}s ago"


def _worker_json(worker: WorkerInfo) -> dict[str, Any]:
    return {
        "id": worker.id,
        "host": worker.host,
        "pid": worker.pid,
        "agents": list(worker.agents),
        "started_at": worker.started_at,
        "heartbeat_at": worker.heartbeat_at,
        "heartbeat_age_seconds": worker.heartbeat_age_seconds,
        "stale_after_seconds": worker.stale_after_seconds,
        "live": worker.live,
    }


_WORKER_COLUMNS = ("WORKER", "HOST", "PID", "AGENTS", "STARTED", "HEARTBEAT", "STATUS")


@_read_only_command
async def _workers(client: Client, args: argparse.Namespace) -> int:
    workers = await client.workers()
    if args.json:
        _print_json([_worker_json(w) for w in workers])
        return 0
    if not workers:
        print("no workers")
        return 0
    rows = [
        (
            w.id,
            w.host,
            str(w.pid),
            ",".join(w.agents) or "-",
            _timestamp(w.started_at),
            _age(w.heartbeat_age_seconds),
            "live" if w.live else "gone",
        )
        for w in workers
    ]
    for line in _table([_WORKER_COLUMNS, *rows]):
        print(line)
    return 0


# -- retention --------------------------------------------------------------------------


def _count(number: int, noun: str, plural: str | None = None) -> str:
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


@_client_command
async def _purge(client: Client, args: argparse.Namespace) -> int:
    if args.finished_before is None and args.forget_keys_older_than is None:
        raise UsageError("purge needs --finished-before, --forget-keys-older-than, or both")
    if args.finished_before is None and (args.state or args.include_dead_letters):
        raise UsageError("--state and --include-dead-letters need --finished-before")
    if args.state is RunState.DEAD_LETTERED and not args.include_dead_letters:
        raise UsageError(
            "dead-lettered runs wait for an operator: purging them needs --include-dead-letters"
        )
    if args.finished_before is not None:
        await _purge_runs(client, args)
    if args.forget_keys_older_than is not None:
        await _forget_keys(client, args)
    return 0


async def _purge_runs(client: Client, args: argparse.Namespace) -> None:
    result = await client.purge(
        finished_before=args.finished_before,
        state=args.state,
        include_dead_letters=args.include_dead_letters,
        dry_run=args.dry_run,
    )
    counts = (
        f"{_count(result.runs, 'run')} ({_count(result.steps, 'journal row')}) finished "
        f"before {_timestamp(result.finished_before)}, "
        f"in {_count(result.batches, 'batch', 'batches')}"
    )
    kept = "" if args.include_dead_letters or args.state else "; dead-lettered runs kept"
    if result.dry_run:
        print(f"would delete {counts}{kept}; nothing changed (dry run)")
    else:
        print(f"deleted {counts}{kept}")


async def _forget_keys(client: Client, args: argparse.Namespace) -> None:
    result = await client.forget_keys(older_than=args.forget_keys_older_than, dry_run=args.dry_run)
    counts = (
        f"{_count(result.keys, 'idempotency key')} of purged runs first used before "
        f"{_timestamp(result.created_before)}, in {_count(result.batches, 'batch', 'batches')}"
    )
    if result.dry_run:
        print(f"would forget {counts}; nothing changed (dry run)")
    else:
        print(f"forgot {counts}")


COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "daemon": _daemon,
    "submit": _submit,
    "runs": _runs,
    "show": _show,
    "cancel": _cancel,
    "dead-letters": _dead_letters,
    "redrive": _redrive,
    "resolve": _resolve,
    "approvals": _approvals,
    "approve": _approve,
    "reject": _reject,
    "reply": _reply,
    "reap": _reap,
    "migrate": _migrate,
    "workers": _workers,
    "purge": _purge,
}


def _single(exc: BaseException) -> BaseException:
    """The one error inside nested exception groups (task groups wrap what they raise)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def main(argv: Sequence[str] | None = None) -> int:
    try:
        arguments = list(sys.argv[1:] if argv is None else argv)
        chosen = next((a for a in arguments if not a.startswith("-")), None)
        args = build_parser(chosen).parse_args(arguments)
        if args.command != "daemon":
            # Operator commands print results on stdout; their logs stay on stderr.
            configure_logging(default_log_format(), level=logging.WARNING)
        try:
            return anyio.run(COMMANDS[args.command], args)
        except BaseExceptionGroup as group:
            raise _single(group) from None
    except UsageError as exc:
        print(f"leaseward: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except USAGE_ERRORS as exc:
        print(f"leaseward: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except (RunNotFound, IllegalTransition, StoreError, LeasewardError) as exc:
        print(f"leaseward: {exc.message}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`leaseward runs | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def entry_point() -> NoReturn:
    sys.exit(main())
