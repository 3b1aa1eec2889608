"""The operator web console: runs, their journals, dead letters and approvals, in a
browser, through the same Client as the CLI."""

from __future__ import annotations

from leaseward.console.app import create_app
from leaseward.console.serve import serve_console

__all__ = ["create_app", "serve_console"]
