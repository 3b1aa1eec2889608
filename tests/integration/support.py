"""Test support: a fault-injecting wrapper around the real store, and small agent kits."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import anyio
import structlog
from leaseward.runtime.commits import CommitOutcome, Refused, Stored
from leaseward.runtime.conversation import normalize_reply, reply_to_json
from leaseward.runtime.encoding import dump_json
from leaseward.runtime.errors import LeasewardError
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import RunMode, StepKind, StepStatus
from leaseward.runtime.retention import PurgeResult
from leaseward.runtime.runs import NewRun, RunRecord
from leaseward.runtime.workers import WorkerInfo, WorkerRegistration
from leaseward.storage import (
    BatchItem,
    CancelOutcome,
    ExpiredRequest,
    ExpiredRun,
    LeaseMark,
    SQLStore,
    WriteBatch,
    WriteResults,
)
from leaseward.storage.protocol import Settlement

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    ToolEffect,
    tool,
)
from leaseward.client import new_run_id

Fault = Callable[[BatchItem], bool]


T = TypeVar("T")


async def _result(request: Awaitable[T]) -> T | LeasewardError:
    try:
        return await request
    except LeasewardError as exc:
        return exc


class FaultyStore:
    """The real store, except that batch items a fault picks are refused as a store error.

    Refused items are never handed to the real store, exactly as if their
    transaction had failed; the others in the same batch commit normally.
    """

    def __init__(self, inner: SQLStore, fault: Fault | None = None) -> None:
        self.inner = inner
        self.fault: Fault = fault or (lambda item: False)
        self.refused: list[BatchItem] = []
        self.crash_next_batch = False

    async def migrate(self) -> int:
        return await self.inner.migrate()

    async def create_run(self, new: NewRun) -> RunRecord:
        return await self.inner.create_run(new)

    async def claim_runs(
        self,
        worker_id: str,
        limit: int,
        lease_seconds: float,
        agents: Sequence[str],
        exclude: Sequence[str] = (),
    ) -> list[RunRecord]:
        return await self.inner.claim_runs(worker_id, limit, lease_seconds, agents, exclude)

    async def commit(self, batch: WriteBatch) -> WriteResults:
        """Each request of the batch goes through this wrapper's own method for its kind,
        where the faults are (and where subclasses add theirs): journal items through
        commit_batch, claims through claim_runs, and so on."""
        return WriteResults(
            new_runs=tuple([await _result(self.create_run(new)) for new in batch.new_runs]),
            cancels=tuple([await _result(self.request_cancel(run_id)) for run_id in batch.cancels]),
            items=tuple(await self.commit_batch(batch.items) if batch.items else ()),
            reaps=tuple([await _result(self.reap(r.expired, r.settlement)) for r in batch.reaps]),
            claims=tuple(
                [
                    await _result(
                        self.claim_runs(c.worker_id, c.limit, c.lease_seconds, c.agents, c.exclude)
                    )
                    for c in batch.claims
                ]
            ),
        )

    async def commit_batch(self, items: Sequence[BatchItem]) -> list[CommitOutcome]:
        if self.crash_next_batch:
            self.crash_next_batch = False
            raise RuntimeError("injected crash inside the store driver")
        passed = [item for item in items if not self.fault(item)]
        committed = iter(await self.inner.commit_batch(passed) if passed else [])
        outcomes: list[CommitOutcome] = []
        for item in items:
            if item in passed:
                outcomes.append(next(committed))
            else:
                self.refused.append(item)
                outcomes.append(Refused("injected disk I/O error"))
        return outcomes

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self.inner.get_run(run_id)

    async def list_runs(self, **kwargs: Any) -> list[RunRecord]:
        return await self.inner.list_runs(**kwargs)

    async def count_runs(self) -> Any:
        return await self.inner.count_runs()

    async def list_steps(self, run_id: str) -> Any:
        return await self.inner.list_steps(run_id)

    async def request_cancel(self, run_id: str) -> CancelOutcome:
        return await self.inner.request_cancel(run_id)

    async def running_leases(self) -> list[LeaseMark]:
        return await self.inner.running_leases()

    async def expired_runs(self, leases: Sequence[LeaseMark]) -> list[ExpiredRun]:
        return await self.inner.expired_runs(leases)

    async def reap(self, expired: ExpiredRun, settlement: Settlement) -> bool:
        return await self.inner.reap(expired, settlement)

    async def redrive(self, run_id: str) -> RunRecord:
        return await self.inner.redrive(run_id)

    async def resolve(self, run_id: str, **kwargs: Any) -> RunRecord:
        return await self.inner.resolve(run_id, **kwargs)

    async def list_requests(self, run_id: str) -> list[HumanRequest]:
        return await self.inner.list_requests(run_id)

    async def pending_requests(self, limit: int = 100) -> list[HumanRequest]:
        return await self.inner.pending_requests(limit)

    async def decide(self, *args: Any, **kwargs: Any) -> tuple[HumanRequest, RunRecord]:
        return await self.inner.decide(*args, **kwargs)

    async def expire_requests(self, limit: int) -> list[ExpiredRequest]:
        return await self.inner.expire_requests(limit)

    async def register_worker(self, worker: WorkerRegistration) -> None:
        await self.inner.register_worker(worker)

    async def heartbeat_worker(self, worker: WorkerRegistration) -> None:
        await self.inner.heartbeat_worker(worker)

    async def remove_worker(self, worker_id: str) -> None:
        await self.inner.remove_worker(worker_id)

    async def list_workers(self) -> list[WorkerInfo]:
        return await self.inner.list_workers()

    async def purge_finished(self, *args: Any, **kwargs: Any) -> PurgeResult:
        return await self.inner.purge_finished(*args, **kwargs)

    async def purged_run(self, run_id: str) -> Any:
        return await self.inner.purged_run(run_id)

    async def forget_keys(self, *args: Any, **kwargs: Any) -> Any:
        return await self.inner.forget_keys(*args, **kwargs)

    async def wait_for_work(self, timeout: float) -> None:
        await self.inner.wait_for_work(timeout)

    async def aclose(self) -> None:
        await self.inner.aclose()


def settles_tool(name: str) -> Fault:
    """Picks items that record the outcome of a started call of tool ``name``."""
    return lambda item: any(s.settles and s.tool == name for s in item.steps)


def records_tool(name: str, status: StepStatus | None = None) -> Fault:
    return lambda item: any(
        s.kind is StepKind.TOOL and s.tool == name and (status is None or s.status is status)
        for s in item.steps
    )


class Calls:
    """Counts tool executions, with what each one was given."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def record(self, ctx: ToolContext, **arguments: Any) -> None:
        self.seen.append(
            {
                "run_id": ctx.run_id,
                "epoch": ctx.epoch,
                "call_id": ctx.call_id,
                "key": ctx.idempotency_key,
                **arguments,
            }
        )

    def __len__(self) -> int:
        return len(self.seen)


