"""The ``leaseward`` command group: each subcommand's flags, and the call to its action.

Configuration flags (the store, the daemon's settings, who operates) are declared
with their ``LEASEWARD_*`` environment variable, shown in ``--help``. Flags that say
what one invocation does (``--input``, ``--wait``, ``--json``, filters) have none: a
variable left in the environment must not silently change a one-off command. click
reads only the variables of the command being run, so one meant for the daemon
cannot break ``leaseward runs``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import anyio
import click
from click.core import ParameterSource

from leaseward.app import (
    CONCURRENCY,
    DRAIN_SECONDS,
    LEASE_SECONDS,
    POLL_INTERVAL_SECONDS,
    REAP_INTERVAL_SECONDS,
    default_worker_id,
)
from leaseward.cli import actions
from leaseward.cli.defaults import DEFAULT_STORE_URL
from leaseward.cli.types import (
    DEAD_LETTER_REASON,
    DURATION,
    FINISHED_STATE,
    LOG_FORMAT,
    LOG_LEVEL,
    NON_NEGATIVE_FLOAT,
    PORT,
    POSITIVE_FLOAT,
    POSITIVE_INT,
    RUN_STATE,
)
from leaseward.console.listen import (
    ALLOWED_HOSTS_VARIABLE,
    CONSOLE_HOST,
    CONSOLE_PORT,
    check_allowed_hosts,
)
from leaseward.daemon import DaemonSettings
from leaseward.runtime.lifecycle import Reason, RunState
from leaseward.runtime.logs import LOG_LEVELS, configure_logging, default_log_format
from leaseward.runtime.version import VERSION

__all__ = ["leaseward"]

Decorated = TypeVar("Decorated", bound=Callable[..., Any])

_EPILOG = (
    "Configuration flags can also be set by the environment variable named in each "
    "command's --help ([env var: LEASEWARD_...]); flags without one, such as --input, "
    "--wait and --json, are given on the command line only."
)


def configuration(
    flag: str, name: str | None = None, *, variable: str | None = None, **settings: Any
) -> Callable[[Decorated], Decorated]:
    """A flag that configures leaseward: ``LEASEWARD_`` and its name set it too, unless
    ``variable`` names the setting it shares with another command."""
    if variable is None:
        variable = "LEASEWARD_" + flag.lstrip("-").upper().replace("-", "_")
    declarations = (flag,) if name is None else (flag, name)
    # A default computed at start says in words what it will be (show_default="..."):
    # click would print it as "(dynamic)".
    settings.setdefault("show_default", True)
    return click.option(*declarations, envvar=variable, show_envvar=True, **settings)


def one_off(
    flag: str, name: str | None = None, **settings: Any
) -> Callable[[Decorated], Decorated]:
    """A flag that says what this one invocation does: the command line only."""
    declarations = (flag,) if name is None else (flag, name)
    return click.option(*declarations, show_default=True, **settings)


def _store(command: Decorated) -> Decorated:
    return configuration(
        "--store", "store_url", default=DEFAULT_STORE_URL, help="store URL, e.g. sqlite:///runs.db"
    )(command)


def _json(command: Decorated) -> Decorated:
    return one_off("--json", "as_json", is_flag=True, help="print JSON")(command)


def _limit(command: Decorated) -> Decorated:
    return one_off("--limit", default=50, type=POSITIVE_INT, help="at most this many")(command)


def _operator(verb: str) -> Callable[[Decorated], Decorated]:
    return configuration(
        "--operator", show_default="your user name", help=f"who {verb} (kept in the journal)"
    )


def _call(asks: str) -> Callable[[Decorated], Decorated]:
    return one_off("--call", help=f"the call's id (needed when the run {asks} several)")


def _run_id(command: Decorated) -> Decorated:
    return click.argument("run_id", metavar="RUN")(command)


def _on_client(
    action: Callable[..., Awaitable[int]], store_url: str, *, read_only: bool = False, **flags: Any
) -> int:
    return anyio.run(lambda: actions.with_client(store_url, action, read_only=read_only, **flags))


@click.group(
    name="leaseward",
    help="A durable runtime for LLM agent runs: daemon and operator tools.",
    epilog=_EPILOG,
    # A bare ``leaseward`` is a mistake like any other: one line, exit 2, not the help.
    no_args_is_help=False,
)
@click.version_option(VERSION, prog_name="leaseward", message="%(prog)s %(version)s")
@click.pass_context
def leaseward(context: click.Context) -> None:
    if context.invoked_subcommand != "daemon":
        # Operator commands print results on stdout; their logs stay on stderr.
        configure_logging(default_log_format(), level=logging.WARNING)


@leaseward.command(help="run the worker: claim, execute and reap runs until signalled")
@_store
@configuration("--app", "app_path", help="the App to serve, as module:attribute")
@configuration(
    "--concurrency", default=CONCURRENCY, type=POSITIVE_INT, help="runs executed at once"
)
@configuration("--lease-seconds", default=LEASE_SECONDS, type=POSITIVE_FLOAT, help="lease length")
@configuration(
    "--reap-interval-seconds",
    default=REAP_INTERVAL_SECONDS,
    type=POSITIVE_FLOAT,
    help="time between reaper passes",
)
@configuration(
    "--poll-interval-seconds",
    default=POLL_INTERVAL_SECONDS,
    type=POSITIVE_FLOAT,
    help="time between claim polls when idle",
)
@configuration(
    "--worker-id",
    default=default_worker_id,
    show_default="host:pid",
    help="this worker's name in leases",
)
@configuration(
    "--drain-seconds",
    default=DRAIN_SECONDS,
    type=NON_NEGATIVE_FLOAT,
    help="on SIGTERM/SIGINT, time runs get to reach a step boundary "
    "(a write call in flight always finishes, within its own timeout)",
)
@configuration(
    "--metrics-port", type=PORT, help="serve Prometheus metrics on this port (off if unset)"
)
@configuration("--metrics-host", default="127.0.0.1", help="address the metrics server binds")
@configuration(
    "--console", "console", is_flag=True, help="serve the operator console beside the worker"
)
@configuration("--console-port", default=CONSOLE_PORT, type=PORT, help="the console's port")
@configuration(
    "--console-host",
    default=CONSOLE_HOST,
    help="address the console binds (beyond this machine only with LEASEWARD_CONSOLE_TOKEN)",
)
@configuration(
    "--console-allowed-host",
    "console_allowed_hosts",
    multiple=True,
    variable=ALLOWED_HOSTS_VARIABLE,
    help="a name the console answers to beside localhost and IP addresses (a proxy's, "
    "the machine's DNS name; *.example.com for all under it); repeat for more",
)
@configuration(
    "--log-format",
    default=default_log_format,
    show_default="console when stderr is a terminal, else json",
    type=LOG_FORMAT,
    help="json or console",
)
@configuration(
    "--log-level",
    default="info",
    type=LOG_LEVEL,
    help="leaseward's log level: " + ", ".join(LOG_LEVELS) + " (others log info and above)",
)
def daemon(
    store_url: str, app_path: str | None, console: bool, console_port: int, **settings: Any
) -> int:
    _needs("--console-port", "console_port", "--console", console)
    _needs("--console-host", "console_host", "--console", console)
    _needs("--console-allowed-host", "console_allowed_hosts", "--console", console)
    settings["console_allowed_hosts"] = (
        check_allowed_hosts(settings["console_allowed_hosts"], flag="--console-allowed-host")
        if console
        else ()
    )
    _needs("--metrics-host", "metrics_host", "--metrics-port", settings["metrics_port"] is not None)
    served_port = console_port if console else None
    return anyio.run(
        actions.daemon,
        app_path,
        DaemonSettings(store_url=store_url, console_port=served_port, **settings),
    )


def _needs(flag: str, name: str, needed: str, given: bool) -> None:
    """Refuse ``flag`` on the command line without the flag it tunes: it would do nothing.
    From the environment it is a deployment's setting, read whenever the other is set."""
    source = click.get_current_context().get_parameter_source(name)
    if source is ParameterSource.COMMANDLINE and not given:
        raise click.UsageError(f"{flag} tunes {needed}, which is not given: add it, or drop {flag}")


