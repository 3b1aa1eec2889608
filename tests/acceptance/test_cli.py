"""The operator CLI: every mistake is one line and changes nothing; reap, migrate and help."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import shlex
import shutil
import sqlite3
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import attrs
import pytest

from leaseward.runtime.encoding import MAX_INPUT_BYTES
from leaseward.storage import open_store
from leaseward.storage.migrations import MIGRATIONS
from tests.acceptance.acceptance_support import (
    HERE,
    LEASEWARD,
    OPERATOR_COMMANDS,
    DaemonPool,
    Result,
    assert_one_line_error,
    base_env,
    interrupt_a_charge,
    leaseward,
    ok,
    read_lines,
    show,
    snapshot,
    sqlite_url,
)
from tests.conftest import PgServer
from tests.file_modes import unwritable

EXIT_FAILURE = 1
EXIT_USAGE = 2


@attrs.frozen
class Template:
    """A quiet store (no process has it open) with two completed runs and a queued one."""

    directory: Path
    completed_run: str
    unserved_run: str
    confused_run: str


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
        confused = ok("submit", "confused", "--input", "{}", "--wait", "--json", "--timeout",
                      "20", "--store", url).json()  # fmt: skip
        assert confused["state"] == "completed"
        # submit cannot know which agents exist: it queues, and no daemon claims it.
        unserved = ok("submit", "no-such-agent", "--input", "{}", "--store", url).stdout.strip()
        daemon.wait_for("run.claimed", run_id=done["id"])
        time.sleep(0.3)  # a few claim polls (every 0.05 s) that must leave it alone
        daemon.stop_cleanly()
    finally:
        pool.close()
    assert snapshot(store).keys() == {"runs.db"}, "the daemon left SQLite side files"
    yield Template(store, done["id"], unserved, confused["id"])


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
        ("demo_app:NOT_AN_APP", "'demo_app:NOT_AN_APP' is a str, not a leaseward App"),
        ("demo_app:NOT_AN_APP_EITHER", "'demo_app:NOT_AN_APP_EITHER' is an int, not a leaseward"),
        ("demo_app", "module:attribute"),
        ("demo_app:build_app_later", "build_app_later is an async function"),
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


@pytest.mark.parametrize(
    ("flags", "env", "shown"),
    [
        (("--lease-seconds", "2", "--reap-interval-seconds", "2"), {}, "(2)"),
        ((), {"LEASEWARD_REAP_INTERVAL_SECONDS": "30"}, "(30)"),
    ],
)
def test_daemon_with_a_reap_interval_not_shorter_than_the_lease_is_a_usage_error(
    store_dir: Path, flags: tuple[str, ...], env: dict[str, str], shown: str
) -> None:
    result = leaseward(
        "daemon", "--app", "demo_app:app", *flags, "--store", _url(store_dir), env=base_env(**env)
    )
    assert_one_line_error(
        result, EXIT_USAGE, f"--reap-interval-seconds {shown} must be shorter than --lease-seconds"
    )
    assert list(store_dir.iterdir()) == []


@pytest.mark.parametrize(
    ("flags", "env"), [(("--worker-id", ""), {}), ((), {"LEASEWARD_WORKER_ID": " w1"})]
)
def test_daemon_with_a_blank_or_padded_worker_id_is_a_usage_error(
    store_dir: Path, flags: tuple[str, ...], env: dict[str, str]
) -> None:
    result = leaseward(
        "daemon", "--app", "demo_app:app", *flags, "--store", _url(store_dir), env=base_env(**env)
    )
    assert_one_line_error(result, EXIT_USAGE, "--worker-id must be a name")
    assert list(store_dir.iterdir()) == []


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
            functools.partial(
                leaseward, "resolve", run_id, verdict, "--note", "x", "--store", _url(copy)
            ),
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


def no_store_at(path: Path) -> str:
    return f"no leaseward store at {path}; a daemon or `leaseward migrate` creates one"


@pytest.mark.parametrize("command", OPERATOR_COMMANDS, ids=" ".join)
def test_an_operator_command_on_a_missing_database_creates_nothing(
    store_dir: Path, command: tuple[str, ...]
) -> None:
    # A relative path, as typed: the message names the file it resolved to.
    result = leaseward(*command, "--store", "sqlite:///store/lesaeward.db", cwd=store_dir.parent)
    assert_one_line_error(result, EXIT_FAILURE, no_store_at(store_dir / "lesaeward.db"))
    assert list(store_dir.iterdir()) == []


@pytest.mark.parametrize("command", OPERATOR_COMMANDS, ids=" ".join)
def test_an_operator_command_on_a_database_that_is_no_leaseward_store_changes_nothing(
    store_dir: Path, command: tuple[str, ...]
) -> None:
    other = sqlite3.connect(store_dir / "runs.db")
    other.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    other.commit()
    other.close()
    assert_unchanged(
        store_dir,
        lambda: leaseward(*command, "--store", _url(store_dir)),
        EXIT_FAILURE,
        no_store_at(store_dir / "runs.db"),
    )


def test_an_operator_command_on_a_file_that_is_no_database_changes_nothing(
    store_dir: Path,
) -> None:
    (store_dir / "runs.db").write_text("notes, not a database\n")
    # Said as it is: `leaseward migrate` would not make it one either.
    not_sqlite = f"{store_dir / 'runs.db'} is not a SQLite database"
    for command in (("submit", "payer", "--input", "{}"), ("runs",), ("migrate",)):
        assert_unchanged(
            store_dir,
            lambda: leaseward(*command, "--store", _url(store_dir)),  # noqa: B023
            EXIT_FAILURE,
            not_sqlite,
        )


# -- submit -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("{not json", "is not JSON"),
        ("", "is not JSON"),
        ("@missing.json", "No such file"),
        # The shell ate the quotes: the error says how a JSON string is written.
        ("hello", """a JSON string is written in quotes: --input '"hello"'"""),
        ("two words", """--input '"two words"'"""),
        # Deeper than the JSON reader recurses: an error line, not a traceback.
        ("[" * 100_000, "--input is nested too deep"),
    ],
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
    source.write_text("[" * 100_000)
    assert_unchanged(
        copy,
        lambda: leaseward("submit", "payer", "--input", f"@{source}", "--store", _url(copy)),
        EXIT_USAGE,
        "is nested too deep",
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
        locked = f"database is locked ({copy / 'runs.db'})"
        assert_one_line_error(result, EXIT_FAILURE, locked)
        cancel = leaseward("cancel", "x", "--store", url)
        assert_one_line_error(cancel, EXIT_FAILURE, locked)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert snapshot(copy) == before


def submit_waiting(url: str, timeout: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(LEASEWARD), "submit", "greeter", "--input", "{}", "--wait", "--timeout",
         str(timeout), "--store", url],
        env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def queued_run(url: str) -> str:
    deadline = time.monotonic() + 30
    while not (queued := json.loads(ok("runs", "--json", "--store", url).stdout)):
        assert time.monotonic() < deadline, "the run was never queued"
        time.sleep(0.05)
    return str(queued[0]["id"])


def store_up(pg_server: PgServer, pg_database: str) -> None:
    pg_server.run(f'ALTER DATABASE "{pg_database}" ALLOW_CONNECTIONS true')


@contextmanager
def waiting_through_an_outage(
    pg_server: PgServer, pg_database: str, timeout: float
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``submit --wait`` of a run queued before its store went down: the waiting process
    and the run's id. The store is let in again, and the wait ended, afterwards."""
    url = pg_server.url_for(pg_database)
    waiting = submit_waiting(url, timeout)
    try:
        run_id = queued_run(url)
        pg_server.run(
            f'ALTER DATABASE "{pg_database}" ALLOW_CONNECTIONS false',
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            f" WHERE datname = '{pg_database}'",
        )
        yield waiting, run_id
    finally:
        store_up(pg_server, pg_database)
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()


