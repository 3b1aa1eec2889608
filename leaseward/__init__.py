"""leaseward: a durable runtime for LLM agent runs that never repeats a non-idempotent write.

``from leaseward import Runtime, tool`` is the public API: the kernel's public
names (tools, effects, agents, the run model, errors) and the shell that runs
them. The layers live in ``leaseward.runtime`` (kernel and shell),
``leaseward.storage`` and ``leaseward.actors``.
"""

from leaseward import runtime as _kernel
from leaseward.runtime import *  # noqa: F403 -- the kernel's __all__ is part of this one
from leaseward.runtime.app import (
    CONCURRENCY,
    DRAIN_SECONDS,
    LEASE_SECONDS,
    POLL_INTERVAL_SECONDS,
    REAP_INTERVAL_SECONDS,
    Runtime,
)
from leaseward.runtime.client import Client
from leaseward.runtime.version import VERSION as __version__

__all__ = [
    *_kernel.__all__,
    "CONCURRENCY",
    "DRAIN_SECONDS",
    "LEASE_SECONDS",
    "POLL_INTERVAL_SECONDS",
    "REAP_INTERVAL_SECONDS",
    "Client",
    "Runtime",
    "__version__",
]
