"""leaseward's side of the peer comparison: N concurrent runs of K read-only tool steps.

Like ``bench/steps.py``'s ``read`` variant: a ``ScriptedProvider`` agent asks
for one call of a read-only tool per turn, K times, then answers. A run
journals 2K+1 rows (K+1 provider steps, K tool steps).

Untimed: ``Runtime.open`` on a fresh SQLite file (WAL, ``synchronous=FULL``
in the store URL), which creates the schema and starts the actors. Timed,
from before the first submit until every run has finished: N ``rt.submit``
calls at once in a task group (one call per run, as an application makes
them), then ``rt.wait`` on each run. Afterwards, untimed, the journal rows
are counted with ``rt.steps``.

Run with leaseward's venv (``.venv/bin/python``); prints one JSON line.
"""

from __future__ import annotations

import time
from importlib.metadata import version

import anyio
from common import build_parser, check_args, emit, journal_mode, result

from leaseward import (
    Agent,
    App,
    ProviderReply,
    ProviderRequest,
    Role,
    RunState,
    Runtime,
    ScriptedProvider,
    StepKind,
    StepStatus,
    ToolCall,
    ToolContext,
    tool,
)

AGENT = "bench"
WAIT_TIMEOUT_SECONDS = 600.0
POLL_INTERVAL_SECONDS = 0.05


@tool
async def lookup(ctx: ToolContext, key: str) -> str:
    """A read-only tool that does no work, so the journal is what is measured."""
    return key


def make_app(steps_per_run: int) -> App:
    def reply(request: ProviderRequest) -> ProviderReply:
        turn = sum(1 for message in request.messages if message.role is Role.ASSISTANT)
        if turn < steps_per_run:
            return ProviderReply(
                tool_calls=(ToolCall(lookup.name, {"key": f"k{turn}"}, f"call-{turn}"),)
            )
        return ProviderReply(text="done")

    agent = Agent(AGENT, ScriptedProvider(reply), tools=[lookup], max_steps=steps_per_run + 1)
    return App(agents=[agent])


async def main() -> None:
    parser = build_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--no-group-commit",
        action="store_true",
        help="Runtime.open(group_commit=False): one commit per journal row",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=POLL_INTERVAL_SECONDS,
        help="the Runtime's poll_interval_seconds (default: %(default)s, as bench/steps.py)",
    )
    args = parser.parse_args()
    check_args(args)
    group_commit = not args.no_group_commit
    url = f"sqlite:///{args.db.resolve()}?synchronous=full"
    app = make_app(args.steps)
    run_ids: list[str] = [""] * args.concurrency

    opened = time.perf_counter()
    async with Runtime.open(
        url,
        app,
        concurrency=args.concurrency,
        poll_interval_seconds=args.poll_interval,
        group_commit=group_commit,
    ) as rt:
        open_seconds = time.perf_counter() - opened

        async def submit(index: int) -> None:
            run_ids[index] = await rt.submit(AGENT, {"n": index})

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for index in range(args.concurrency):
                tg.start_soon(submit, index)
        submitted = time.perf_counter() - started
        # One waiter at a time: a waiter also reads its run every half second (for
        # settlements made elsewhere), and N of them reading the store at once would
        # compete with the runs for it. The last run to finish ends the window anyway.
        infos = [await rt.wait(run_id, timeout=WAIT_TIMEOUT_SECONDS) for run_id in run_ids]
        seconds = time.perf_counter() - started

        stats = rt.supervisor.persister.stats
        rows = 0
        tool_rows = 0
        for run_id in run_ids:
            journal = await rt.steps(run_id)
            rows += len(journal)
            tool_rows += sum(
                1
                for step in journal
                if step.kind is StepKind.TOOL and step.status is StepStatus.SUCCEEDED
            )
        persister = {
            "commits": stats.items,
            "transactions": stats.batches,
            "largest_batch": stats.largest_batch,
        }

    mode = "group commit" if group_commit else "one commit per row"
    emit(
        result(
            system="leaseward" if group_commit else "leaseward-no-group-commit",
            args=args,
            completed=sum(1 for info in infos if info.state is RunState.COMPLETED),
            steps=tool_rows,
            rows=rows,
            seconds=seconds,
            config={
                "version": version("leaseward"),
                "store": "sqlite, ?synchronous=full",
                "journal_mode": journal_mode(args.db),
                "synchronous": "FULL (store URL)",
                "group_commit": group_commit,
                "durable": f"journal rows (provider and tool steps), {mode}",
            },
            extra={
                "open_seconds": open_seconds,
                "submit_seconds": submitted,
                "persister": persister,
            },
        )
    )


if __name__ == "__main__":
    anyio.run(main)