def test_a_wait_the_store_fails_under_until_the_timeout_names_the_run_it_queued(
    pg_server: PgServer, pg_database: str
) -> None:
    """The run was accepted before the store failed: a user who is not told its id
    would submit again, a second run."""
    # Long enough for the run to be queued and the store to go down first on a busy machine.
    with waiting_through_an_outage(pg_server, pg_database, 10.0) as (waiting, run_id):
        out, err = waiting.communicate(timeout=20)
    assert waiting.returncode == EXIT_FAILURE and out == "", (out, err)
    said = [line for line in err.splitlines() if line.startswith("leaseward: ")]
    assert "Traceback" not in err and len(said) == 3, err
    assert said[1].startswith("leaseward: the store does not answer"), err
    assert f"still waiting for run {run_id}, for up to 10 s in all" in said[1], err
    assert f"run {run_id} is submitted" in said[2], err
    assert show(pg_server.url_for(pg_database), run_id)["state"] == "queued"


def test_a_wait_rides_out_a_short_store_outage(pg_server: PgServer, pg_database: str) -> None:
    """A few seconds without the store (a restart, a failover) do not end the wait: it
    says once that the store does not answer, and prints the run once it has ended."""
    with waiting_through_an_outage(pg_server, pg_database, 30.0) as (waiting, run_id):
        time.sleep(2.0)
        assert waiting.poll() is None, waiting.communicate()
        store_up(pg_server, pg_database)
        ok("cancel", run_id, "--store", pg_server.url_for(pg_database))
        out, err = waiting.communicate(timeout=20)
    # The run was cancelled: the wait ends as for any run that did not complete.
    assert waiting.returncode == EXIT_FAILURE, (out, err)
    assert run_id in out and "cancelled" in out, out
    said = [line for line in err.splitlines() if line.startswith("leaseward: the store")]
    assert len(said) == 1 and "Traceback" not in err, err


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
    assert leaseward("runs", "--store", url, env=base_env(
        LEASEWARD_STORE="nosuch:///x.db")).returncode == 0  # fmt: skip


