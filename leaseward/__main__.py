"""``python -m leaseward``: the operator CLI."""

from leaseward.runtime.cli import entry_point

entry_point()
