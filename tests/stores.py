"""Stores made ready for a client, which never creates one."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from leaseward.storage import open_store


async def _create(url: str) -> None:
    store = await open_store(url)
    await store.aclose()


def created(url: str) -> str:
    """``url``, once it names a leaseward store, created as a Runtime or a daemon creates it.

    Synchronous, on an event loop of its own in a thread, so that sync fixtures and async
    tests alike can call it."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _create(url)).result()
    return url