async def _input_of(url: str, run_id: str) -> object:
    store = await open_store(url, read_only=True)
    try:
        record = await store.get_run(run_id)
    finally:
        await store.aclose()
    assert record is not None
    return record.input


def test_the_store_comes_from_the_environment_but_what_one_command_does_never_does(
    copy: Path, template: Template
) -> None:
    url = _url(copy)
    listing_env = base_env(
        LEASEWARD_STORE=url,
        LEASEWARD_JSON="1",
        LEASEWARD_STATE="completed",
        LEASEWARD_AGENT="payer",
        LEASEWARD_LIMIT="1",
    )
    listing = ok("runs", env=listing_env).stdout.splitlines()
    # A table, not JSON, of every run: no filter and no limit came from the variables.
    assert listing[0].split()[0] == "RUN"
    assert len(listing) == 1 + 3
    assert (
        ok(
            "dead-letters",
            env=base_env(LEASEWARD_STORE=url, LEASEWARD_JSON="1", LEASEWARD_REASON="bored"),
        ).stdout
        == "no runs\n"
    )

    submit_env = base_env(
        LEASEWARD_STORE=url,
        LEASEWARD_INPUT='{"from": "the environment"}',
        LEASEWARD_WAIT="1",
        LEASEWARD_TIMEOUT="0.001",
        LEASEWARD_JSON="1",
    )
    run_id = ok("submit", "greeter", env=submit_env).stdout.strip()
    # Not JSON, and no wait (nothing serves the run, so a wait would have timed out).
    assert re.fullmatch(r"[0-9a-f-]{36}", run_id), run_id
    assert anyio.run(_input_of, url, run_id) is None


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


def test_reap_once_prints_nothing_but_its_summary(url: str) -> None:
    run_id = _expired_claim(url)
    reaped = ok("reap", "--once", "--store", url)
    assert reaped.stdout == f"run {run_id} epoch 1: lease expired -> queued\n"
    # Each run reaped is its line above, not a log record as well.
    assert reaped.stderr == ""


def test_migrate_creates_the_schema_and_prints_its_version(store_dir: Path) -> None:
    url = _url(store_dir)
    newest = MIGRATIONS[-1].version
    assert ok("migrate", "--store", url).stdout == (
        f"created a leaseward store at {store_dir / 'runs.db'}\nschema at version {newest}\n"
    )
    assert (store_dir / "runs.db").exists()
    assert ok("migrate", "--store", url).stdout == f"schema at version {newest}\n"
    assert ok("runs", "--json", "--store", url).json() == []


@pytest.mark.parametrize(
    "command", [("migrate",), ("daemon", "--app", "demo_app:app"), ("runs",), ("submit", "payer")]
)
def test_a_store_of_a_newer_leaseward_is_refused_in_one_line_that_names_it(
    store_dir: Path, command: tuple[str, ...]
) -> None:
    url = _url(store_dir)
    ok("migrate", "--store", url)
    newer = MIGRATIONS[-1].version + 1
    connection = sqlite3.connect(store_dir / "runs.db", isolation_level=None)
    try:
        connection.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)",
            (newer,),
        )
    finally:
        connection.close()
    # The workers' commands too: migrating cannot help, and the line says which store.
    assert_unchanged(
        store_dir,
        lambda: leaseward(*command, "--store", url),
        EXIT_FAILURE,
        f"the schema in {store_dir / 'runs.db'} is at version {newer}, newer than this",
    )


