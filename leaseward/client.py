"""The Client: submit and inspect runs from a process that executes none of them."""

from __future__ import annotations

import getpass
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio

from leaseward.actors.tracing import current_traceparent
from leaseward.runtime.agents import App
from leaseward.runtime.clock import Clock
from leaseward.runtime.conversation import run_usage
from leaseward.runtime.encoding import (
    MAX_INPUT_BYTES,
    MAX_RESULT_BYTES,
    dump_json,
    holdable,
    request_digest,
)
from leaseward.runtime.errors import (
    CommitOutcomeUnknown,
    ConfigurationError,
    InvalidInput,
    LeasewardError,
    RequestExpired,
    RunNotFound,
    RunPurged,
    StoreNotFound,
    UnknownAgent,
    WaitTimeout,
)
from leaseward.runtime.human_requests import Decision, HumanRequest
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import Reason, RunMode, RunState
from leaseward.runtime.listing import (
    RunCursor,
    RunListing,
    check_count,
    check_limit,
    member_of,
)
from leaseward.runtime.messages import Usage
from leaseward.runtime.retention import ForgetKeysResult, PurgeResult
from leaseward.runtime.runs import (
    NewRun,
    RunInfo,
    RunRecord,
    check_idempotency_key,
    stored_run_id,
)
from leaseward.runtime.workers import WorkerInfo
from leaseward.storage.connect import open_store
from leaseward.storage.protocol import CancelOutcome, Store, unwrap
from leaseward.storage.store import PURGE_BATCH_RUNS, SQLStore
from leaseward.wakeups import SettleWakeups
from leaseward.writer import RunWriter, StoreWriter

__all__ = ["WAIT_POLL_SECONDS", "Client", "check_store_url", "new_run", "open_existing_store"]

WAIT_POLL_SECONDS = 0.5


def check_store_url(url: Any) -> None:
    """Refuse what names no store before one is opened, saying what would: a path
    is the commonest slip, and only its URL says which store and file it is."""
    if isinstance(url, str):
        return
    if isinstance(url, os.PathLike):
        path = os.fsdecode(url)
        raise ConfigurationError(
            f"a store is named by a URL, not a path: sqlite:///{Path(path).absolute()} "
            f"names the SQLite file {path!r}"
        )
    raise ConfigurationError(
        f"a store is named by a URL such as sqlite:///runs.db, not {url!r} (Runtime.open "
        "also takes an open Store)"
    )


async def open_existing_store(
    url: str, *, clock: Clock | None = None, read_only: bool = False
) -> SQLStore:
    """The leaseward store at ``url``; raises StoreNotFound, creating nothing, if there is
    none, and SchemaMismatch, changing nothing, if its schema is not this leaseward's:
    only ``leaseward migrate`` and a worker (``Runtime.open``) upgrade it (see
    ``open_store``)."""
    check_store_url(url)
    try:
        return await open_store(
            url, clock=clock, must_exist=True, migrate=False, read_only=read_only
        )
    except StoreNotFound as exc:
        if exc.explained:
            raise
        raise StoreNotFound(
            exc.location,
            f"no leaseward store at {exc.location}; a daemon or `leaseward migrate` creates one",
        ) from None


def new_run_id() -> str:
    return str(uuid.uuid4())


def _storable_id(run_id: str) -> str:
    """``run_id`` as every store looks it up: RunNotFound for one no store could have
    given (a NUL or a lone surrogate, which a store would answer with an error)."""
    if not isinstance(run_id, str):
        raise InvalidInput(f"a run id is a string, not {run_id!r}")
    if not holdable(run_id):
        raise RunNotFound(run_id=run_id)
    return stored_run_id(run_id)


def _check_timeout(timeout: float | None) -> None:
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise InvalidInput(
            f"a wait's timeout is a number of seconds, 0 or more, or None, not {timeout!r}"
        )
    try:
        float(timeout)
    except OverflowError:
        # The deadline is a float: an int past its range would overflow computing it.
        raise InvalidInput(
            f"a wait's timeout of {len(str(timeout))} digits of seconds is past any clock; "
            "None waits without a limit"
        ) from None


def _check_text(name: str, value: Any) -> None:
    """Refuse an operator's name or words that are no text every store can hold: the
    store would refuse them or, on SQLite, keep them as other text (7 as "7")."""
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, not {value!r}")
    if not holdable(value):
        raise InvalidInput(
            f"{name} must be text without a NUL character or a lone surrogate, not {value!r}"
        )


