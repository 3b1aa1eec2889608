"""LangGraph's side of the peer comparison: N concurrent threads of K tool calls.

The graph is the usual tool loop: a ``model`` node with a scripted "model"
(an ``AIMessage`` asking for one call of a read-only ``lookup`` tool per
turn, K times, then a final answer) and a prebuilt ``ToolNode`` that runs the
tool, joined by ``tools_condition``. State is ``MessagesState``.

The checkpointer is ``AsyncSqliteSaver`` on one aiosqlite connection to a
fresh SQLite file, created here in WAL mode, with ``PRAGMA synchronous=FULL``
set on that connection (the saver sets WAL itself but not ``synchronous``).
Every ``ainvoke`` passes ``durability="sync"``: each super-step's checkpoint
and writes are committed before the next step starts.

The wait for a durable write is timed inside the checkpointer (a subclass of
``AsyncSqliteSaver``): each ``aput`` (a super-step's checkpoint, which with
``durability="sync"`` the graph awaits before it starts the next super-step)
and each ``aput_writes`` (a task's channel writes), from the call until its
commit returned, waiting for the saver's connection lock included.

Untimed: the connection, ``saver.setup()`` (the schema) and compiling the
graph. Timed, from before the first ``ainvoke`` until every thread has
returned: N ``ainvoke`` calls at once with ``asyncio.gather``, each with its
own ``thread_id``.

Run with the peers' venv (``bench/.venv-peers/bin/python``); prints one JSON line.
"""

from __future__ import annotations

import asyncio
import time
from importlib.metadata import version
from typing import Any, Literal

import aiosqlite
from common import (
    build_parser,
    check_args,
    count_rows,
    emit,
    journal_mode,
    prepare_wal_file,
    waits,
)
from common import result as make_result
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
TABLES = ("checkpoints", "writes")


class TimedSaver(AsyncSqliteSaver):
    """The saver, timing each durable write the graph hands it."""

    seconds: list[float]

    async def aput(self, config: RunnableConfig, *args: Any, **kwargs: Any) -> RunnableConfig:
        started = time.perf_counter()
        try:
            saved: RunnableConfig = await super().aput(config, *args, **kwargs)
            return saved
        finally:
            self.seconds.append(time.perf_counter() - started)

    async def aput_writes(self, config: RunnableConfig, *args: Any, **kwargs: Any) -> None:
        started = time.perf_counter()
        try:
            await super().aput_writes(config, *args, **kwargs)
        finally:
            self.seconds.append(time.perf_counter() - started)


@tool
async def lookup(key: str) -> str:
    """A read-only lookup that does no work, so the checkpoints are what is measured."""
    return key


def build_graph(steps: int, saver: TimedSaver) -> Any:
    async def model(state: MessagesState) -> dict[str, list[AIMessage]]:
        turn = sum(1 for message in state["messages"] if isinstance(message, AIMessage))
        if turn < steps:
            call = {"name": "lookup", "args": {"key": f"k{turn}"}, "id": f"call-{turn}"}
            return {"messages": [AIMessage(content="", tool_calls=[call])]}
        return {"messages": [AIMessage(content="done")]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=saver)


async def pragma(connection: aiosqlite.Connection, name: str) -> Any:
    async with connection.execute(f"PRAGMA {name}") as cursor:
        row = await cursor.fetchone()
    assert row is not None
    return row[0]


async def main() -> None:
    args = build_parser(__doc__.splitlines()[0]).parse_args()
    check_args(args)
    prepare_wal_file(args.db)
    durability: Literal["sync"] = "sync"

    async with aiosqlite.connect(args.db) as connection:
        default = SYNCHRONOUS_NAMES.get(await pragma(connection, "synchronous"), "unknown")
        await connection.execute("PRAGMA synchronous=FULL")
        synchronous = SYNCHRONOUS_NAMES.get(await pragma(connection, "synchronous"), "unknown")
        saver = TimedSaver(connection)
        saver.seconds = []
        opened = time.perf_counter()
        await saver.setup()
        app = build_graph(args.steps, saver)
        open_seconds = time.perf_counter() - opened

        async def run_thread(index: int) -> dict[str, Any]:
            state: dict[str, Any] = await app.ainvoke(
                {"messages": [HumanMessage(content=f"run {index}")]},
                {"configurable": {"thread_id": f"thread-{index}"}, "recursion_limit": 1000},
                durability=durability,
            )
            return state

        started = time.perf_counter()
        states = await asyncio.gather(*(run_thread(i) for i in range(args.concurrency)))
        seconds = time.perf_counter() - started

    tool_results = [
        sum(1 for message in state["messages"] if isinstance(message, ToolMessage))
        for state in states
    ]
    finished = [
        isinstance(state["messages"][-1], AIMessage) and state["messages"][-1].content == "done"
        for state in states
    ]
    counts = count_rows(args.db, TABLES)
    emit(
        make_result(
            system="langgraph",
            args=args,
            completed=sum(finished),
            steps=sum(tool_results),
            rows=sum(counts.values()),
            seconds=seconds,
            config={
                "version": version("langgraph"),
                "checkpointer": f"AsyncSqliteSaver {version('langgraph-checkpoint-sqlite')}",
                "journal_mode": journal_mode(args.db),
                "synchronous_default": default,
                "synchronous": synchronous,
                "durability": durability,
                "durable": "checkpoints (one per super-step) and writes (each task's "
                "channel writes), one commit each",
            },
            extra={
                "open_seconds": open_seconds,
                "tables": counts,
                "checkpoints_per_second": counts["checkpoints"] / seconds if seconds else 0.0,
                "wait": waits(
                    saver.seconds, "each AsyncSqliteSaver.aput and .aput_writes, lock included"
                ),
            },
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