def _help(*command: str) -> str:
    text = ok(*command, "--help", env=base_env(COLUMNS="80")).stdout
    return " ".join(text.split())


def _flags(help_text: str) -> set[str]:
    options = help_text.split(" Options: ", 1)[1]
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", options)) - {"--help"}


def test_daemon_help_names_the_variable_of_every_flag() -> None:
    text = _help("daemon")
    flags = _flags(text)
    assert {"--store", "--app", "--concurrency", "--lease-seconds", "--drain-seconds"} <= flags
    for flag in sorted(flags):
        variable = "LEASEWARD_" + flag[2:].upper().replace("-", "_")
        assert f"[env var: {variable}" in text, f"daemon --help does not name {variable}"


def test_daemon_help_says_what_the_defaults_chosen_at_start_are() -> None:
    text = _help("daemon")
    # click would show a default computed at start as "(dynamic)", which tells nobody anything.
    assert "(dynamic)" not in text
    assert "LEASEWARD_WORKER_ID; default: (host:pid)]" in text
    assert "LEASEWARD_LOG_FORMAT; default: (console when stderr is a terminal, else json)]" in text


@pytest.mark.parametrize("command", ["approve", "reject", "reply", "resolve"])
def test_a_deciding_command_help_says_who_decides_by_default(command: str) -> None:
    assert "LEASEWARD_OPERATOR; default: (your user name)]" in _help(command)


# Flags that say what one invocation does, never set by a variable left in the environment.
ONE_OFF = {
    "--applied",
    "--not-applied",
    "--once",
    "--input",
    "--idempotency-key",
    "--wait",
    "--timeout",
    "--json",
    "--state",
    "--agent",
    "--limit",
    "--reason",
    "--note",
    "--step",
    "--digest",
}


@pytest.mark.parametrize(
    "command",
    ["submit", "runs", "show", "cancel", "dead-letters", "redrive", "resolve", "reap", "migrate"],
)
def test_every_other_command_help_names_its_variables_and_only_those(command: str) -> None:
    text = _help(command)
    assert "--store" in _flags(text)
    for flag in sorted(_flags(text)):
        variable = "LEASEWARD_" + flag[2:].upper().replace("-", "_")
        if flag in ONE_OFF:
            assert variable not in text, f"{command} --help names {variable}, which is not read"
        else:
            assert f"[env var: {variable}" in text, f"{command} --help does not name {variable}"


def test_help_says_which_flags_have_variables() -> None:
    text = _help()
    assert "environment variable" in text and "--input, --wait and --json" in text


# -- what runs and show print ------------------------------------------------------------


def _rows(lines: list[str]) -> list[dict[str, str]]:
    """A printed table as one dict per row, keyed by the header's column names."""
    names = lines[0].split()
    return [
        dict(zip(names, line.split(maxsplit=len(names) - 1), strict=True)) for line in lines[1:]
    ]


