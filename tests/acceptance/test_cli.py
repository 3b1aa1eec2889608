"""The operator CLI: every mistake is one line and changes nothing; reap, migrate and help."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import attrs
import pytest
from acceptance_support import (
    HERE,
    DaemonPool,
    Result,
    assert_one_line_error,
    base_env,
    leaseward,
    ok,
    show,
    snapshot,
    sqlite_url,
)

from leaseward.storage import open_store
from leaseward.storage.migrations import MIGRATIONS

EXIT_FAILURE = 1
EXIT_USAGE = 2


@attrs.frozen
class Template:
    """A quiet store (no process has it open) with a completed and a queued run."""

    directory: Path
    completed_run: str
    unserved_run: str


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Template]:
    directory = tmp_path_factory.mktemp("template")
    store = directory / "store"
    store.mkdir()
    url = sqlite_url(store / "runs.db")
    pool = DaemonPool(directory)
    try:
        daemon = pool.start(url, worker_id="acc-template")
        done = ok("submit", "payer", "--input", "{}", "--wait", "--json", "--timeout", "20",
                  "--store", url).json()  # fmt: skip
        assert done["state"] == "completed"
        # submit cannot know which agents exist: it queues, and no daemon claims it.
        unserved = ok("submit", "no-such-agent", "--input", "{}", "--store", url).stdout.strip()
        daemon.wait_for("run.claimed", run_id=done["id"])
        time.sleep(0.3)  # a few claim polls (every 0.05 s) that must leave it alone
        assert daemon.stop() == 0
    finally:
        pool.close()
    assert snapshot(store).keys() == {"runs.db"}, "the daemon left SQLite side files"
    yield Template(store, done["id"], unserved)


@pytest.fixture
def copy(template: Template, tmp_path: Path) -> Path:
    """This test's own copy of the template store directory."""
    target = tmp_path / "store"
    shutil.copytree(template.directory, target)
    return target


def _url(directory: Path, **options: str) -> str:
    return sqlite_url(directory / "runs.db", **options)


def assert_unchanged(directory: Path, command: Callable[[], Result], code: int, *text: str) -> None:
    before = snapshot(directory)
    result = command()
    assert_one_line_error(result, code, *text)
    assert snapshot(directory) == before, "a failed command changed the store"


# -- store URLs and apps ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("store", "fragment"),
    [
        ("nosuch:///runs.db", "unknown scheme"),
        ("runs.db", "is not a URL"),
        ("sqlite://host/runs.db", "names a host"),
        ("sqlite:///runs.db?colour=blue", "unknown"),
    ],
)
@pytest.mark.parametrize("command", [("migrate",), ("submit", "payer"), ("runs",)])
def test_a_bad_store_url_is_a_usage_error_and_creates_nothing(
    tmp_path: Path, store: str, fragment: str, command: tuple[str, ...]
) -> None:
    result = leaseward(*command, "--store", store, cwd=tmp_path)
    assert_one_line_error(result, EXIT_USAGE, fragment)
    assert list(tmp_path.iterdir()) == []


def test_a_bad_store_url_in_the_environment_is_a_usage_error(tmp_path: Path) -> None:
    result = leaseward("runs", env=base_env(LEASEWARD_STORE="nosuch:///x.db"), cwd=tmp_path)
    assert_one_line_error(result, EXIT_USAGE, "unknown scheme")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("app", "fragment"),
    [
        ("no_such_module:app", "cannot import 'no_such_module'"),
        ("demo_app:no_such_attribute", "has no attribute"),
        ("demo_app:NOT_AN_APP", "not a leaseward App"),
        ("demo_app", "module:attribute"),
    ],
)
def test_daemon_with_an_app_that_is_not_one_is_a_usage_error(
    store_dir: Path, app: str, fragment: str
) -> None:
    result = leaseward("daemon", "--app", app, "--store", _url(store_dir))
    assert_one_line_error(result, EXIT_USAGE, fragment)
    assert list(store_dir.iterdir()) == [], "the daemon created the database anyway"


