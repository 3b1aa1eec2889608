"""``python -m leaseward``: the operator CLI."""

from leaseward.cli import entry_point

entry_point()
