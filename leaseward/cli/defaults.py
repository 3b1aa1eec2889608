"""What every part of the CLI agrees on: the store it opens when told none, its exit codes."""

from __future__ import annotations

__all__ = ["DEFAULT_STORE_URL", "EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_USAGE"]

DEFAULT_STORE_URL = "sqlite:///leaseward.db"
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