def test_daemon_without_an_app_or_with_a_bad_store_is_a_usage_error(store_dir: Path) -> None:
    assert_one_line_error(
        leaseward("daemon", "--store", _url(store_dir)), EXIT_USAGE, "--app is required"
    )
    bad_store = leaseward("daemon", "--app", "demo_app:app", "--store", "nosuch:///x.db")
    assert_one_line_error(bad_store, EXIT_USAGE, "unknown scheme")
    assert list(store_dir.iterdir()) == []
    assert not (HERE / "x.db").exists()


# -- operator commands on runs that are not there ------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("show", "no-such-run"),
        ("cancel", "no-such-run"),
        ("resolve", "no-such-run", "--applied"),
        ("redrive", "no-such-run"),
    ],
)
def test_a_run_that_does_not_exist(copy: Path, command: tuple[str, ...]) -> None:
    assert_unchanged(
        copy,
        lambda: leaseward(*command, "--store", _url(copy)),
        EXIT_FAILURE,
        "no run with id 'no-such-run'",
    )


def test_resolve_and_cancel_on_a_completed_run_are_refused(copy: Path, template: Template) -> None:
    run_id = template.completed_run
    for verdict in ("--applied", "--not-applied"):
        assert_unchanged(
            copy,
            lambda v=verdict: leaseward("resolve", run_id, v, "--note", "x", "--store", _url(copy)),
            EXIT_FAILURE,
            "completed",
            "interrupted_write",
        )
    assert_unchanged(
        copy,
        lambda: leaseward("cancel", run_id, "--store", _url(copy)),
        EXIT_FAILURE,
        "already finished",
    )


@pytest.mark.parametrize(
    "command",
    [("runs",), ("show", "x"), ("submit", "payer"), ("reap", "--once"), ("dead-letters",)],
)
def test_an_operator_command_on_a_missing_database_creates_nothing(
    store_dir: Path, command: tuple[str, ...]
) -> None:
    result = leaseward(*command, "--store", _url(store_dir))
    assert_one_line_error(result, EXIT_FAILURE, "no database at", "leaseward migrate")
    assert list(store_dir.iterdir()) == []


# -- submit -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("{not json", "is not JSON"), ("", "is not JSON"), ("@missing.json", "No such file")],
)
def test_submit_input_that_is_not_json(copy: Path, value: str, fragment: str) -> None:
    assert_unchanged(
        copy,
        lambda: leaseward("submit", "payer", "--input", value, "--store", _url(copy)),
        EXIT_USAGE,
        fragment,
    )


def test_submit_input_from_a_file_that_is_not_json(copy: Path, tmp_path: Path) -> None:
    source = tmp_path / "input.txt"
    source.write_text("hello")
    assert_unchanged(
        copy,
        lambda: leaseward("submit", "payer", "--input", f"@{source}", "--store", _url(copy)),
        EXIT_USAGE,
        "is not JSON",
    )
    source.write_text('{"order": "from a file"}')
    run_id = ok("submit", "payer", "--input", f"@{source}", "--store", _url(copy)).stdout.strip()
    assert show(_url(copy), run_id)["state"] == "queued"


def test_submit_of_an_unknown_agent_queues_a_run_no_daemon_claims(
    copy: Path, template: Template
) -> None:
    # The CLI has no app, so it cannot refuse the name: the run waits for a daemon
    # that serves that agent (the Client's documented behaviour).
    unserved = show(_url(copy), template.unserved_run)
    assert (unserved["agent"], unserved["state"], unserved["epoch"]) == (
        "no-such-agent",
        "queued",
        0,
    )
    assert unserved["steps"] == []
    result = ok("submit", "another-unknown-agent", "--input", "1", "--store", _url(copy))
    assert show(_url(copy), result.stdout.strip())["state"] == "queued"


# -- locked and read-only databases ------------------------------------------------------


