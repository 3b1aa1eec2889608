"""What each command does, once its flags are parsed: open the store, act, print.

An action takes plain values (never click's context), so it reads as the operation
it is. A mistake in how it was called raises ``click.UsageError`` before anything
changes; the store's own errors pass through for the entry point to word.
"""

from __future__ import annotations

import functools
import json
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import click

from leaseward.actors.reaper import LeaseReaper
from leaseward.cli.defaults import EXIT_FAILURE
from leaseward.cli.json_output import (
    print_json,
    request_json,
    run_document,
    run_json,
    worker_json,
)
from leaseward.cli.tables import (
    count,
    print_approvals,
    print_runs,
    print_workers,
    shown,
    timestamp,
)
from leaseward.cli.timeline import nobody_reaps, print_timeline
from leaseward.client import Client, default_operator, open_existing_store
from leaseward.console.listen import check_listen_address, configured_token, console_url
from leaseward.daemon import DaemonSettings, load_app, serve
from leaseward.runtime.encoding import MAX_INPUT_BYTES, MAX_JSON_DEPTH
from leaseward.runtime.errors import (
    CommitOutcomeUnknown,
    RunNotFound,
    SchemaMismatch,
    StoreError,
    StoreNotFound,
    WaitTimeout,
)
from leaseward.runtime.lifecycle import Reason, RecoveryPolicy, RunState
from leaseward.runtime.retention import PurgeResult
from leaseward.runtime.runs import RunInfo
from leaseward.storage.connect import open_store, refuse_newer_schema
from leaseward.storage.url import store_location

__all__ = [
    "WAIT_RETRY_FIRST_SECONDS",
    "WAIT_RETRY_MAX_SECONDS",
    "approvals",
    "approve",
    "cancel",
    "console",
    "daemon",
    "dead_letters",
    "migrate",
    "purge",
    "read_input",
    "reap",
    "redrive",
    "reject",
    "reply",
    "resolve",
    "runs",
    "show",
    "submit",
    "with_client",
    "workers",
]

ClientAction = Callable[..., Awaitable[int]]


async def with_client(
    store_url: str, action: ClientAction, *, read_only: bool, **flags: Any
) -> int:
    """``action`` on an existing store: a mistyped path must not create a database. A
    read-only action works on a store this user may only read, and never migrates one."""
    store = await open_existing_store(store_url, read_only=read_only)
    try:
        return await action(Client(store), store_url=store_url, **flags)
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


def read_input(text: str) -> Any:
    """``--input``: JSON text, or ``@file`` holding JSON."""
    if text.startswith("@"):
        return _read_input_file(Path(text[1:]))
    try:
        return json.loads(text)
    except RecursionError:
        raise click.UsageError(_too_deep("--input")) from None
    except json.JSONDecodeError as exc:
        hint = ""
        first = text.strip()[:1]
        if not first or first not in '{["-0123456789':
            # A bare word is the usual slip: the shell ate the quotes of a JSON string.
            quoted = shlex.quote(json.dumps(text, ensure_ascii=False))
            hint = f"; a JSON string is written in quotes: --input {quoted}"
        raise click.UsageError(f"--input is not JSON: {exc}{hint}") from None


def _read_input_file(path: Path) -> Any:
    # At most one byte over the limit is read: a huge file is refused without
    # holding it in memory (the canonical JSON of the input is held to the same limit).
    try:
        with path.open("rb") as file:
            data = file.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise click.UsageError(f"--input @{path}: {exc.strerror or exc}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise click.UsageError(
            f"--input @{path} is larger than the input limit ({MAX_INPUT_BYTES} bytes)"
        )
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise click.UsageError(f"--input @{path} is not UTF-8 text: {exc.reason}") from None
    except RecursionError:
        raise click.UsageError(_too_deep(f"--input @{path}")) from None
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"--input @{path} is not JSON: {exc}") from None


def _too_deep(what: str) -> str:
    return f"{what} is nested too deep: JSON of at most {MAX_JSON_DEPTH} levels, please"