def test_runs_prints_a_header_and_keeps_state_reason_and_mode_apart(
    copy: Path, template: Template
) -> None:
    lines = ok("runs", "--store", _url(copy)).stdout.splitlines()
    assert lines[0].split() == [
        "RUN",
        "STATE",
        "REASON",
        "MODE",
        "AGENT",
        "EPOCH",
        "REQUEUES",
        "CREATED",
    ]
    rows = {row["RUN"]: row for row in _rows(lines)}
    assert rows.keys() == {template.completed_run, template.unserved_run, template.confused_run}
    done = rows[template.completed_run]
    assert (done["STATE"], done["REASON"], done["MODE"], done["AGENT"]) == (
        "completed",
        "completed",
        "queued",
        "payer",
    )
    waiting = rows[template.unserved_run]
    assert (waiting["STATE"], waiting["REASON"], waiting["AGENT"]) == (
        "queued",
        "-",
        "no-such-agent",
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", done["CREATED"])
    # Aligned: every cell of a column starts where its name does.
    for name in ("STATE", "MODE", "EPOCH", "CREATED"):
        start = lines[0].index(name)
        assert all(line[start - 2 : start] == "  " and line[start] != " " for line in lines)


def test_show_prints_each_calls_arguments_shortened_and_the_error_of_a_failed_one(
    copy: Path, template: Template
) -> None:
    lines = ok("show", template.confused_run, "--store", _url(copy)).stdout.splitlines()
    assert _rows(lines[:2])[0]["STATE"] == "completed"
    header = next(i for i, line in enumerate(lines) if line.startswith("SEQ"))
    steps = lines[header:]
    assert steps[0].split() == ["SEQ", "EPOCH", "STEP", "EFFECT", "STATUS", "TOOK"]
    assert steps[2].split()[:5] == ["1", "1", "delete_everything", "non_idempotent_write", "failed"]
    under_step = " " * steps[0].index("STEP")
    arguments, error = steps[3], steps[4]
    assert arguments.startswith(under_step + 'arguments: {"path": "/", "why": "tidy tidy ')
    assert arguments.endswith("...") and len(arguments.strip()) <= 100
    assert error == under_step + "error: unknown tool 'delete_everything' (available: nap)"
    assert steps[5].split()[:3] == ["2", "1", "provider"]


def _resolve_commands(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "leaseward resolve" in line]


def test_show_of_an_interrupted_write_prints_the_commands_that_resolve_it(url: str) -> None:
    ok("migrate", "--store", url)
    submitted = ok("submit", "payer", "--input", '{"order": "A-7"}', "--store", url).stdout.strip()
    three_hours = 3 * 3600.0
    run_id = anyio.run(interrupt_a_charge, url, three_hours)
    assert run_id == submitted
    time.sleep(0.1)
    ok("reap", "--once", "--store", url)
    assert show(url, run_id)["reason"] == "interrupted_write"

    text = ok("show", run_id, "--store", url).stdout
    assert 'input: {"order": "A-7"}' in text
    assert "call charge-1 of charge (step 1) was interrupted: nobody knows" in text
    assert "idempotency key key-of-the-charge" in text
    assert 'arguments: {"amount_cents": 500}' in text
    commands = _resolve_commands(text)
    assert commands == [
        f"leaseward resolve {run_id} --applied --step 1 --store {url}",
        f"leaseward resolve {run_id} --not-applied --step 1 --store {url}",
    ]
    # With the store in the environment the commands need no --store.
    from_env = ok("show", run_id, env=base_env(LEASEWARD_STORE=url)).stdout
    assert _resolve_commands(from_env) == [
        f"leaseward resolve {run_id} --applied --step 1",
        f"leaseward resolve {run_id} --not-applied --step 1",
    ]

    # A verdict for a call at another step than the one interrupted changes nothing.
    other = leaseward("resolve", run_id, "--applied", "--step", "0", "--store", url)
    assert_one_line_error(other, 1, "call charge-1 of charge (step 1), not step 0")
    negative = leaseward("resolve", run_id, "--applied", "--step", "-1", "--store", url)
    assert_one_line_error(negative, 2, "--step")
    assert show(url, run_id)["reason"] == "interrupted_write"

    # The printed command works as printed.
    resolved = ok(*shlex.split(commands[1])[1:], "--operator", "alice", "--note", "no charge")
    assert "not applied" in resolved.stdout
    lines = ok("show", run_id, "--store", url).stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("SEQ"))
    charge = _rows([lines[header], lines[header + 2]])[0]
    assert (charge["STEP"], charge["STATUS"]) == ("charge", "failed")
    # The three hours between the call and the verdict are not the call's duration.
    assert charge["TOOK"] == "unknown"
    details = lines[header + 3 : header + 5]
    assert details[0].strip() == 'arguments: {"amount_cents": 500}'
    assert re.fullmatch(
        r"resolved: not applied, by alice at \S+Z: no charge", details[1].strip()
    ), details
    assert _resolve_commands("\n".join(lines)) == []


# -- --input from a file -------------------------------------------------------------------


