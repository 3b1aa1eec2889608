"""MkDocs hook: the benchmarks' plots appear in the site from where the benchmarks write them.

A page links a plot by its path in the repository (``../bench/results/peers.png``),
which GitHub shows as it is. MkDocs sees only ``docs/``, so the hook publishes every
plot of ``bench/results/`` under ``figures/`` and points those links there: the
site shows the committed plot, never a copy that could fall behind it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

RESULTS = Path("bench/results")
PUBLISHED = "figures"

_LINK = re.compile(r"\]\((?:\.\./)+bench/results/([\w.-]+\.png)\)")


def _results(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).parent / RESULTS


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for plot in sorted(_results(config).glob("*.png")):
        files.append(File.generated(config, f"{PUBLISHED}/{plot.name}", abs_src_path=str(plot)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    here = posixpath.dirname(page.file.src_uri)

    def published(link: re.Match[str]) -> str:
        target = posixpath.relpath(f"{PUBLISHED}/{link.group(1)}", here or ".")
        return f"]({target})"

    return _LINK.sub(published, markdown)
