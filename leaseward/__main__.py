"""``python -m leaseward``: the operator CLI."""

from leaseward.cli.main import entry_point

entry_point()