def test_submit_input_from_a_file_over_the_limit_is_refused_without_reading_it_whole(
    copy: Path, tmp_path: Path
) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as file:
        file.truncate(300 * 1024 * 1024)  # sparse: no disk space, but 300 MB to read
    # /dev/zero never ends: only a bounded read of it returns at all.
    for source in (huge, Path("/dev/zero")):
        assert_unchanged(
            copy,
            functools.partial(
                leaseward, "submit", "payer", "--input", f"@{source}", "--store", _url(copy)
            ),
            EXIT_USAGE,
            "larger than the input limit",
        )
    at_limit = tmp_path / "at-limit.json"
    at_limit.write_text(json.dumps("x" * (MAX_INPUT_BYTES - 2)))
    assert at_limit.stat().st_size == MAX_INPUT_BYTES
    ok("submit", "payer", "--input", f"@{at_limit}", "--store", _url(copy))
    at_limit.write_text(json.dumps("x" * (MAX_INPUT_BYTES - 1)))
    assert_unchanged(
        copy,
        lambda: leaseward("submit", "payer", "--input", f"@{at_limit}", "--store", _url(copy)),
        EXIT_USAGE,
        "larger than the input limit",
    )


# -- databases this user may only read, or not open at all ---------------------------------


def test_the_looking_commands_work_on_a_database_nobody_may_write(
    copy: Path, template: Template
) -> None:
    url = _url(copy)
    before = snapshot(copy)
    with unwritable(copy / "runs.db", copy):
        listed = ok("runs", "--json", "--store", url).json()
        assert {r["id"] for r in listed} == {
            template.completed_run,
            template.unserved_run,
            template.confused_run,
        }
        assert "delete_everything" in ok("show", template.confused_run, "--store", url).stdout
        assert ok("dead-letters", "--store", url).stdout == "no runs\n"
        for command in (("submit", "payer"), ("daemon", "--app", "demo_app:app")):
            result = leaseward(*command, "--store", url)
            assert_one_line_error(result, EXIT_FAILURE, "unable to open database file")
    assert snapshot(copy) == before


def test_a_daemon_on_a_database_it_cannot_write_exits_at_start_in_one_line(copy: Path) -> None:
    database = copy / "runs.db"
    before = database.read_bytes()
    with unwritable(database):
        result = leaseward("daemon", "--app", "demo_app:app", "--store", _url(copy))
    assert_one_line_error(result, EXIT_FAILURE, "cannot write to the store", "readonly database")
    assert database.read_bytes() == before


@pytest.mark.parametrize("where", ["/proc", "an unwritable directory"])
def test_a_database_that_cannot_be_opened_is_one_line_every_time(
    store_dir: Path, where: str
) -> None:
    # aiosqlite's thread used to answer a failed open after the event loop had closed,
    # adding a traceback to the error line most of the time: many tries catch it.
    url = "sqlite:////proc/leaseward-test.db" if where == "/proc" else _url(store_dir)
    with unwritable(store_dir), ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: leaseward("migrate", "--store", url), range(20)))
    for result in results:
        assert_one_line_error(result, EXIT_FAILURE, "unable to open database file")
    assert list(store_dir.iterdir()) == []


# -- what show says about leases, retries and the epoch an operator reopened ----------------


def _line(text: str, start: str) -> str:
    found = [line for line in text.splitlines() if line.startswith(start)]
    assert len(found) == 1, text
    return found[0]


def test_show_says_a_lease_expired_and_what_the_next_reaper_pass_does(url: str) -> None:
    run_id = _expired_claim(url)
    text = ok("show", run_id, "--store", url).stdout
    assert re.fullmatch(
        r"lease expired \d+\.\d s ago; the next reaper pass requeues it",
        _line(text, "lease expired"),
    )


def test_show_says_nobody_reaps_an_expired_lease_while_no_worker_is_live(url: str) -> None:
    """Every worker of the store died: no reaper pass comes by itself, so the operator is
    told how to make one, instead of waiting for it."""
    run_id = _expired_claim(url)
    text = ok("show", run_id, "--store", url).stdout
    assert _line(text, "note:") == (
        "note: no live worker reaps expired leases now: start a daemon, "
        "or run `leaseward reap --once`"
    )


def test_runs_marks_a_running_run_whose_lease_expired_as_the_console_does(url: str) -> None:
    run_id = _expired_claim(url)
    text = ok("runs", "--store", url).stdout
    assert _line(text, run_id).endswith("  lease expired"), text
    assert "lease expired" not in ok("runs", "--state", "completed", "--store", url).stdout