# -- runs nobody serves -----------------------------------------------------------------


async def _unserved(client: Client, runs: Sequence[RunInfo]) -> frozenset[str]:
    """The agents of these queued runs that no live worker serves."""
    queued = {run.agent for run in runs if run.state is RunState.QUEUED}
    if not queued:
        return frozenset()
    return frozenset(queued - await client.served_agents())


def _serving(served: frozenset[str]) -> str:
    return f"live workers serve {', '.join(sorted(served))}" if served else "no worker is live"


async def _submit_served(
    client: Client,
    agent: str,
    value: Any,
    *,
    idempotency_key: str | None,
    wait: bool,
    timeout: float | None,
) -> str:
    """Submit, saying so when no live worker serves the agent.

    The run is queued all the same (its workers may be restarting), except under
    --wait without --timeout: that wait could never end, and a command that fails
    changes nothing, so a script that retries it cannot queue the run twice.
    """
    served = await client.served_agents()
    if agent in served:
        return await client.submit(agent, value, idempotency_key=idempotency_key)
    if wait and timeout is None and not await _key_names_an_ended_run(client, idempotency_key):
        raise click.UsageError(
            f"no live worker serves agent {agent!r} ({_serving(served)}), so --wait "
            "would never return; nothing was queued (add --timeout, or drop --wait)"
        )
    run_id = await client.submit(agent, value, idempotency_key=idempotency_key)
    if await _still_queued(client, run_id):
        print(
            f"leaseward: warning: no live worker serves agent {agent!r} ({_serving(served)}); "
            f"run {run_id} stays queued until one does",
            file=sys.stderr,
        )
    return run_id


async def _key_names_an_ended_run(client: Client, idempotency_key: str | None) -> bool:
    """Whether a submit with this key answers with a run that has ended or was purged:
    it queues nothing then, and a wait for it ends at once, worker or none."""
    if idempotency_key is None:
        return False
    run_id = await client.run_id_for_key(idempotency_key)
    if run_id is None:
        return False
    try:
        return (await client.get(run_id)).state.terminal
    except RunNotFound:
        return True


async def _still_queued(client: Client, run_id: str) -> bool:
    # An idempotency key may answer with a run that already finished, or was purged
    # since: nothing waits for a worker then, and a warning would say it does.
    try:
        return (await client.get(run_id)).state is RunState.QUEUED
    except RunNotFound:
        return False


@contextmanager
def _answer_lost(what: str, run_id: str) -> Iterator[None]:
    """A change whose COMMIT reached the store but whose answer did not may be stored:
    an operator told it failed would make it again."""
    try:
        yield
    except CommitOutcomeUnknown as exc:
        raise CommitOutcomeUnknown(
            f"the store's answer to the {what} of run {run_id} was lost ({exc.message}): "
            f"it may have been made all the same; `leaseward show {run_id}` says whether"
        ) from exc


# -- the runs ---------------------------------------------------------------------------

WAIT_RETRY_FIRST_SECONDS = 0.25
"""How long ``submit --wait`` waits before it reads again from a store that failed; the
pause doubles with each failure in a row, up to WAIT_RETRY_MAX_SECONDS."""
WAIT_RETRY_MAX_SECONDS = 2.0


def _transient(error: StoreError) -> bool:
    """Whether the store may answer if asked again: it was out of reach or busy, not
    missing, of another schema, or refusing the data it was sent."""
    return not (error.data_error or isinstance(error, StoreNotFound | SchemaMismatch))


