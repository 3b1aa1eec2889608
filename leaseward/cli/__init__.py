"""The ``leaseward`` command: the daemon and the operator's tools, on click.

The entry point is ``leaseward.cli.main``; this package imports none of its modules, so
that the console can share the CLI's tables and timeline without loading the commands
(which serve the console in turn).
"""

from leaseward.cli.defaults import DEFAULT_STORE_URL, EXIT_FAILURE, EXIT_USAGE

__all__ = ["DEFAULT_STORE_URL", "EXIT_FAILURE", "EXIT_USAGE"]