@leaseward.command(help="serve the operator web console on the store until Ctrl-C")
@_store
# The variables of the daemon's --console-host and --console-port: one deployment's
# settings serve the console however it is started.
@configuration(
    "--host",
    default=CONSOLE_HOST,
    variable="LEASEWARD_CONSOLE_HOST",
    help="address to listen on (beyond this machine only with LEASEWARD_CONSOLE_TOKEN set, "
    "the operators' login token; without it the console only reads)",
)
@configuration(
    "--port",
    default=CONSOLE_PORT,
    type=PORT,
    variable="LEASEWARD_CONSOLE_PORT",
    help="port to listen on",
)
@configuration(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    variable=ALLOWED_HOSTS_VARIABLE,
    help="a name the console answers to beside localhost and IP addresses (a proxy's, "
    "the machine's DNS name; *.example.com for all under it); repeat for more",
)
def console(store_url: str, host: str, port: int, allowed_hosts: tuple[str, ...]) -> int:
    names = check_allowed_hosts(allowed_hosts, flag="--allowed-host")
    return anyio.run(actions.console, store_url, host, port, names)


@leaseward.command(help="queue a run and print its id")
@click.argument("agent", metavar="AGENT")
@_store
@one_off(
    "--input",
    "input_text",
    default="null",
    help="the run input: JSON text (a string is written in quotes: '\"hello\"'), "
    "or @file holding JSON",
)
@one_off(
    "--idempotency-key",
    help="submit once however often retried: a key already used for the same agent "
    "and input prints that run's id and queues nothing; for other ones it is refused",
)
@one_off("--wait", is_flag=True, help="wait for the run to finish and print it, with its result")
@one_off("--timeout", type=POSITIVE_FLOAT, help="with --wait, give up after this many seconds")
@_json
def submit(store_url: str, **flags: Any) -> int:
    return _on_client(actions.submit, store_url, **flags)


