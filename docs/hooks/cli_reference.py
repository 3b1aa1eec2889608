"""MkDocs hook: the CLI reference page shows what ``leaseward --help`` prints, at build time.

The page holds a marker; the hook replaces it with the top-level help and each
subcommand's help, run through the installed console script. Going through the
program rather than its click group keeps the page true to what a user sees: only
the printed help is read.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

MARKER = "<!-- cli-reference -->"
PAGE = "reference/cli.md"

# Wide enough for the flags' help, narrow enough for a page: click wraps at COLUMNS.
COLUMNS = "100"

_SECTION = re.compile(r"^(\S[^:]*):\s*$")
# A command's line in the listing: a short indent, then its name (lowercase, dashes).
# Wrapped help text is indented further.
_COMMAND = re.compile(r"^ {2,6}([a-z][a-z0-9-]*)(?:\s{2,}|$)")
_COMMAND_SECTIONS = ("commands",)


def _program() -> list[str]:
    """The console script of the environment MkDocs runs in, else ``python -m leaseward``."""
    beside = Path(sys.executable).with_name("leaseward")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("leaseward")
    return [found] if found else [sys.executable, "-m", "leaseward"]


def _help(*command: str) -> str:
    # Settings left in the builder's environment would show as defaults on the page.
    env = {name: value for name, value in os.environ.items() if not name.startswith("LEASEWARD_")}
    env["COLUMNS"] = COLUMNS
    process = subprocess.Popen(
        [*_program(), *command, "--help"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    out, err = process.communicate(timeout=60)
    if process.returncode != 0:
        raise RuntimeError(
            f"leaseward {' '.join(command)} --help exited {process.returncode}: {err.strip()}"
        )
    return out.rstrip()


def subcommands(top_level_help: str) -> list[str]:
    """The command names listed in the top-level help, in their order."""
    names: list[str] = []
    listing = False
    for line in top_level_help.splitlines():
        section = _SECTION.match(line)
        if section:
            listing = section.group(1).strip().lower() in _COMMAND_SECTIONS
            continue
        command = _COMMAND.match(line) if listing else None
        if command:
            names.append(command.group(1))
    return names


def render() -> str:
    top = _help()
    names = subcommands(top)
    if not names:
        raise RuntimeError("leaseward --help lists no subcommands; the CLI page would be empty")
    parts = ["## leaseward", "", "```text", top, "```"]
    for name in names:
        parts += ["", f"## leaseward {name}", "", "```text", _help(name), "```"]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise RuntimeError(f"{PAGE} lost its {MARKER} marker")
    return markdown.replace(MARKER, render())
