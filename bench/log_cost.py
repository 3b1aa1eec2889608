"""What a leaseward log call costs: disabled (the hot path of an embedded runtime, whose
host left ``logging`` alone) and enabled, against a no-op function given the same arguments.

    .venv/bin/python bench/log_cost.py [--calls 100000] [--repeat 5]

Each figure is the best of ``--repeat`` timings of ``--calls`` calls, in nanoseconds
per call. The script prints figures; it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import io
import logging
import timeit
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from leaseward.runtime.logs import get_logger

RUN_ID = "0b6d3f0e-3f7e-4a57-9d0f-5f2d4c1e8a90"


def _noop(event: str, **fields: Any) -> None:
    return None


STEP = {
    "seq": 3,
    "kind": "tool",
    "tool": "charge",
    "effect": "non_idempotent_write",
    "status": "succeeded",
}


def _cases() -> list[tuple[str, Callable[..., Any], str, dict[str, Any]]]:
    """(name, method, event, fields): each is timed as ``method(event, **fields)``."""
    quiet = get_logger("leaseward.bench.quiet")
    bound = quiet.bind(run_id=RUN_ID, epoch=1, worker_id="host:1", agent="payer")

    text = logging.getLogger("leaseward.bench.text")
    text.propagate = False
    text.setLevel(logging.DEBUG)
    text.addHandler(logging.StreamHandler(io.StringIO()))
    as_text = get_logger("leaseward.bench.text").bind(run_id=RUN_ID, epoch=1)

    # structlog's own level filter, as leaseward's examples used to configure it.
    filtering_class: Callable[..., Any] = structlog.make_filtering_bound_logger(logging.WARNING)
    filtering = filtering_class(structlog.PrintLogger(io.StringIO()), [], {})
    renewed = {"run_id": RUN_ID, "epoch": 1}
    return [
        ("disabled debug, module logger", quiet.debug, "lease.renewed", renewed),
        ("disabled debug, bound run logger", bound.debug, "lease.renewed", {"seconds": 30.0}),
        ("disabled info step.recorded", bound.info, "step.recorded", STEP),
        ("structlog filtering logger, off", filtering.debug, "lease.renewed", renewed),
        ("enabled debug, plain handler", as_text.debug, "lease.renewed", {"seconds": 30.0}),
    ]


def _best(
    method: Callable[..., Any], event: str, fields: dict[str, Any], calls: int, repeat: int
) -> float:
    """Nanoseconds per ``method(event, **fields)``, best of ``repeat`` timings."""
    timings = timeit.repeat(lambda: method(event, **fields), number=calls, repeat=repeat)
    return min(timings) / calls * 1e9


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings per case, best kept")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.calls < 1 or args.repeat < 1:
        raise SystemExit("--calls and --repeat must be at least 1")
    print(f"{args.calls} calls, best of {args.repeat}; structlog {structlog.__version__}")
    print(f"{'case':<34} {'ns/call':>8} {'no-op ns':>9} {'ratio':>6}")
    for name, method, event, fields in _cases():
        took = _best(method, event, fields, args.calls, args.repeat)
        noop = _best(_noop, event, fields, args.calls, args.repeat)
        print(f"{name:<34} {took:>8.0f} {noop:>9.0f} {took / noop:>5.1f}x")
    print(
        "ns/call = one log call; no-op ns = a function that does nothing, given the same "
        "arguments;\nratio = the first over the second. Lower is cheaper: near 1x, a disabled "
        "log call costs little more than calling a function at all."
    )


if __name__ == "__main__":
    main()