def _check_flag(name: str, value: Any) -> None:
    # Taken for its truth, "false" or "no" would do what it says not to.
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be True or False, not {value!r}")


def default_operator() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def new_run(
    agent: str,
    input: Any,
    mode: RunMode,
    *,
    app: App | None,
    lease_owner: str | None = None,
    lease_seconds: float | None = None,
    idempotency_key: str | None = None,
) -> NewRun:
    """A run checked before anything is stored: its agent against ``app`` (given), its
    input as JSON within the size limit, and its idempotency key."""
    if app is not None:
        app.agent(agent)
    elif not isinstance(agent, str) or not agent or not holdable(agent):
        raise UnknownAgent(
            f"an agent name must be a non-empty string without a NUL character or a lone "
            f"surrogate, not {agent!r}"
        )
    input_json = dump_json(input, what="the run input", limit=MAX_INPUT_BYTES)
    keyed = idempotency_key is not None
    return NewRun(
        id=new_run_id(),
        agent=agent,
        mode=mode,
        input_json=input_json,
        lease_owner=lease_owner,
        lease_seconds=lease_seconds,
        idempotency_key=check_idempotency_key(idempotency_key) if keyed else None,
        request_digest=request_digest(agent, input) if keyed else None,
        traceparent=current_traceparent(),
    )


