"""A process that submits one keyed run from several connections at once, on a signal.

Usage: keyed_submitter.py STORE_URL KEY CONNECTIONS
Opens CONNECTIONS clients, prints "ready", waits for a line on stdin, then submits
agent "mailer" with input {"to": "a@example.com"} and KEY from every client at
once and prints the run id each one got, one per line.
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack

import anyio

from leaseward import Client


async def main(url: str, key: str, connections: int) -> None:
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client.open(url)) for _ in range(connections)]
        print("ready", flush=True)
        # Both processes are released together, so their submits meet in the store.
        await anyio.to_thread.run_sync(sys.stdin.readline)
        ids: list[str] = []

        async def submit(client: Client) -> None:
            ids.append(await client.submit("mailer", {"to": "a@example.com"}, idempotency_key=key))

        async with anyio.create_task_group() as group:
            for client in clients:
                group.start_soon(submit, client)
    print("\n".join(ids), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
