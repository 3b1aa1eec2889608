"""leaseward: a durable runtime for LLM agent runs that never repeats a non-idempotent write.

``from leaseward import Runtime, tool`` is the public API: the kernel's public
names (tools, effects, agents, the run model, errors) and the shell that runs
them. The layers below it are ``leaseward.runtime`` (the pure kernel),
``leaseward.storage`` and ``leaseward.actors``; the shell (``leaseward.app``,
``leaseward.client``, ``leaseward.daemon``, ``leaseward.cli``,
``leaseward.providers``) sits on top of them.
"""

from leaseward import runtime as _kernel
from leaseward.app import (
    CONCURRENCY,
    DRAIN_SECONDS,
    LEASE_SECONDS,
    POLL_INTERVAL_SECONDS,
    REAP_INTERVAL_SECONDS,
    Runtime,
)
from leaseward.client import Client
from leaseward.runtime import *  # noqa: F403 -- the kernel's __all__ is part of this one
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