async def _wait_through_outages(client: Client, run_id: str, timeout: float | None) -> RunInfo:
    """``client.wait`` through a store that fails for a while (a server restarted, a
    network path that comes back): read again with backoff until the timeout, having said
    once on stderr that the store does not answer. The store's last error ends the wait
    at the timeout, or at once where asking again cannot help."""
    deadline = None if timeout is None else anyio.current_time() + timeout
    pause = WAIT_RETRY_FIRST_SECONDS
    told = False
    while True:
        left = None if deadline is None else max(0.0, deadline - anyio.current_time())
        try:
            return await client.wait(run_id, timeout=left)
        except WaitTimeout:
            if timeout is None:
                raise
            # Said of the whole wait, not of what was left of it after an outage.
            raise WaitTimeout(f"run {run_id} did not finish within {timeout:g} seconds") from None
        except StoreError as exc:
            if not _transient(exc) or left == 0.0:
                raise
            if not told:
                told = True
                print(
                    f"leaseward: the store does not answer ({exc.message}); still waiting "
                    f"for run {run_id}"
                    + ("" if timeout is None else f", for up to {timeout:g} s in all"),
                    file=sys.stderr,
                )
        left = None if deadline is None else max(0.0, deadline - anyio.current_time())
        await anyio.sleep(pause if left is None else min(pause, left))
        pause = min(pause * 2, WAIT_RETRY_MAX_SECONDS)


async def submit(
    client: Client,
    *,
    store_url: str,
    agent: str,
    input_text: str,
    idempotency_key: str | None,
    wait: bool,
    timeout: float | None,
    as_json: bool,
) -> int:
    if timeout is not None and not wait:
        raise click.UsageError("--timeout bounds --wait: give both, or neither")
    value = read_input(input_text)
    run_id = await _submit_served(
        client, agent, value, idempotency_key=idempotency_key, wait=wait, timeout=timeout
    )
    if not wait:
        print(json.dumps({"id": run_id}) if as_json else run_id)
        return 0
    try:
        run = await _wait_through_outages(client, run_id, timeout)
    except (KeyboardInterrupt, anyio.get_cancelled_exc_class(), WaitTimeout, StoreError) as stopped:
        # Ctrl-C, the timeout or a store that failed under the wait: the run is queued
        # all the same, and a user told nothing of it would submit again, a second run
        # (a second refund).
        again = (
            "submitting again with the same --idempotency-key queues nothing new"
            if idempotency_key is not None
            else "submitting again queues a second run"
        )
        why = (
            stopped.message
            if isinstance(stopped, WaitTimeout | StoreError)
            else "the wait was stopped"
        )
        print(
            f"leaseward: {why}; run {run_id} is submitted and goes on without the wait "
            f"(`leaseward show {run_id}` follows it; {again})",
            file=sys.stderr,
        )
        if isinstance(stopped, WaitTimeout | StoreError):
            return EXIT_FAILURE
        raise
    if as_json:
        print_json(run_json(run))
    else:
        print_runs([run])
        # What the run came to, as `show` prints it: the row alone says only its state.
        if run.result is not None:
            print(shown(f"result: {json.dumps(run.result, ensure_ascii=False)}"))
        if run.error:
            print(shown(f"error: {run.error}"))
    return 0 if run.state is RunState.COMPLETED else EXIT_FAILURE


async def runs(
    client: Client,
    *,
    store_url: str,
    state: RunState | None,
    agent: str | None,
    limit: int,
    as_json: bool,
) -> int:
    found = await client.runs(state=state, agent=agent, limit=limit)
    if as_json:
        print_json([run_json(r) for r in found])
    else:
        print_runs(found, await _unserved(client, found))
    return 0


async def show(client: Client, *, store_url: str, run_id: str, as_json: bool) -> int:
    run = await client.get(run_id)
    steps = await client.steps(run_id)
    requests = await client.requests(run_id)
    if as_json:
        print_json(run_document(run, steps, requests))
    else:
        print_timeline(run, steps, store_url, requests)
        if run.agent in await _unserved(client, [run]):
            print(shown(f"note: no live worker serves {run.agent}; the run waits until one does"))
        unreaped = nobody_reaps(run, await client.workers())
        if unreaped is not None:
            print(f"note: {unreaped}")
    return 0


