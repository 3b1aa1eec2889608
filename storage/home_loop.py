"""The event loop a store's connections belong to: a driver's connection answers on the
loop that opened it, and a statement sent from another waits there for an answer that
never comes (or fails deep inside the driver)."""

from __future__ import annotations

import asyncio

from leaseward.runtime.errors import ConfigurationError

__all__ = ["HomeLoop"]


class HomeLoop:
    """Remembers the running loop when made; ``check`` refuses any other at once."""

    def __init__(self, location: str) -> None:
        self._loop = asyncio.get_running_loop()
        self._location = location

    def check(self) -> None:
        if asyncio.get_running_loop() is not self._loop:
            raise ConfigurationError(
                f"the store {self._location} was opened on another event loop than this "
                "one, and its connections answer only there: open a Client on this loop, "
                "or hand the call to the store's own loop "
                "(asyncio.run_coroutine_threadsafe(..., its_loop))"
            )
