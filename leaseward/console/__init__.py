"""The operator web console: runs, their journals, dead letters and approvals, in a
browser, through the same Client as the CLI."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leaseward.console.app import create_app
    from leaseward.console.serve import serve_console

__all__ = ["create_app", "serve_console"]

# Loaded when first asked for: every command of the CLI imports this package for where
# the console listens (listen.py), and loading the web stack (Starlette, Jinja,
# uvicorn) with it took a sixth of each command's start.
_HOMES = {"create_app": "leaseward.console.app", "serve_console": "leaseward.console.serve"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
