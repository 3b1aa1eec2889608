"""Worker ids: the name a worker has in leases, logs and the worker registry."""

from __future__ import annotations

import os
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from leaseward.runtime.encoding import holdable
from leaseward.runtime.errors import ConfigurationError

__all__ = ["check_worker_id", "default_worker_id", "worker_id_held"]


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def check_worker_id(worker_id: Any) -> None:
    # Leases, logs and the workers table name a worker by it: an empty or blank one
    # would show as nothing there, and an id with spaces around it looks like another's.
    # It is stored with each lease: one no store can hold would fail every claim.
    if (
        not isinstance(worker_id, str)
        or not worker_id.strip()
        or worker_id != worker_id.strip()
        or not holdable(worker_id)
    ):
        raise ConfigurationError(
            f"worker_id must be a name without spaces around it, NUL characters or lone "
            f"surrogates, such as the default host:pid, not {worker_id!r}"
        )


class _InUse:
    """The worker ids of the Runtimes open in this process, each with how many use it."""

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.counts: Counter[str] = Counter()


_IN_USE = _InUse()


@contextmanager
def worker_id_held(worker_id: str | None) -> Iterator[str]:
    """The id a Runtime of this process works under while the block runs: ``worker_id``
    if one is given; else host:pid, or host:pid/2 (/3, and so on) while another Runtime
    of the process works under that.

    Two Runtimes of one process under one id would be one worker in the registry: each
    heartbeat would overwrite the other's agents, the first to close would remove the
    row the other still runs under, and neither would be warned, since the check for a
    namesake looks for another process.
    """
    in_use = _IN_USE
    with in_use.guard:
        if worker_id is None:
            base = worker_id = default_worker_id()
            number = 2
            while in_use.counts[worker_id]:
                worker_id = f"{base}/{number}"
                number += 1
        in_use.counts[worker_id] += 1
    try:
        yield worker_id
    finally:
        with in_use.guard:
            in_use.counts[worker_id] -= 1
            if not in_use.counts[worker_id]:
                del in_use.counts[worker_id]
