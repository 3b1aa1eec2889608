"""Screenshots of every page of the console for the documentation (``make
console-screenshots``): a store with runs of each kind, served beside a worker of the
demo app, drawn in headless Chromium.

    python -m tests.acceptance.console_screenshots [DIRECTORY]   (default docs/images)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Browser, ViewportSize

from tests.acceptance.acceptance_support import ROOT, DaemonPool, ok, sqlite_url
from tests.acceptance.browser_support import (
    MISSING_CHROMIUM,
    TOKEN,
    chromium,
    console_address,
    dead_lettered_charge,
    find_chromium,
    log_in,
    open_tab,
    wait_for_state,
)

__all__ = ["PAGES", "take_screenshots"]

PAGES = ("runs", "run", "dead-letters", "approvals", "workers", "login")
"""Each is saved as console-<name>.png."""
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}


def _submit(store: str, agent: str, value: str) -> str:
    return ok("submit", agent, "--input", value, "--store", store).stdout.strip()


def take_screenshots(browser: Browser, directory: Path) -> list[Path]:
    """One PNG of each page of PAGES in ``directory``; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        store = sqlite_url(Path(scratch) / "runs.db")
        ok("migrate", "--store", store)
        dead_lettered_charge(store)
        daemons = DaemonPool(Path(scratch))
        try:
            daemon = daemons.start(
                store,
                worker_id="worker-1",
                flags=("--console", "--console-port", "0"),
                LEASEWARD_CONSOLE_TOKEN=TOKEN,
            )
            address = console_address(daemon)
            for agent, value in (("greeter", '"hello"'), ("confused", '"clean up"')):
                wait_for_state(store, _submit(store, agent, value), "completed")
            approved = _submit(store, "approver", '"pay ACME"')
            wait_for_state(store, approved, "waiting_for_approval")
            ok("approve", approved, "--operator", "alice", "--note", "invoice checked",
               "--store", store)  # fmt: skip
            wait_for_state(store, approved, "completed")
            waiting = _submit(store, "approver", '"pay ACME again"')
            wait_for_state(store, waiting, "waiting_for_approval")
            _submit(store, "asker", '"paint the shed"')

            paths = []
            visitor = open_tab(browser, address)
            visitor.page.set_viewport_size(VIEWPORT)
            operator = open_tab(browser, address)
            operator.page.set_viewport_size(VIEWPORT)
            log_in(operator.page, "alice")
            for name in PAGES:
                tab = visitor if name == "login" else operator
                tab.page.goto(f"/runs/{approved}" if name == "run" else f"/{name}")
                path = directory / f"console-{name}.png"
                tab.page.screenshot(path=path, full_page=True)
                paths.append(path)
            visitor.assert_quiet()
            operator.assert_quiet()
            return paths
        finally:
            daemons.close()


def main() -> int:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "images"
    executable = find_chromium()
    if executable is None:
        print(f"console-screenshots: {MISSING_CHROMIUM}", file=sys.stderr)
        return 1
    with chromium(executable) as browser:
        for path in take_screenshots(browser, directory):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
