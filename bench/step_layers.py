"""The event loop's CPU for a durable step, layer by layer: where a step's time goes.

``bench/step_cost.py`` divides a step's CPU by area of the code; this divides the
event loop thread's CPU (``time.thread_time()``) by layer of the runtime, each
measured alone over the same work: N runs (default 100) of K provider turns
(default 10) that each ask for one call of a tool that does no work, read-only
(``read``) or NON_IDEMPOTENT_WRITE (``write``: an intent committed before the
call, its outcome after), scripted as in ``step_cost.py``.

1. ``machine``: the runs' ``RunMachine``s alone, fed by hand what the actor would
   feed them (the provider's and the tool's answers, taken from their first step as
   the actor takes them, every commit stored, the clock read at every admission),
   one event per machine in turn, so that N runs' state is touched as the runtime
   touches it.
2. ``actor``: one ``RunActor`` a run, all N in a task group, whose store answers
   every commit at once (a future already done): the actor's own work, with the
   machine's, and no task ever waits.
3. ``actor, answers next turn``: the same, with every commit answered on the next
   turn of the event loop, as a Persister answers: a task waits at every commit.
4. ``runtime``: ``Runtime.open`` on a fresh SQLite file (WAL, ``synchronous=FULL``),
   N runs submitted together and waited for (``step_cost.run_workload``): the above,
   with the Persister, SQLite's executor on the loop, submits, claims and
   settlements.

Each layer's figure less the one above it is what that layer adds. Layers 1-3 have
no submit, claim or store; layer 4's figure divides its runs' whole cost (what
``step_cost.py`` calls the run overhead included) by their steps. The layers are
interleaved over the repetitions; the least and the median of each are printed (what
else the machine runs only adds to a figure, so the least is the estimate). Every
layer runs with CPython's collector as an open Runtime sets it
(``leaseward.collector``), or, with ``--default-collector``, as the process has it.
This is a benchmark: it asserts nothing about time.

    .venv/bin/python bench/step_layers.py
    .venv/bin/python bench/step_layers.py --runs 100 --turns 10 --repetitions 5
    .venv/bin/python bench/step_layers.py --default-collector
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from collections.abc import Awaitable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import anyio
from step_cost import BY_NAME, Workload, make_app, run_workload

from leaseward import Agent, App
from leaseward.actors import LeaseKeeper, Metrics, RunActor, RunSettings
from leaseward.actors.first_step import Finished, first_step
from leaseward.actors.mailbox import Reply
from leaseward.collector import collector_tuned
from leaseward.runtime import machine as m
from leaseward.runtime.clock import SystemClock
from leaseward.runtime.commits import CommitOutcome, Stored
from leaseward.runtime.human_requests import HumanRequest
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import RecoveryPolicy, RunMode, RunState
from leaseward.runtime.runs import RunRecord
from leaseward.storage import BatchItem

LEASE_SECONDS = 300.0
ADMISSION_SECONDS = 5.0
LAYERS = ("machine", "actor", "actor, answers next turn", "runtime")
KINDS = {"read": "read-1", "write": "write-1"}


def claimed_run(index: int) -> RunRecord:
    """A run as a claim returns it: epoch 1, so its machine starts without reading a journal."""
    return RunRecord(
        id=f"run-{index}",
        agent="bench",
        mode=RunMode.QUEUED,
        state=RunState.RUNNING,
        reason=None,
        failure_class=None,
        input={"n": index},
        result=None,
        error=None,
        epoch=1,
        requeues=0,
        lease_owner="bench",
        lease_expires_at=None,
        available_at=0.0,
        cancel_requested=False,
        created_at=0.0,
        updated_at=0.0,
        finished_at=None,
    )


def answer_of(agent: Agent, action: m.Command, clock: SystemClock) -> m.MachineEvent:
    """What the actor would feed back for ``action``, with a store that stores everything."""
    if isinstance(action, m.AskProvider):
        replied = first_step(agent.provider.complete(action.request))
        assert isinstance(replied, Finished), "the scripted provider answers at once"
        return m.ProviderReplied(replied.value, 0.0)
    if isinstance(action, m.CheckAdmission):
        return m.AdmissionCheck(now=clock.monotonic(), wall=clock.now())
    if isinstance(action, m.Commit):
        return m.Committed(Stored(), clock.monotonic())
    if isinstance(action, m.CallTool):
        bound = agent.tools.get(action.tool)
        assert bound is not None
        returned = first_step(bound.implementation(None, action.arguments))  # type: ignore[arg-type]
        assert isinstance(returned, Finished), "the bench's tools answer at once"
        return m.ToolReturned(returned.value)
    raise SystemExit(f"the machine asked for {type(action).__name__}, which this bench lacks")


def machines_alone(app: App, runs: int) -> float:
    """Loop-thread CPU seconds for ``runs`` machines fed one event each in turn."""
    agent = app.agents[0]
    clock = SystemClock()
    started = time.thread_time()
    going: list[tuple[m.RunMachine, tuple[m.Command, ...]]] = []
    for index in range(runs):
        machine = m.RunMachine.for_run(
            claimed_run(index),
            agent,
            lease_seconds=LEASE_SECONDS,
            admission_seconds=ADMISSION_SECONDS,
            lease_deadline=clock.monotonic() + LEASE_SECONDS,
            policy=RecoveryPolicy(),
        )
        # As the actor sets it when neither logs at info nor a trace are watching.
        machine.observing = False
        going.append((machine, machine.start()))
    while going:
        still: list[tuple[m.RunMachine, tuple[m.Command, ...]]] = []
        for machine, commands in going:
            action = commands[-1]
            if isinstance(action, m.Stop):
                continue
            still.append((machine, machine.feed(answer_of(agent, action, clock))))
        going = still
    return time.thread_time() - started


async def actors_alone(app: App, runs: int, *, answer_next_turn: bool) -> float:
    """Loop-thread CPU seconds for ``runs`` RunActors whose commits are all stored."""
    agent = app.agents[0]
    clock = SystemClock()
    loop = asyncio.get_running_loop()

    async def renew(items: Any) -> tuple[CommitOutcome, ...]:
        return tuple(Stored() for _ in items)

    def persist(item: BatchItem) -> Awaitable[CommitOutcome]:
        reply: Reply[CommitOutcome] = Reply()
        if answer_next_turn:
            loop.call_soon(reply.answer, Stored())
        else:
            reply.answer(Stored())
        return reply

    async def no_steps(run_id: str) -> list[StepInfo]:
        return []

    async def no_requests(run_id: str) -> list[HumanRequest]:
        return []

    keeper = LeaseKeeper(
        renew, clock, lease_seconds=LEASE_SECONDS, margin_seconds=ADMISSION_SECONDS / 2
    )
    # One for all, as a Supervisor hands its own to every actor.
    metrics = Metrics()
    actors = [
        RunActor(
            claimed_run(index),
            agent,
            persist=persist,
            load_steps=no_steps,
            load_requests=no_requests,
            settings=RunSettings(lease_seconds=LEASE_SECONDS),
            clock=clock,
            worker_id="bench",
            lease_deadline=clock.monotonic() + LEASE_SECONDS,
            keeper=keeper,
            metrics=metrics,
        )
        for index in range(runs)
    ]
    started = time.thread_time()
    async with anyio.create_task_group() as group:
        for actor in actors:
            group.start_soon(actor.run)
    return time.thread_time() - started


async def measure(
    layer: str, workload: Workload, args: argparse.Namespace, directory: Path
) -> float:
    """Loop-thread CPU µs per step of ``layer`` for ``workload``."""
    runs: int = args.runs
    turns: int = args.turns
    app = make_app(workload, turns)
    tuned: bool = not args.default_collector
    # What the layer measured before it left behind is not this layer's to collect.
    gc.collect()
    seconds: float
    # The collector as an open Runtime sets it, for every layer alike.
    with collector_tuned() if tuned else nullcontext():
        if layer == "machine":
            seconds = machines_alone(app, runs)
        elif layer == "actor":
            seconds = await actors_alone(app, runs, answer_next_turn=False)
        elif layer == "actor, answers next turn":
            seconds = await actors_alone(app, runs, answer_next_turn=True)
        else:
            sample = await run_workload(
                workload, runs=runs, turns=turns, directory=directory, tune_collector=tuned
            )
            seconds = sample.loop_cpu_seconds
    return seconds / (runs * turns) * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="concurrent runs (default 100)")
    parser.add_argument("--turns", type=int, default=10, help="tool steps a run (default 10)")
    parser.add_argument("--repetitions", type=int, default=5, help="(default 5)")
    parser.add_argument(
        "--default-collector",
        action="store_true",
        help="CPython's collector thresholds as the process has them, in every layer "
        "(Runtime.open(tune_collector=False)); by default as an open Runtime sets them",
    )
    args = parser.parse_args()
    if min(args.runs, args.turns, args.repetitions) < 1:
        parser.error("--runs, --turns and --repetitions must be at least 1")
    figures: dict[tuple[str, str], list[float]] = {}
    measurements: list[tuple[str, str]] = [(kind, layer) for kind in KINDS for layer in LAYERS]
    print(
        f"event loop CPU per durable step, by layer: N={args.runs} runs of K={args.turns} "
        f"steps, {args.repetitions} repetitions, interleaved",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="step-layers-") as directory:
        for repetition in range(args.repetitions):
            for kind, layer in measurements:
                value = await measure(layer, BY_NAME[KINDS[kind]], args, Path(directory))
                figures.setdefault((kind, layer), []).append(value)
            done = ", ".join(
                f"{kind} {layer} {figures[(kind, layer)][-1]:.0f}" for kind, layer in measurements
            )
            print(f"  rep {repetition + 1}: {done}", flush=True)
    print()
    print(
        f"{'layer':28} {'read: min':>10} {'added':>7} {'median':>7} "
        f"{'write: min':>11} {'added':>7} {'median':>7}"
    )
    print("-" * 83)
    previous: dict[str, float] = {}
    for layer in LAYERS:
        cells = []
        for kind in KINDS:
            values = figures[(kind, layer)]
            least = min(values)
            added = least - previous.get(kind, 0.0)
            previous[kind] = least
            cells.append(f"{least:10.1f} {added:+7.1f} {statistics.median(values):7.1f}")
        print(f"{layer:28} {cells[0]} {' ' + cells[1]}")
    print(
        "\nµs of the event loop's CPU a step. The machine is shared: what else runs only adds"
        "\nto a figure, so the least of the repetitions is the estimate, and 'added' is a"
        "\nlayer's least less the one above it; the median is there for the spread. runtime"
        "\nincludes submits, claims and settlements (the run overhead)."
    )


if __name__ == "__main__":
    anyio.run(main)
