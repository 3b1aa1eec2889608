"""The CLI against input a newcomer or a model could give: spans no clock can add, store
URLs with impossible ports, text no store encodes, and names that would drive a terminal.
Each is one line and changes nothing, or is shown escaped."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from leaseward import Reason, ToolEffect
from leaseward.runtime.lifecycle import Event
from leaseward.runtime.settlements import Settlement
from leaseward.storage import BatchItem, open_store
from tests.acceptance.acceptance_support import (
    assert_one_line_error,
    base_env,
    leaseward,
    ok,
    show,
    sqlite_url,
)
from tests.file_modes import unwritable
from tests.integration.support import ghost_claims, intent, provider_step
from tests.integration.test_leases import CHARGE

EXIT_USAGE = 2
# An escape sequence, a terminal title, a bell, a right-to-left override and a C1 control.
EVIL = "ag\x1b[31mRED\x1b]0;PWNED\x07\u202eevil\u009b2J"


@pytest.fixture
def url(tmp_path: Path) -> str:
    store = sqlite_url(tmp_path / "runs.db")
    ok("migrate", "--store", store)
    return store


@pytest.mark.parametrize(
    ("flag", "span"),
    [
        ("--lease-seconds", "inf"),
        ("--reap-interval-seconds", "1e400"),
        ("--poll-interval-seconds", "31536001"),
    ],
)
def test_a_daemon_span_past_a_year_is_refused_before_it_starts(
    url: str, flag: str, span: str
) -> None:
    result = leaseward(
        "daemon", "--app", "examples.quickstart:build_app", flag, span, "--store", url
    )
    assert_one_line_error(result, EXIT_USAGE, flag, "at most 31536000 (a year)")
    assert ok("workers", "--store", url).stdout.strip() == "no workers"


def test_a_wait_past_a_year_is_refused_and_queues_nothing(url: str) -> None:
    result = leaseward(
        "submit", "greeter", "--input", "1", "--wait", "--timeout", "inf", "--store", url
    )
    assert_one_line_error(result, EXIT_USAGE, "--timeout", "at most 31536000")
    assert ok("runs", "--store", url).stdout.strip() == "no runs"


@pytest.mark.parametrize(
    ("port", "said"), [("99999", "'99999' is not a port number"), ("abc", "'abc' is not a port")]
)
def test_a_postgresql_url_with_an_impossible_port_is_one_line(port: str, said: str) -> None:
    result = leaseward("runs", "--store", f"postgresql://postgres@127.0.0.1:{port}/postgres")
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.describe()
    assert_one_line_error(result, result.returncode, said)


def test_an_input_holding_a_lone_surrogate_is_queued_with_its_key_and_found_again(
    url: str,
) -> None:
    first = ok(
        "submit", "greeter", "--input", '"\\ud800"', "--idempotency-key", "k", "--store", url
    )
    again = ok(
        "submit", "greeter", "--input", '"\\ud800"', "--idempotency-key", "k", "--store", url
    )
    assert first.stdout == again.stdout
    assert show(url, first.stdout.strip())["state"] == "queued"


def test_names_anyone_wrote_are_shown_escaped_and_only_queued_runs_are_unserved(
    url: str,
) -> None:
    cancelled = ok("submit", EVIL, "--input", "1", "--store", url).stdout.strip()
    ok("cancel", cancelled, "--store", url)
    queued = ok("submit", EVIL, "--input", "2", "--store", url).stdout.strip()
    listed = ok("runs", "--store", url).stdout
    assert not any(c in listed for c in ("\x1b", "\x07", "\u202e", "\u009b")), listed
    assert "ag\\x1b[31mRED\\x1b]0;PWNED\\x07\\u202eevil\\x9b2J" in listed
    rows = {line.split()[0]: line for line in listed.splitlines()[1:]}
    assert "no live worker serves" in rows[queued]
    assert "no live worker serves" not in rows[cancelled]
    shown = ok("show", queued, "--store", url).stdout
    assert not any(c in shown for c in ("\x1b", "\x07", "\u202e", "\u009b")), shown


def test_an_argument_that_is_not_utf8_is_one_line_and_changes_nothing(url: str) -> None:
    result = leaseward("submit", "ag\udcff", "--input", "1", "--store", url)
    assert_one_line_error(result, EXIT_USAGE, "the argument 'ag\\xff' is not UTF-8 text")
    assert ok("runs", "--store", url).stdout.strip() == "no runs"


def test_a_count_past_any_store_is_one_line(url: str) -> None:
    result = leaseward("runs", "--limit", "99999999999999999999", "--store", url)
    assert_one_line_error(result, EXIT_USAGE, "--limit", "must be from 1 to 1,000,000,000")


def test_a_timeout_without_a_wait_is_a_usage_error_and_queues_nothing(url: str) -> None:
    result = leaseward("submit", "greeter", "--input", "1", "--timeout", "5", "--store", url)
    assert_one_line_error(result, EXIT_USAGE, "--timeout bounds --wait")
    assert ok("runs", "--store", url).stdout.strip() == "no runs"


def test_a_store_in_a_directory_nobody_may_write_says_so(tmp_path: Path) -> None:
    directory = tmp_path / "mounted"
    directory.mkdir()
    url = sqlite_url(directory / "runs.db")
    ok("migrate", "--store", url)
    with unwritable(directory):
        result = leaseward("submit", "greeter", "--input", "1", "--store", url)
        assert_one_line_error(result, 1, f"the directory {str(directory)!r} is not writable")
        assert ok("runs", "--store", url).stdout.strip() == "no runs"


def test_a_store_under_the_home_directory_is_where_a_shell_would_put_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(HOME=str(home))
    done = ok("migrate", "--store", "sqlite:///~/runs.db", env=env)
    assert str(home / "runs.db") in done.stdout
    assert (home / "runs.db").is_file()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--console-port", "9000"), "--console-port tunes --console"),
        (("--console-host", "127.0.0.2"), "--console-host tunes --console"),
        (("--metrics-host", "0.0.0.0"), "--metrics-host tunes --metrics-port"),
    ],
)
def test_a_daemon_flag_that_tunes_one_not_given_is_a_usage_error(
    url: str, flags: tuple[str, ...], said: str
) -> None:
    result = leaseward("daemon", "--app", "examples.quickstart:build_app", *flags, "--store", url)
    assert_one_line_error(result, EXIT_USAGE, said)
    assert ok("workers", "--store", url).stdout.strip() == "no workers"


async def _dead_letter_over(url: str, call_id: str) -> str:
    """A run dead-lettered over an open charge whose call id a model chose."""
    store = await open_store(url)
    try:
        opened = msgspec.structs.replace(
            intent(1, ToolEffect.NON_IDEMPOTENT_WRITE, "k"), call_id=call_id
        )
        run_id = await ghost_claims(store, "payer", (provider_step(0, CHARGE), opened))
        run = await store.get_run(run_id)
        assert run is not None
        settlement = Settlement(Event.DEAD_LETTER, Reason.INTERRUPTED_WRITE, error="interrupted")
        await store.commit_batch([BatchItem(run_id, run.epoch, settlement=settlement)])
        return run_id
    finally:
        await store.aclose()


def test_an_error_naming_what_a_model_wrote_is_printed_escaped(url: str) -> None:
    run_id = anyio.run(_dead_letter_over, url, EVIL)
    result = leaseward("resolve", run_id, "--applied", "--step", "7", "--store", url)
    assert_one_line_error(result, 1, "not step 7")
    assert not any(c in result.stderr for c in ("\x1b", "\x07", "\u202e", "\u009b"))
    assert "ag\\x1b[31mRED" in result.stderr


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("connect_timeout_seconds=inf", "at most 31536000"),
        ("command_timeout_seconds=1e400", "at most"),
    ],
)
def test_a_postgresql_url_option_past_a_year_is_one_line(query: str, said: str) -> None:
    result = leaseward("runs", "--store", f"postgresql://postgres@127.0.0.1/postgres?{query}")
    assert_one_line_error(result, EXIT_USAGE, said)


def test_a_postgresql_url_refused_for_its_port_does_not_echo_its_password() -> None:
    result = leaseward("runs", "--store", "postgresql://alice:s3cret@127.0.0.1:54321x/prod")
    assert_one_line_error(result, EXIT_USAGE, "'54321x' is not a port number")
    assert "s3cret" not in result.stderr


@pytest.mark.parametrize(
    ("store", "said"),
    [
        ("postgressql://alice:s3cret@db.example:5432/prod", "unknown scheme 'postgressql'"),
        ("postgresql:/alice:s3cret@db.example:5432/prod", "is not a URL"),
        ("mysql://alice:s3cret@home@db.example/prod", "unknown scheme 'mysql'"),
        ("sqlite://alice:s3cret@db.example/runs.db", "names a host"),
        ("postgresql://:s3cret@", "names no server or database"),
    ],
)
def test_a_store_url_refused_for_its_form_does_not_echo_its_password(store: str, said: str) -> None:
    result = leaseward("runs", "--store", store)
    assert_one_line_error(result, EXIT_USAGE, said)
    assert "s3cret" not in result.stderr