def test_show_says_an_expired_lease_over_an_interrupted_write_is_dead_lettered(
    url: str,
) -> None:
    ok("migrate", "--store", url)
    ok("submit", "payer", "--input", "{}", "--store", url)
    run_id = anyio.run(interrupt_a_charge, url, 1.0)
    time.sleep(0.1)
    text = ok("show", run_id, "--store", url).stdout
    assert _line(text, "lease expired").endswith(
        "ago; the next reaper pass dead-letters it (interrupted_write)"
    )


def test_show_prints_a_requeued_runs_failure_class_and_when_its_retry_is_due(url: str) -> None:
    run_id = _expired_claim(url)
    ok("reap", "--once", "--store", url)
    # A worker lost once is retried at once.
    text = ok("show", run_id, "--store", url).stdout
    assert _line(text, "failure class") == "failure class: connection"
    assert _line(text, "requeued") == "requeued 1 time; the next attempt is due now"
    # Lost again: from the second retry on, the run backs off (60 s by default).
    assert anyio.run(_claim_with_a_tiny_lease, url, "greeter") == run_id
    time.sleep(0.1)
    before_reap = time.monotonic()
    ok("reap", "--once", "--store", url)
    text = ok("show", run_id, "--store", url).stdout
    # However slowly the two processes start, the wait shown is 60 s less what passed.
    elapsed = time.monotonic() - before_reap
    due = re.fullmatch(
        r"requeued 2 times; the next attempt is due in (\d+) s \(at \S+Z\)",
        _line(text, "requeued"),
    )
    assert due is not None, text
    assert 60 - elapsed - 1 <= int(due[1]) <= 60
    assert show(url, run_id)["failure_class"] == "connection"


def test_resolve_names_the_epoch_that_show_then_reports(
    daemons: DaemonPool, url: str, calls_file: Path
) -> None:
    ok("migrate", "--store", url)
    ok("submit", "payer", "--input", "{}", "--store", url)
    run_id = anyio.run(interrupt_a_charge, url, 1.0)
    time.sleep(0.1)
    ok("reap", "--once", "--store", url)
    dead = show(url, run_id)
    assert (dead["state"], dead["reason"], dead["epoch"]) == (
        "dead_lettered",
        "interrupted_write",
        1,
    )

    resolved = ok("resolve", run_id, "--applied", "--store", url).stdout
    said = re.fullmatch(
        rf"run {run_id}: call recorded as applied; requeued: it resumes from its journal "
        r"at epoch (\d+)\n",
        resolved,
    )
    assert said is not None, resolved
    daemon = daemons.start(url, worker_id="acc-resolve", DEMO_CALLS_FILE=str(calls_file))
    daemon.wait_for("run.settled", run_id=run_id, state="completed")
    done = show(url, run_id)
    assert done["epoch"] == int(said[1])
    # The steps of the attempt that resumed it carry that epoch too.
    assert {s["epoch"] for s in done["steps"] if s["seq"] >= 2} == {int(said[1])}
    assert not calls_file.exists() or read_lines(calls_file) == [], "the charge ran again"


# -- a change whose answer the network lost ---------------------------------------------


@pytest.mark.anyio
async def test_a_change_whose_commit_went_unanswered_is_never_said_to_have_failed(
    pg_url: str,
) -> None:
    """Each command's COMMIT reaches the server and its answer is lost (opening the store
    commits nothing: a command never migrates it). A submit finds the run it stored and prints it;
    the others say the change may have been made, naming the run to look at, for an
    operator told "failed" would do it again."""
    from tests.integration.pg_proxy import CommitDropper

    parts = urlsplit(pg_url)
    database = parts.path.lstrip("/")
    queued = ok("submit", "payer", "--store", pg_url).stdout.strip()
    async with CommitDropper(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        url = proxy.url(database, user=parts.username or "postgres")

        async def lost(*args: str) -> Result:
            proxy.arm(1, skip=0)
            result = await anyio.to_thread.run_sync(lambda: leaseward(*args, "--store", url))
            assert proxy.dropped and not proxy.armed, result.describe()
            proxy.dropped = 0
            return result

        submitted = await lost("submit", "greeter", "--input", '"hi"')
        cancelled = await lost("cancel", queued)
    assert submitted.returncode == 0, submitted.describe()
    assert show(pg_url, submitted.stdout.strip())["state"] == "queued"
    assert_one_line_error(cancelled, EXIT_FAILURE, f"cancel of run {queued}", "may have")
    assert show(pg_url, queued)["state"] == "cancelled"
