"""Named places on the write path where a test can make a worker die or freeze.

Off unless the process starts with ``LEASEWARD_TEST_CRASH_POINT=<name>``: the
variables are read once, at import, and an unarmed :func:`crash_point` returns
after one comparison with a module constant. Armed, the first time the named
point is reached the process appends ``{"point", "pid", "t"}`` to the file named by
``LEASEWARD_TEST_CRASH_MARKER`` (fsynced, so the test sees it before anything
else can happen) and then sends itself SIGKILL, or SIGSTOP when
``LEASEWARD_TEST_CRASH_ACTION=stop``. A stopped process that is continued
carries on from the point as if nothing happened, and never stops there again:
it is the zombie a lease must fence.

It lives in the storage layer, the lowest one allowed I/O, so that the
transaction of a commit can hold a point as well as the actors.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterable

from leaseward.runtime.journal import StepWrite
from leaseward.runtime.lifecycle import StepKind, StepStatus

__all__ = ["ARMED", "POINTS", "carries_outcome", "crash_point"]

POINTS = (
    "claim",
    "before_intent",
    "after_intent",
    "in_call",
    "after_call",
    "outcome_commit",
    "before_reply",
    "settle",
    "reap",
)

_POINT = os.environ.get("LEASEWARD_TEST_CRASH_POINT") or None
_MARKER = os.environ.get("LEASEWARD_TEST_CRASH_MARKER")
_SIGNAL = (
    signal.SIGSTOP if os.environ.get("LEASEWARD_TEST_CRASH_ACTION") == "stop" else signal.SIGKILL
)
ARMED = _POINT is not None
_fired = False


def crash_point(name: str) -> None:
    """Die (or freeze) here if this process was started to do so at ``name``."""
    global _fired
    if name != _POINT or _fired:
        return
    _fired = True
    if _MARKER:
        with open(_MARKER, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"point": name, "pid": os.getpid(), "t": time.time()}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    os.kill(os.getpid(), _SIGNAL)


def carries_outcome(steps: Iterable[StepWrite]) -> bool:
    """Whether a commit holds a tool call's outcome: the points around its commit."""
    return any(s.kind is StepKind.TOOL and s.status is not StepStatus.STARTED for s in steps)
