"""What the CLI loads to start: every command pays for it, the console's alone excepted."""

from __future__ import annotations

import subprocess
import sys

WEB_STACK = ("starlette", "jinja2", "uvicorn")

LOADED_BY_THE_CLI = """
import sys
from leaseward.cli.main import main
import leaseward.console
print(",".join(sorted(name for name in sys.modules if name.split(".")[0] in {names})))
"""


def _web_modules_after(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code.format(names=set(WEB_STACK))],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [name for name in done.stdout.strip().split(",") if name]


def test_the_cli_and_the_console_package_load_no_web_stack() -> None:
    assert _web_modules_after(LOADED_BY_THE_CLI) == []


def test_the_consoles_names_load_it_when_asked_for() -> None:
    loaded = _web_modules_after(
        LOADED_BY_THE_CLI.replace(
            "import leaseward.console", "from leaseward.console import create_app, serve_console"
        )
    )
    assert {name.split(".")[0] for name in loaded} == set(WEB_STACK)
