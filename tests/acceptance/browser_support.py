"""The console in a real browser: the operating system's Chromium driven by Playwright, a
console served by the real executable for it to open, and what a page must never do.

Chromium comes from the distribution's packages (``make test`` installs it when it is
missing); Playwright never downloads a browser here. Without one the browser tests skip,
saying why, or fail when ``LEASEWARD_TEST_BROWSER_REQUIRED`` is set, as ``.ci/run`` sets it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import anyio
import attrs
import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Dialog,
    Error,
    Page,
    expect,
    sync_playwright,
)

from tests.acceptance.acceptance_support import (
    LEASEWARD,
    Daemon,
    base_env,
    interrupt_a_charge,
    ok,
    show,
    wait_until,
)

__all__ = [
    "MISSING_CHROMIUM",
    "REQUIRED_VARIABLE",
    "TOKEN",
    "Tab",
    "chromium",
    "console_address",
    "dead_lettered_charge",
    "find_chromium",
    "log_in",
    "open_tab",
    "require_chromium",
    "served_console",
    "wait_for_state",
    "watched",
]

TOKEN = "an-operator-token-long-enough"
REQUIRED_VARIABLE = "LEASEWARD_TEST_BROWSER_REQUIRED"
CHROMIUM_NAMES = ("chromium", "chromium-browser")
# Generous: the console, a daemon and the browser share two loaded cores with other tests.
WAIT_MILLISECONDS = 30_000
STATE_TIMEOUT_SECONDS = 30.0

expect.set_options(timeout=WAIT_MILLISECONDS)


MISSING_CHROMIUM = (
    "no Chromium found (looked for " + ", ".join(CHROMIUM_NAMES) + " on PATH): install "
    "the distribution's package (apt-get install -y chromium; make test does it)"
)


def find_chromium() -> str | None:
    """The path of the system's Chromium, if it is installed."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    return None


def require_chromium() -> str:
    """The system's Chromium; without one, skip (or fail when required), saying why."""
    found = find_chromium()
    if found is not None:
        return found
    message = MISSING_CHROMIUM
    if os.environ.get(REQUIRED_VARIABLE):
        pytest.fail(f"{REQUIRED_VARIABLE} is set, but {message}")
    pytest.skip(message)


@contextmanager
def chromium(executable: str) -> Iterator[Browser]:
    """Headless Chromium from ``executable``, closed on the way out."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def served_console(store_url: str, token: str | None = TOKEN) -> Iterator[str]:
    """``leaseward console`` on a port of its choosing; yields its address."""
    env = base_env() if token is None else base_env(LEASEWARD_CONSOLE_TOKEN=token)
    process = subprocess.Popen(
        [str(LEASEWARD), "console", "--store", store_url, "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        line = process.stdout.readline()
        assert line.startswith("console at http://"), line + process.stderr.read()
        yield line.split()[2]
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


def console_address(daemon: Daemon) -> str:
    """Where a daemon started with ``--console --console-port 0`` serves it."""
    url: str = daemon.wait_for("console.serving", timeout=20)["url"]
    return url


@attrs.frozen
class Tab:
    """A page and everything it did that a console page must never do: open a dialog,
    log an error (a script refused by the Content-Security-Policy is one), or throw; and
    the refusals it was answered with, which the browser logs as failed loads."""

    page: Page
    dialogs: list[str] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    refusals: list[str] = attrs.field(factory=list)

    def assert_quiet(self, refusals: int = 0) -> None:
        """No dialog, no error, and exactly the ``refusals`` the test provoked."""
        assert self.dialogs == [], f"a dialog opened: {self.dialogs}"
        assert self.errors == [], f"the page logged errors: {self.errors}"
        assert len(self.refusals) == refusals, f"refused loads: {self.refusals}"


def open_tab(browser: Browser, address: str) -> Tab:
    """A page in a browser context of its own (its own cookies: one operator)."""
    context = browser.new_context(base_url=address)
    context.set_default_timeout(WAIT_MILLISECONDS)
    return watched(context.new_page())


def watched(page: Page) -> Tab:
    """``page``, with what it does recorded for :meth:`Tab.assert_quiet`."""
    tab = Tab(page)

    def on_dialog(dialog: Dialog) -> None:
        tab.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def on_console(message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        text = f"{message.text} ({message.location.get('url')})"
        failed_load = message.text.startswith("Failed to load resource")
        (tab.refusals if failed_load else tab.errors).append(text)

    def on_page_error(error: Error) -> None:
        tab.errors.append(error.message)

    tab.page.on("dialog", on_dialog)
    tab.page.on("console", on_console)
    tab.page.on("pageerror", on_page_error)
    return tab


def log_in(page: Page, operator: str) -> None:
    page.goto("/login")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_label("Your name").fill(operator)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".flash")).to_have_text(f"logged in as {operator}")


def wait_for_state(store_url: str, run_id: str, state: str) -> dict[str, Any]:
    """The run as ``leaseward show --json`` prints it, once it is in ``state``."""

    def probe() -> dict[str, Any] | None:
        run = show(store_url, run_id)
        return run if run["state"] == state else None

    return wait_until(f"run {run_id} {state}", probe, STATE_TIMEOUT_SECONDS)


def dead_lettered_charge(store_url: str) -> str:
    """A payer run dead-lettered as interrupted_write: its worker recorded the charge's
    intent and vanished, and a reaper pass found the lease expired."""
    ok("submit", "payer", "--input", "{}", "--store", store_url)
    # Its own event loop in its own thread: Playwright's runs in this one.
    with ThreadPoolExecutor(1) as pool:
        run_id = pool.submit(anyio.run, interrupt_a_charge, store_url, 1.0).result()

    def reaped() -> bool:
        ok("reap", "--once", "--store", store_url)
        return bool(show(store_url, run_id)["state"] == "dead_lettered")

    wait_until("the reaper dead-letters the interrupted charge", reaped, STATE_TIMEOUT_SECONDS)
    return run_id
