"""Files nobody may change inside a block, root included: for integration and acceptance tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["unwritable"]


@contextmanager
def unwritable(*paths: Path) -> Iterator[None]:
    """Files and directories nobody may change inside the block, root included."""
    if os.geteuid() == 0:
        # Root ignores permission bits; the immutable attribute binds root as well.
        subprocess.run(["chattr", "+i", *map(str, paths)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", *map(str, paths)], check=True)
        return
    modes = {path: path.stat().st_mode for path in paths}
    for path in paths:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        yield
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