def test_a_locked_database_fails_in_one_line_after_the_busy_timeout(copy: Path) -> None:
    before = snapshot(copy)
    holder = sqlite3.connect(copy / "runs.db", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        url = _url(copy, busy_timeout_ms="100")
        started = time.monotonic()
        result = leaseward("submit", "payer", "--input", "{}", "--store", url)
        assert time.monotonic() - started < 10
        assert_one_line_error(result, EXIT_FAILURE, "database is locked")
        cancel = leaseward("cancel", "x", "--store", url)
        assert_one_line_error(cancel, EXIT_FAILURE, "database is locked")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert snapshot(copy) == before


_PR_CAPBSET_DROP = 24
# CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER: without them root obeys file modes.
_FILE_CAPABILITIES = (1, 2, 3)


def _obey_file_modes() -> None:
    """In the child, before exec: drop what lets root write a file whose mode forbids it."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in _FILE_CAPABILITIES:
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _can_drop_capabilities() -> bool:
    probe = leaseward("--help", preexec_fn=_obey_file_modes)
    return probe.returncode == 0


def test_a_read_only_database_fails_in_one_line_and_changes_nothing(copy: Path) -> None:
    # chmod alone does not stop root; as root the child drops the capabilities that
    # bypass file modes (root without CAP_DAC_OVERRIDE obeys them like anyone).
    as_root = os.geteuid() == 0
    if as_root and not _can_drop_capabilities():
        pytest.skip("running as root without CAP_SETPCAP: cannot make a file read-only")
    preexec = _obey_file_modes if as_root else None
    before = snapshot(copy)
    database = copy / "runs.db"
    database.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    copy.chmod(0o555)  # nor can SQLite create its -wal and -shm files beside it
    try:
        result = leaseward(
            "submit", "payer", "--input", "{}", "--store", _url(copy), preexec_fn=preexec
        )
        assert_one_line_error(result, EXIT_FAILURE, "readonly database")
    finally:
        copy.chmod(0o755)
        database.chmod(0o644)
    assert snapshot(copy) == before


# -- flag values -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "command", "fragment"),
    [
        ("LEASEWARD_LIMIT", "abc", ("runs",), "LEASEWARD_LIMIT='abc'"),
        ("LEASEWARD_LIMIT", "0", ("dead-letters",), "at least 1"),
        ("LEASEWARD_STATE", "sleeping", ("runs",), "not a run state"),
        ("LEASEWARD_REASON", "bored", ("dead-letters",), "not a reason"),
        ("LEASEWARD_JSON", "maybe", ("runs",), "not a boolean"),
        ("LEASEWARD_TIMEOUT", "-1", ("submit", "payer", "--wait"), "greater than 0"),
        ("LEASEWARD_CONCURRENCY", "zero", ("daemon", "--app", "demo_app:app"), "whole number"),
        ("LEASEWARD_LEASE_SECONDS", "0", ("daemon", "--app", "demo_app:app"), "greater than 0"),
        ("LEASEWARD_LOG_FORMAT", "xml", ("daemon", "--app", "demo_app:app"), "json, console"),
        ("LEASEWARD_LOG_LEVEL", "loud", ("daemon", "--app", "demo_app:app"), "debug, info"),
        ("LEASEWARD_METRICS_PORT", "70000", ("daemon", "--app", "demo_app:app"), "port"),
    ],
)
def test_a_bad_flag_value_from_the_environment_is_a_usage_error(
    copy: Path, variable: str, value: str, command: tuple[str, ...], fragment: str
) -> None:
    env = base_env(**{variable: value})
    assert_unchanged(
        copy,
        lambda: leaseward(*command, "--store", _url(copy), env=env),
        EXIT_USAGE,
        fragment,
    )


@pytest.mark.parametrize(
    "flags",
    [
        ("runs", "--limit", "0"),
        ("runs", "--limit", "ten"),
        ("runs", "--state", "sleeping"),
        ("daemon", "--app", "demo_app:app", "--drain-seconds", "-1"),
        ("daemon", "--app", "demo_app:app", "--poll-interval-seconds", "nan"),
        ("resolve", "x", "--applied", "--not-applied"),
        ("resolve", "x"),
        ("reap",),
        ("no-such-command",),
    ],
)
def test_a_bad_flag_on_the_command_line_is_a_usage_error(
    copy: Path, flags: tuple[str, ...]
) -> None:
    assert_unchanged(copy, lambda: leaseward(*flags, "--store", _url(copy)), EXIT_USAGE)


def test_a_variable_of_another_command_or_one_overridden_on_the_command_line_is_ignored(
    copy: Path,
) -> None:
    url = _url(copy)
    daemon_only = base_env(LEASEWARD_CONCURRENCY="abc", LEASEWARD_LOG_FORMAT="xml")
    assert leaseward("runs", "--store", url, env=daemon_only).returncode == 0
    assert leaseward("runs", "--limit", "5", "--store", url, env=base_env(
        LEASEWARD_LIMIT="abc")).returncode == 0  # fmt: skip


def test_store_and_flags_are_read_from_the_environment(copy: Path, template: Template) -> None:
    env = base_env(LEASEWARD_STORE=_url(copy), LEASEWARD_JSON="1", LEASEWARD_STATE="completed")
    listed = ok("runs", env=env).json()
    assert [r["id"] for r in listed] == [template.completed_run]


# -- reap, migrate, help -----------------------------------------------------------------


async def _claim_with_a_tiny_lease(url: str, agent: str) -> str:
    store = await open_store(url, must_exist=True)
    try:
        claimed = await store.claim_runs("acc-fake-worker", 1, 0.05, [agent])
    finally:
        await store.aclose()
    assert len(claimed) == 1
    return claimed[0].id


def _expired_claim(url: str) -> str:
    """A run claimed by a worker that then vanished: its 0.05 s lease is over."""
    ok("migrate", "--store", url)
    run_id = ok("submit", "greeter", "--input", '"hi"', "--store", url).stdout.strip()
    assert anyio.run(_claim_with_a_tiny_lease, url, "greeter") == run_id
    assert show(url, run_id)["state"] == "running"
    time.sleep(0.1)
    return run_id


def test_reap_once_prints_what_it_did(url: str) -> None:
    ok("migrate", "--store", url)
    assert ok("reap", "--once", "--store", url).stdout.strip() == "no expired leases"
    run_id = _expired_claim(url)

    reaped = ok("reap", "--once", "--store", url).stdout
    assert f"run {run_id} epoch 1: lease expired -> queued" in reaped.splitlines()
    run = show(url, run_id)
    assert (run["state"], run["epoch"]) == ("queued", 1)
    assert ok("reap", "--once", "--store", url).stdout.strip() == "no expired leases"


def test_reap_once_prints_nothing_but_its_summary_on_stdout(url: str) -> None:
    run_id = _expired_claim(url)
    reaped = ok("reap", "--once", "--store", url).stdout
    assert reaped == f"run {run_id} epoch 1: lease expired -> queued\n"


def test_migrate_creates_the_schema_and_prints_its_version(store_dir: Path) -> None:
    url = _url(store_dir)
    newest = MIGRATIONS[-1].version
    assert ok("migrate", "--store", url).stdout == f"schema at version {newest}\n"
    assert (store_dir / "runs.db").exists()
    assert ok("migrate", "--store", url).stdout == f"schema at version {newest}\n"
    assert ok("runs", "--json", "--store", url).json() == []


def _help(*command: str) -> str:
    text = ok(*command, "--help", env=base_env(COLUMNS="80")).stdout
    return " ".join(text.split())


def _flags(help_text: str) -> set[str]:
    options = help_text.split(" options: ", 1)[1]
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", options)) - {"--help"}


def test_daemon_help_names_the_variable_of_every_flag() -> None:
    text = _help("daemon")
    flags = _flags(text)
    assert {"--store", "--app", "--concurrency", "--lease-seconds", "--drain-seconds"} <= flags
    for flag in sorted(flags):
        variable = "LEASEWARD_" + flag[2:].upper().replace("-", "_")
        assert f"[env: {variable}" in text, f"daemon --help does not name {variable}"


# Flags that are deliberately not environment variables: a verdict or a one-shot switch.
NO_VARIABLE = {"--applied", "--not-applied", "--once"}


@pytest.mark.parametrize(
    "command",
    ["submit", "runs", "show", "cancel", "dead-letters", "redrive", "resolve", "reap", "migrate"],
)
def test_every_other_command_help_names_its_variables(command: str) -> None:
    text = _help(command)
    for flag in sorted(_flags(text) - NO_VARIABLE):
        variable = "LEASEWARD_" + flag[2:].upper().replace("-", "_")
        assert f"[env: {variable}" in text, f"{command} --help does not name {variable}"