@leaseward.command(help="list runs, newest first")
@_store
@one_off("--state", type=RUN_STATE, help="only runs in this state")
@one_off("--agent", help="only runs of this agent")
@_limit
@_json
def runs(store_url: str, **flags: Any) -> int:
    return _on_client(actions.runs, store_url, read_only=True, **flags)


@leaseward.command(help="show a run and its journal as a timeline")
@_run_id
@_store
@_json
def show(store_url: str, **flags: Any) -> int:
    return _on_client(actions.show, store_url, read_only=True, **flags)


@leaseward.command(help="cancel a run (at its next step boundary if it is running)")
@_run_id
@_store
def cancel(store_url: str, run_id: str) -> int:
    return _on_client(actions.cancel, store_url, run_id=run_id)


@leaseward.command("dead-letters", help="list dead-lettered runs")
@_store
@one_off("--reason", type=DEAD_LETTER_REASON, help="only this reason")
@_limit
@_json
def dead_letters(store_url: str, reason: Reason | None, limit: int, as_json: bool) -> int:
    return _on_client(
        actions.dead_letters, store_url, read_only=True, reason=reason, limit=limit, as_json=as_json
    )


@leaseward.command(help="requeue a dead-lettered run that needs no verdict, under a new epoch")
@_run_id
@_store
def redrive(store_url: str, run_id: str) -> int:
    return _on_client(actions.redrive, store_url, run_id=run_id)