async def cancel(client: Client, *, store_url: str, run_id: str) -> int:
    with _answer_lost("cancel", run_id):
        cancelled = await client.cancel(run_id)
    run = await client.get(run_id)
    if not cancelled:
        print(f"leaseward: run {run_id} had already finished ({run.state.value})", file=sys.stderr)
        return EXIT_FAILURE
    if run.state is RunState.CANCELLED:
        print(f"run {run_id} cancelled")
    else:
        print(f"run {run_id}: cancel requested; it stops at its next step boundary")
    return 0


async def dead_letters(
    client: Client, *, store_url: str, reason: Reason | None, limit: int, as_json: bool
) -> int:
    found = await client.dead_letters(reason=reason, limit=limit)
    if as_json:
        print_json([run_json(r) for r in found])
    else:
        print_runs(found)
    return 0


def _next_attempt(run: RunInfo) -> str:
    if run.cancel_requested:
        return "a cancel was asked before it stopped, so it is cancelled before its next call"
    # The operator's action opened an epoch of its own (G9); the claim that resumes the
    # run opens the next one, which its new steps carry and show then reports.
    return f"it resumes from its journal at epoch {run.epoch + 1}"


async def redrive(client: Client, *, store_url: str, run_id: str) -> int:
    with _answer_lost("redrive", run_id):
        run = await client.redrive(run_id)
    print(f"run {run.id} requeued: {_next_attempt(run)}")
    return 0


async def resolve(
    client: Client,
    *,
    store_url: str,
    run_id: str,
    applied: bool,
    step: int | None,
    note: str | None,
    operator: str | None,
) -> int:
    with _answer_lost("resolution", run_id):
        run = await client.resolve(
            run_id, applied=applied, operator=operator or default_operator(), note=note, step=step
        )
    verdict = "applied" if applied else "not applied"
    print(f"run {run.id}: call recorded as {verdict}; requeued: {_next_attempt(run)}")
    return 0


# -- calls that wait for a person -------------------------------------------------------


async def approvals(client: Client, *, store_url: str, limit: int, as_json: bool) -> int:
    requests = await client.approvals(limit=limit)
    if as_json:
        print_json([request_json(r) for r in requests])
    else:
        print_approvals(requests)
    return 0


def _decided(run: RunInfo, what: str) -> str:
    if run.state is RunState.QUEUED:
        return f"run {run.id}: {what}; every call is decided, requeued"
    return f"run {run.id}: {what}; it still waits for other calls ({run.state.value})"


async def approve(
    client: Client,
    *,
    store_url: str,
    run_id: str,
    call: str | None,
    digest: str | None,
    note: str | None,
    operator: str | None,
) -> int:
    with _answer_lost("approval", run_id):
        run = await client.approve(
            run_id, call, operator=operator or default_operator(), note=note, digest=digest
        )
    print(_decided(run, "approved"))
    return 0


async def reject(
    client: Client,
    *,
    store_url: str,
    run_id: str,
    call: str | None,
    reason: str,
    operator: str | None,
) -> int:
    with _answer_lost("rejection", run_id):
        run = await client.reject(
            run_id, call, operator=operator or default_operator(), reason=reason
        )
    print(_decided(run, "rejected"))
    return 0


async def reply(
    client: Client,
    *,
    store_url: str,
    run_id: str,
    input_text: str,
    call: str | None,
    operator: str | None,
) -> int:
    value = read_input(input_text)
    with _answer_lost("reply", run_id):
        run = await client.send_input(
            run_id, value, call_id=call, operator=operator or default_operator()
        )
    print(_decided(run, "answered"))
    return 0


async def workers(client: Client, *, store_url: str, as_json: bool) -> int:
    found = await client.workers()
    if as_json:
        print_json([worker_json(w) for w in found])
    else:
        print_workers(found)
    return 0


# -- the store itself -------------------------------------------------------------------


async def reap(store_url: str) -> int:
    store = await open_existing_store(store_url)
    try:
        reaper = LeaseReaper(
            store, interval_seconds=1.0, policy=RecoveryPolicy(), logs_settled=False
        )
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