def one_call_agent(
    name: str,
    effect: ToolEffect,
    calls: Calls,
    *,
    tool_name: str = "act",
    timeout_seconds: float = 10.0,
    body: Callable[[ToolContext], Any] | None = None,
) -> Agent:
    """An agent that calls ``tool_name`` once with amount=5, then answers "done"."""

    @tool(name=tool_name, effect=effect, timeout_seconds=timeout_seconds)
    async def act(ctx: ToolContext, amount: int) -> dict[str, int]:
        calls.record(ctx, amount=amount)
        if body is not None:
            await body(ctx)
        return {"applied": amount}

    provider = ScriptedProvider(
        [
            ProviderReply(tool_calls=[ToolCall(tool_name, {"amount": 5}, "call-1")]),
            ProviderReply(text="done"),
        ]
    )
    return Agent(name, provider, tools=[act])


def app_of(*agents: Agent) -> App:
    return App(agents)


def provider_step(seq: int, reply: ProviderReply) -> StepWrite:
    return StepWrite(
        seq=seq,
        kind=StepKind.PROVIDER,
        status=StepStatus.SUCCEEDED,
        output_json=dump_json(reply_to_json(normalize_reply(reply, seq))),
    )


async def until(condition: Callable[[], Awaitable[bool] | bool], timeout: float) -> None:
    """Poll ``condition`` (sync or async) until it holds; fail after ``timeout`` seconds."""
    with anyio.fail_after(timeout):
        for _ in itertools.count():
            held = condition()
            if await held if isinstance(held, Awaitable) else held:
                return
            await anyio.sleep(0.005)


def events(captured: list[dict[str, Any]]) -> list[str]:
    return [entry["event"] for entry in captured]


@contextmanager
def capture_logs() -> Iterator[list[dict[str, Any]]]:
    """structlog's ``capture_logs`` with leaseward's loggers open down to DEBUG: they
    emit only what their ``logging`` level lets through, and that is all it can see."""
    logger = logging.getLogger("leaseward")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        with structlog.testing.capture_logs() as logs:
            yield logs
    finally:
        logger.setLevel(level)


async def ghost_claims(store: SQLStore, agent: str, steps: tuple[StepWrite, ...]) -> str:
    """A worker that claims a run, journals ``steps`` under a tiny lease, and dies."""
    run_id = (await store.create_run(queued_run(agent))).id
    [claimed] = await store.claim_runs("ghost:1", 1, 0.01, [agent])
    [outcome] = await store.commit_batch(
        [BatchItem(run_id, claimed.epoch, steps=steps, lease_seconds=0.01)]
    )
    assert isinstance(outcome, Stored)
    return run_id


def queued_run(agent: str) -> NewRun:
    return NewRun(id=new_run_id(), agent=agent, mode=RunMode.QUEUED, input_json='"hi"')


def intent(seq: int, effect: ToolEffect, key: str) -> StepWrite:
    return StepWrite(
        seq=seq,
        kind=StepKind.TOOL,
        status=StepStatus.STARTED,
        tool="charge",
        call_id="call-1",
        effect=effect,
        idempotency_key=key,
        arguments_json='{"amount":5}',
    )