@leaseward.command(help="record whether an interrupted write applied, and resume its run")
@_run_id
@_store
@one_off("--applied", is_flag=True, help="the call took effect")
@one_off("--not-applied", is_flag=True, help="the call had no effect")
@one_off(
    "--step",
    type=click.IntRange(min=0),
    help="the journal step of the call you checked, as `show` prints it: refused if the "
    "run's interrupted call is another now",
)
@one_off("--note", help="why you decided so (kept in the journal)")
@_operator("decides")
def resolve(store_url: str, applied: bool, not_applied: bool, **flags: Any) -> int:
    if applied == not_applied:
        raise click.UsageError(
            "--applied and --not-applied exclude each other"
            if applied
            else "one of --applied and --not-applied is required"
        )
    return _on_client(actions.resolve, store_url, applied=applied, **flags)


@leaseward.command(help="list the calls that wait for a person, oldest first")
@_store
@_limit
@_json
def approvals(store_url: str, limit: int, as_json: bool) -> int:
    return _on_client(actions.approvals, store_url, read_only=True, limit=limit, as_json=as_json)


@leaseward.command(help="approve a call that waits for approval; its run resumes")
@_run_id
@_store
@_call("waits for")
@one_off(
    "--digest",
    help="the arguments' digest as `approvals` or `show` prints it: the approval is refused "
    "if the call waiting now has other arguments",
)
@one_off("--note", help="why you approve (kept in the journal)")
@_operator("decides")
def approve(store_url: str, **flags: Any) -> int:
    return _on_client(actions.approve, store_url, **flags)


@leaseward.command(help="reject a call that waits for approval; it never executes")
@_run_id
@_store
@_call("waits for")
@one_off("--reason", required=True, help="why (kept in the journal, and the model is told)")
@_operator("decides")
def reject(store_url: str, **flags: Any) -> int:
    return _on_client(actions.reject, store_url, **flags)


@leaseward.command(help="answer a run that waits for input (ask_human); it resumes")
@_run_id
@_store
@one_off(
    "--input",
    "input_text",
    required=True,
    help="the answer: JSON text (a string is written in quotes: '\"blue\"'), or @file",
)
@_call("asks")
@_operator("answers")
def reply(store_url: str, **flags: Any) -> int:
    return _on_client(actions.reply, store_url, **flags)


@leaseward.command(help="settle runs whose lease expired, and expired approvals, once")
@_store
@one_off(
    "--once",
    is_flag=True,
    help="one reaper pass: it watches the running leases for as long as they were "
    "granted, then reaps those not renewed meanwhile (the daemon reaps continuously)",
)
def reap(store_url: str, once: bool) -> int:
    if not once:
        raise click.UsageError("--once is required: the daemon reaps continuously")
    return anyio.run(actions.reap, store_url)


@leaseward.command(help="create the schema or bring it to the newest version")
@_store
def migrate(store_url: str) -> int:
    return anyio.run(actions.migrate, store_url)


@leaseward.command(help="list the workers serving this store: live, draining and gone")
@_store
@_json
def workers(store_url: str, as_json: bool) -> int:
    return _on_client(actions.workers, store_url, read_only=True, as_json=as_json)


@leaseward.command(
    help="delete finished runs and their journals, in short batches (their idempotency "
    "keys are kept); forget old keys"
)
@_store
@one_off(
    "--finished-before",
    type=DURATION,
    help="delete runs that finished longer ago than this, e.g. 30d, 12h, 45m, 90s",
)
@one_off("--state", type=FINISHED_STATE, help="only runs in this finished state")
@one_off(
    "--include-dead-letters",
    is_flag=True,
    help="delete dead-lettered runs too (kept otherwise: they wait for an operator)",
)
@one_off(
    "--forget-keys-older-than",
    type=DURATION,
    help="forget the idempotency keys of purged runs first used longer ago than this "
    "(e.g. 90d): a submit with one of them then creates a new run",
)
@one_off("--dry-run", is_flag=True, help="count what would be deleted or forgotten; change nothing")
def purge(
    store_url: str,
    finished_before: timedelta | None,
    state: RunState | None,
    **flags: Any,
) -> int:
    return _on_client(
        actions.purge, store_url, finished_before=finished_before, state=state, **flags
    )
