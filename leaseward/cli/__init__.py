"""The ``leaseward`` command: the daemon and the operator's tools, on click."""

from leaseward.cli.defaults import DEFAULT_STORE_URL, EXIT_FAILURE, EXIT_USAGE
from leaseward.cli.main import entry_point, main

__all__ = ["DEFAULT_STORE_URL", "EXIT_FAILURE", "EXIT_USAGE", "entry_point", "main"]
