"""The one rule every call's timeout follows, wherever it is set: a tool's, a
provider's, an MCP server's, an approval's.

A timeout is a number of seconds greater than 0 and at most a year, never infinity.
The lease keeper renews a call's lease for as long as its worker lives, so only the
call's own timeout ends a call that hangs: without one, a hung tool would hold its
run, its lease and a worker's slot for ever, and a drain, which lets each write in
flight finish within its timeout, would never end. A year is the bound every other
span leaseward is given has (a lease, a drain, a wait in the CLI).
"""

from __future__ import annotations

from typing import Any

from leaseward.runtime.clock import MAX_DURATION_SECONDS
from leaseward.runtime.errors import ConfigurationError

__all__ = ["TIMEOUT_RULE", "checked_timeout"]

TIMEOUT_RULE = f"a number of seconds greater than 0 and at most {MAX_DURATION_SECONDS:.0f} (a year)"
"""What a refusal says a timeout must be."""


def _is_timeout(value: Any) -> bool:
    """Whether ``value`` follows the rule (NaN and infinity do not)."""
    number = not isinstance(value, bool) and isinstance(value, int | float)
    return number and 0 < value <= MAX_DURATION_SECONDS


def checked_timeout(
    what: str,
    value: Any,
    *,
    error: type[ConfigurationError] = ConfigurationError,
    or_none: bool = False,
) -> float:
    """``value`` as a float; ``error``, naming ``what``, if it does not follow the rule.
    ``or_none`` says in the refusal that None may be given instead (the caller lets it
    through before asking)."""
    if not _is_timeout(value):
        alternative = ", or None" if or_none else ""
        raise error(f"{what} must be {TIMEOUT_RULE}{alternative}, not {value!r}")
    return float(value)