class Client:
    """Submits, inspects and cancels runs in a store.

    Given the ``app``, ``submit`` refuses agents it does not know; without it, a
    run for an agent no worker serves stays queued until one does (a queue accepts
    work while its workers restart): ``served_agents`` tells whether one does now.

    A ``writer`` and ``wakeups`` are given by a process that also executes runs (a
    Runtime): new runs and cancels then go through its writer, and the runs it
    settles wake this Client's waiters at once.
    """

    def __init__(
        self,
        store: Store,
        *,
        app: App | None = None,
        writer: RunWriter | None = None,
        wakeups: SettleWakeups | None = None,
    ) -> None:
        if isinstance(store, str | os.PathLike):
            raise ConfigurationError(
                f"Client takes an open Store, not {store!r}: Client.open(url) opens the "
                "store at a URL"
            )
        if app is not None and not isinstance(app, App):
            raise ConfigurationError(f"app must be an App, not {type(app).__name__}")
        self._store = store
        self._app = app
        self._writer = writer or StoreWriter(store)
        self._wakeups = wakeups or SettleWakeups()

    @classmethod
    @asynccontextmanager
    async def open(
        cls, url: str, *, app: App | None = None, clock: Clock | None = None
    ) -> AsyncIterator[Client]:
        """Open the store at ``url``, which a Runtime, a daemon or ``leaseward migrate``
        created: a Client never creates one, so a mistyped path raises StoreNotFound
        instead of queueing runs in a new database that no worker reads."""
        store = await open_existing_store(url, clock=clock)
        try:
            yield cls(store, app=app)
        finally:
            with anyio.CancelScope(shield=True):
                await store.aclose()

    @property
    def store(self) -> Store:
        return self._store

    async def submit(self, agent: str, input: Any, *, idempotency_key: str | None = None) -> str:
        """Queue a run of ``agent`` on ``input`` (any JSON value); returns the run id.

        With an ``idempotency_key``, a submit is made once however often it is
        retried, from any process: if a run already has that key, its id is
        returned (whatever its state, even once it was purged) and nothing new is
        queued. A key already used for another agent or input raises
        IdempotencyKeyConflict. Only ``forget_keys`` makes a key new again.

        A submit whose commit went unanswered (CommitOutcomeUnknown) reads its run
        back and returns it if it was stored; otherwise the error names the run that
        may be queued.
        """
        new = new_run(agent, input, RunMode.QUEUED, app=self._app, idempotency_key=idempotency_key)
        try:
            [result] = await self._writer.create_runs([new])
            record = unwrap(result)
        except RunPurged as purged:
            return purged.run_id
        except CommitOutcomeUnknown as lost:
            record = await self._stored_despite(lost, [new])
        if record.id == new.id:
            self._writer.queued()
        return record.id

    async def _stored_despite(
        self, lost: CommitOutcomeUnknown, runs: Sequence[NewRun]
    ) -> RunRecord:
        """The first of the runs a submit whose answer was lost stored, read back by its
        id: they were written in one transaction, so it stands for all of them. A run not
        found may still be on its way in (its COMMIT may land after the read), so that
        is no proof of nothing stored: the error names the runs to look up."""
        first = runs[0]
        try:
            record = await self._store.get_run(first.id)
        except LeasewardError:
            record = None
        if record is not None:
            return record
        if len(runs) > 1:
            raise CommitOutcomeUnknown(
                f"the store's answer to submit_many was lost ({lost.message}): its "
                f"{len(runs)} runs, {first.id} to {runs[-1].id}, may be queued, all or "
                f"none; look {first.id} up before you submit them again"
            ) from lost
        retry = (
            "submit again with the same idempotency key, which queues it at most once"
            if first.idempotency_key is not None
            else "look it up before you submit again"
        )
        raise CommitOutcomeUnknown(
            f"the store's answer to the submit was lost ({lost.message}): "
            f"run {first.id} may be queued; {retry}"
        ) from lost

    async def run_id_for_key(self, idempotency_key: str) -> str | None:
        """The id of the run a submit with ``idempotency_key`` made, whether the run is
        stored or was purged since; None if no run holds the key (it was never used, or
        it was forgotten). Changes nothing: a submit with the key would return this id."""
        if isinstance(idempotency_key, str) and not holdable(idempotency_key):
            # No submit can make it (a store would refuse it): no run can have it.
            return None
        return await self._store.keyed_run_id(check_idempotency_key(idempotency_key))

    async def submit_many(self, agent: str, inputs: Iterable[Any]) -> list[str]:
        """Queue one run of ``agent`` per input, all in one write; returns their ids in order.

        Every input is checked before anything is stored: one that is not JSON (or
        too large) raises InvalidInput and queues nothing, as does one input given
        in place of the collection (a string, bytes or a mapping).

        A write whose commit went unanswered (CommitOutcomeUnknown) reads its first run
        back and returns the ids if it was stored; otherwise the error names the runs
        that may be queued.
        """
        if isinstance(inputs, str | bytes | bytearray | Mapping):
            # Iterated, it would queue a run per character, byte or key.
            raise InvalidInput(
                f"submit_many takes a collection of inputs, one per run, not one "
                f"{type(inputs).__name__}; submit() queues a single run"
            )
        if not isinstance(inputs, Iterable):
            raise InvalidInput(
                f"submit_many takes a collection of inputs, one per run, not {inputs!r}"
            )
        runs = [new_run(agent, input, RunMode.QUEUED, app=self._app) for input in inputs]
        if not runs:
            return []
        try:
            ids = [unwrap(result).id for result in await self._writer.create_runs(runs)]
        except CommitOutcomeUnknown as lost:
            await self._stored_despite(lost, runs)
            ids = [run.id for run in runs]
        self._writer.queued()
        return ids

    @asynccontextmanager
    async def _acting_on(self, run_id: str) -> AsyncIterator[str]:
        """An action on a run that is gone says so as ``get`` does: RunPurged, when and how
        it had ended, for one purged with its key kept. Yields the id as stores hold it."""
        run_id = _storable_id(run_id)
        try:
            yield run_id
        except RunPurged:
            raise
        except RunNotFound:
            purged = await self._store.purged_run(run_id)
            if purged is not None:
                raise RunPurged(purged) from None
            raise

    async def _record(self, run_id: str) -> RunRecord:
        record = await self._store.get_run(_storable_id(run_id))
        if record is not None:
            return record
        purged = await self._store.purged_run(run_id)
        if purged is not None:
            raise RunPurged(purged)
        raise RunNotFound(run_id=run_id)

    async def get(self, run_id: str) -> RunInfo:
        """The run as it is now. Raises RunNotFound for an unknown run, and RunPurged
        (a RunNotFound) for one purged with its idempotency key kept: it says when,
        and how the run had ended."""
        return (await self._record(run_id)).info()

    async def runs(
        self,
        *,
        state: RunState | None = None,
        agent: str | None = None,
        reason: Reason | None = None,
        mode: RunMode | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        search: str | None = None,
        after: RunCursor | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        """Runs newest first, up to ``limit``, matching every filter given: see
        ``RunListing``. ``after`` is ``RunCursor.of`` the last run of the previous page;
        the next page starts strictly after it, so paging neither skips nor repeats a
        run, even among runs created at the same instant or while paging. Raises
        InvalidInput for a limit, time, search or cursor of the wrong kind.
        """
        listing = RunListing(
            state=state,
            agent=agent,
            reason=reason,
            mode=mode,
            created_after=created_after,
            created_before=created_before,
            search=search,
            after=after,
            limit=limit,
        )
        found = await self._store.list_runs(listing)
        return [r.info() for r in found]

    async def run_counts(self) -> dict[RunState, int]:
        """How many runs are in each state, every state named (zero when none is in it)."""
        counted = await self._store.count_runs()
        return {state: counted.get(state, 0) for state in RunState}

    async def dead_letters(
        self, *, reason: Reason | None = None, limit: int = 100
    ) -> list[RunInfo]:
        return await self.runs(state=RunState.DEAD_LETTERED, reason=reason, limit=limit)

    async def redrive(self, run_id: str) -> RunInfo:
        """Requeue a run dead-lettered not_retryable or retries_exhausted, or interrupted_write
        whose journal records its call's outcome, under a new epoch and with its requeue
        count reset. A write interrupted with no recorded outcome needs ``resolve`` instead."""
        async with self._acting_on(run_id) as stored_id:
            record = await self._store.redrive(stored_id)
        self._writer.queued()
        return record.info()

    async def resolve(
        self,
        run_id: str,
        *,
        applied: bool,
        operator: str | None = None,
        note: str | None = None,
        step: int | None = None,
    ) -> RunInfo:
        """Record whether an interrupted write applied; the run then resumes without
        executing that call again. The journal keeps who decided and when.

        ``step`` binds the verdict to the call the operator checked: its journal step
        (``StepInfo.seq``, as ``leaseward show`` prints it). If the run was resolved,
        resumed and interrupted again at another call meanwhile, the verdict is refused
        with OtherCallInterrupted instead of landing on a call nobody checked; an
        operator who looked the call up should always give it.
        """
        if step is not None:
            check_count("step, a journal step number,", step, least=0)
        _check_flag("applied", applied)
        _check_text("operator", operator)
        _check_text("note", note)
        async with self._acting_on(run_id) as stored_id:
            record = await self._store.resolve(
                stored_id,
                applied=applied,
                operator=operator or default_operator(),
                note=note,
                step=step,
            )
        self._writer.queued()
        return record.info()

    async def approve(
        self,
        run_id: str,
        call_id: str | None = None,
        *,
        operator: str | None = None,
        note: str | None = None,
        digest: str | None = None,
    ) -> RunInfo:
        """Approve one call that waits for approval: that call, with exactly the arguments
        its request shows, may then execute once. ``call_id`` may be left out when the run
        waits for one approval only. Once every request of the turn is decided, the run
        goes back to the queue (an interactive one too) and resumes from its journal.

        ``digest`` binds the approval to the arguments the approver was shown: the
        start (8 hex digits or more) of the request's ``arguments_digest``. A request
        of other arguments (the run moved on, and asks for another call, maybe under
        the same call id) is then refused with ArgumentsNotApproved; an approver who
        looked before deciding should always give it.

        Raises RequestNotFound for a call with no request, IllegalTransition for one
        already decided (a second approve changes nothing) or a run no longer waiting,
        and RequestExpired (an IllegalTransition) for one whose expiry passed on the
        store's clock: it is rejected as expired then, as the reaper would have done.
        """
        return await self._decide(run_id, call_id, Decision.APPROVED, operator, note, digest=digest)

    async def reject(
        self,
        run_id: str,
        call_id: str | None = None,
        *,
        reason: str,
        operator: str | None = None,
    ) -> RunInfo:
        """Reject one call that waits for approval: it is never executed, and the model
        gets ``{"error": "rejected by <operator>: <reason>"}`` as its result."""
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput("a rejection needs a reason: the model is told it")
        _check_text("reason", reason)
        return await self._decide(run_id, call_id, Decision.REJECTED, operator, reason)

    async def send_input(
        self,
        run_id: str,
        value: Any,
        *,
        call_id: str | None = None,
        operator: str | None = None,
    ) -> RunInfo:
        """Answer a run waiting for input (``ask_human``): ``value`` (any JSON value)
        becomes the result of that call, and the run resumes."""
        value_json = dump_json(value, what="the answer", limit=MAX_RESULT_BYTES)
        return await self._decide(
            run_id, call_id, Decision.ANSWERED, operator, None, value_json=value_json
        )

    async def _decide(
        self,
        run_id: str,
        call_id: str | None,
        decision: Decision,
        operator: str | None,
        note: str | None,
        *,
        value_json: str | None = None,
        digest: str | None = None,
    ) -> RunInfo:
        if call_id is not None and not isinstance(call_id, str):
            raise InvalidInput(f"call_id must be a string, not {call_id!r}")
        _check_text("operator", operator)
        _check_text("note", note)
        try:
            async with self._acting_on(run_id) as stored_id:
                _, record = await self._store.decide(
                    stored_id,
                    call_id,
                    decision,
                    operator=operator or default_operator(),
                    note=note,
                    value_json=value_json,
                    digest=digest,
                )
        except RequestExpired:
            # Expiring it may have put the run back in the queue, as a reaper pass does.
            self._writer.queued()
            raise
        if record.state is RunState.QUEUED:
            self._writer.queued()
        return record.info()

    async def approvals(self, *, limit: int = 100) -> list[HumanRequest]:
        """The requests that wait for a person (approvals and questions), oldest first."""
        check_limit(limit)
        return await self._store.pending_requests(limit)

    async def requests(self, run_id: str) -> list[HumanRequest]:
        """Every request for a person the run made, decided or not, with who decided."""
        return await self._store.list_requests((await self._record(run_id)).id)

    async def steps(self, run_id: str) -> list[StepInfo]:
        """The run's journal, oldest step first."""
        return await self._store.list_steps((await self._record(run_id)).id)

    async def usage(self, run_id: str) -> Usage:
        """The tokens of the run's provider turns, summed from its journal: each turn is
        counted once, however many attempts and workers the run took."""
        return run_usage(await self.steps(run_id))

    async def wait(self, run_id: str, timeout: float | None = None) -> RunInfo:
        """Wait until the run is terminal; raises WaitTimeout after ``timeout`` seconds.

        The run is read at least once: with ``timeout=0`` this asks whether it has
        finished. A timeout that is negative or not a number raises InvalidInput.

        A run that settles in this process wakes its waiters at once; one that
        settles in another is seen within WAIT_POLL_SECONDS.
        """
        finished: dict[str, RunInfo] = {}
        stored_id = _storable_id(run_id)
        if not await self._wait_for([stored_id], timeout, finished):
            raise WaitTimeout(f"run {run_id} did not finish within {timeout} seconds")
        return finished[stored_id]

    async def wait_all(self, run_ids: Sequence[str], timeout: float | None = None) -> list[RunInfo]:
        """Wait until every one of the runs is terminal; their infos, in the order given.

        The runs are read together: all of them once, then those that settled in this
        process as they do, and every WAIT_POLL_SECONDS those of the rest that finished
        elsewhere. Raises RunNotFound (RunPurged for a purged run) for an id with no
        run, and WaitTimeout after ``timeout`` seconds, saying how many had not finished.
        """
        if not isinstance(run_ids, Iterable):
            raise InvalidInput(f"wait_all takes a sequence of run ids, not {run_ids!r}")
        if isinstance(run_ids, str):
            raise InvalidInput(
                f"wait_all takes a sequence of run ids, not one id ({run_ids!r}); "
                "wait() waits for a single run"
            )
        stored_ids = [_storable_id(run_id) for run_id in run_ids]
        wanted = list(dict.fromkeys(stored_ids))
        finished: dict[str, RunInfo] = {}
        if not await self._wait_for(wanted, timeout, finished):
            left = len(wanted) - len(finished)
            raise WaitTimeout(
                f"{left} of {len(wanted)} runs did not finish within {timeout} seconds"
            )
        return [finished[stored_id] for stored_id in stored_ids]

    async def _wait_for(
        self, run_ids: list[str], timeout: float | None, finished: dict[str, RunInfo]
    ) -> bool:
        """Put each run's info in ``finished`` as it is seen terminal; whether all were
        before ``timeout``. The ids are as the store holds them (``_storable_id``)."""
        _check_timeout(timeout)
        pending = list(run_ids)
        with self._wakeups.watching(pending) as settled, anyio.move_on_after(timeout):
            # With no time left the runs are still read once: a timeout of 0 asks whether
            # they have finished, and one that has is no timeout.
            with anyio.CancelScope(shield=timeout == 0):
                records = {record.id: record for record in await self._store.get_runs(pending)}
                for run_id in pending:
                    record = records.get(run_id) or await self._record(run_id)
                    if record.state.terminal:
                        finished[run_id] = record.info()
            poll_at = anyio.current_time() + WAIT_POLL_SECONDS
            while True:
                pending = [run_id for run_id in pending if run_id not in finished]
                if not pending:
                    return True
                with anyio.move_on_after(max(0.0, poll_at - anyio.current_time())):
                    await settled.wait()
                # Taken before the read: a settlement landing after it is seen next time.
                seen_here = settled.take()
                look_at = [run_id for run_id in pending if run_id in seen_here]
                if anyio.current_time() >= poll_at:
                    look_at, poll_at = pending, anyio.current_time() + WAIT_POLL_SECONDS
                for record in await self._store.get_runs(look_at, finished_only=True):
                    finished[record.id] = record.info()
        return False

    async def workers(self) -> list[WorkerInfo]:
        """The registered workers, live, draining and gone, most recently heard from first."""
        return await self._store.list_workers()

    async def served_agents(self) -> frozenset[str]:
        """The agents some live worker serves, not draining: a queued run of any other
        waits for one."""
        return frozenset(agent for w in await self.workers() if w.serving for agent in w.agents)

    async def purge(
        self,
        *,
        finished_before: timedelta,
        state: RunState | None = None,
        include_dead_letters: bool = False,
        dry_run: bool = False,
        batch_runs: int = PURGE_BATCH_RUNS,
    ) -> PurgeResult:
        """Delete finished runs and their journals, those that finished more than
        ``finished_before`` ago (on the store's clock), ``batch_runs`` per transaction.

        Only terminal runs are ever deleted, and dead letters (which wait for an
        operator) only with ``include_dead_letters``. ``state`` narrows the purge to
        one terminal state. With ``dry_run`` nothing changes: the result counts what
        would be deleted. The idempotency key of a deleted run is kept, with how the
        run ended and when it was purged: only ``forget_keys`` deletes keys.
        """
        _check_flag("include_dead_letters", include_dead_letters)
        _check_flag("dry_run", dry_run)
        if not isinstance(finished_before, timedelta) or finished_before <= timedelta(0):
            raise InvalidInput(
                f"finished_before must be a positive timedelta, not {finished_before!r}"
            )
        state = member_of(RunState, "state", state)
        if state is not None and not state.terminal:
            raise InvalidInput(f"only finished runs can be purged; {state.value} runs are not")
        if state is RunState.DEAD_LETTERED and not include_dead_letters:
            raise InvalidInput(
                "dead-lettered runs wait for an operator: purging them needs include_dead_letters"
            )
        check_count("batch_runs", batch_runs)
        states = (
            [state]
            if state is not None
            else [
                s
                for s in RunState
                if s.terminal and (include_dead_letters or s is not RunState.DEAD_LETTERED)
            ]
        )
        return await self._store.purge_finished(
            states, finished_before.total_seconds(), dry_run=dry_run, batch_runs=batch_runs
        )

    async def forget_keys(
        self,
        *,
        older_than: timedelta,
        dry_run: bool = False,
        batch_keys: int = PURGE_BATCH_RUNS,
        after_purge: PurgeResult | None = None,
    ) -> ForgetKeysResult:
        """Forget the idempotency keys of purged runs that were first used more than
        ``older_than`` ago (on the store's clock), ``batch_keys`` per transaction.

        A purge keeps every key, so that a submit retried after its run was purged
        still gets that run's id instead of making a second run (a second charge).
        Once forgotten, a submit with the key creates a new run: forget only keys
        no client can still be retrying. The key of a run still stored is never
        forgotten. With ``dry_run`` nothing changes: the result counts the keys, and
        with ``after_purge`` (the result of a dry-run ``purge`` made just before, as
        one cleanup would make both) also those of the runs that purge would delete.
        """
        _check_flag("dry_run", dry_run)
        if after_purge is not None and not isinstance(after_purge, PurgeResult):
            raise InvalidInput(f"after_purge must be a purge's PurgeResult, not {after_purge!r}")
        if not isinstance(older_than, timedelta) or older_than <= timedelta(0):
            raise InvalidInput(f"older_than must be a positive timedelta, not {older_than!r}")
        check_count("batch_keys", batch_keys)
        return await self._store.forget_keys(
            older_than.total_seconds(),
            dry_run=dry_run,
            batch_keys=batch_keys,
            after_purge=after_purge,
        )

    async def cancel(self, run_id: str) -> bool:
        """Cancel a run: at once if it is queued or waits for a person, at its next step
        boundary if it runs.

        Returns False when the run had already finished.
        """
        async with self._acting_on(run_id) as stored_id:
            outcome = await self._writer.cancel_run(stored_id)
        if outcome is CancelOutcome.CANCELLED:
            self._wakeups.settled(stored_id)
        return outcome is not CancelOutcome.ALREADY_FINISHED