async def migrate(store_url: str) -> int:
    store = await open_store(store_url, migrate=False)
    try:
        created = not await store.schema_present()
        await refuse_newer_schema(store, store_location(store_url))
        version = await store.migrate()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()
    if created:
        print(f"created a leaseward store at {store_location(store_url)}")
    print(f"schema at version {version}")
    return 0


async def daemon(app_path: str | None, settings: DaemonSettings) -> int:
    if not app_path:
        raise click.UsageError(
            "--app is required (or LEASEWARD_APP), e.g. --app myproject.agents:app"
        )
    if settings.reap_interval_seconds >= settings.lease_seconds:
        raise click.UsageError(
            f"--reap-interval-seconds ({settings.reap_interval_seconds:g}) must be shorter "
            f"than --lease-seconds ({settings.lease_seconds:g}): a dead worker's runs wait "
            "up to the lease plus the reap interval to be recovered"
        )
    if settings.worker_id != settings.worker_id.strip() or not settings.worker_id:
        raise click.UsageError(
            "--worker-id must be a name without spaces around it, such as the default "
            f"host:pid, not {settings.worker_id!r}"
        )
    if settings.console_port is not None:
        check_listen_address(settings.console_host, configured_token(), flag="--console-host")
    return await serve(settings, load_app(app_path))


async def console(store_url: str, host: str, port: int, allowed_hosts: tuple[str, ...]) -> int:
    # Here, not at the top: the other commands start without the web stack.
    from leaseward.console.serve import serve_console

    token = configured_token()
    check_listen_address(host, token)
    store = await open_existing_store(store_url)
    try:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as serving:
                bound = await serving.start(
                    functools.partial(
                        serve_console,
                        Client(store),
                        host=host,
                        port=port,
                        token=token,
                        allowed_hosts=allowed_hosts,
                    )
                )
                reads = "" if token else "; read only: LEASEWARD_CONSOLE_TOKEN is not set"
                print(f"console at {console_url(host, bound)} (Ctrl-C stops it){reads}", flush=True)
                async for _ in signals:
                    break
                serving.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()
    return 0


# -- retention --------------------------------------------------------------------------


async def purge(
    client: Client,
    *,
    store_url: str,
    finished_before: timedelta | None,
    state: RunState | None,
    include_dead_letters: bool,
    forget_keys_older_than: timedelta | None,
    dry_run: bool,
) -> int:
    if finished_before is None and forget_keys_older_than is None:
        raise click.UsageError("purge needs --finished-before, --forget-keys-older-than, or both")
    if finished_before is None and (state or include_dead_letters):
        raise click.UsageError("--state and --include-dead-letters need --finished-before")
    if state is RunState.DEAD_LETTERED and not include_dead_letters:
        raise click.UsageError(
            "dead-lettered runs wait for an operator: purging them needs --include-dead-letters"
        )
    purged: PurgeResult | None = None
    if finished_before is not None:
        result = purged = await client.purge(
            finished_before=finished_before,
            state=state,
            include_dead_letters=include_dead_letters,
            dry_run=dry_run,
        )
        counts = (
            f"{count(result.runs, 'run')} ({count(result.steps, 'journal row')}) finished "
            f"before {timestamp(result.finished_before)}, "
            f"in {count(result.batches, 'batch', 'batches')}"
        )
        kept = "" if include_dead_letters or state else "; dead-lettered runs kept"
        if result.dry_run:
            print(f"would delete {counts}{kept}; nothing changed (dry run)")
        else:
            print(f"deleted {counts}{kept}")
    if forget_keys_older_than is not None:
        forgotten = await client.forget_keys(
            older_than=forget_keys_older_than, dry_run=dry_run, after_purge=purged
        )
        counts = (
            f"{count(forgotten.keys, 'idempotency key')} of purged runs first used before "
            f"{timestamp(forgotten.created_before)}, "
            f"in {count(forgotten.batches, 'batch', 'batches')}"
        )
        if forgotten.dry_run:
            print(f"would forget {counts}; nothing changed (dry run)")
        else:
            print(f"forgot {counts}")
    return 0
