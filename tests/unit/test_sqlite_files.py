"""OpenedFiles: which changes to a SQLite store's files refuse its writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from leaseward.runtime.errors import StoreError
from leaseward.storage.sqlite_files import OpenedFiles


def test_files_left_as_they_were_pass_check_after_check(tmp_path: Path) -> None:
    database = tmp_path / "runs.db"
    database.write_bytes(b"db")
    Path(f"{database}-wal").write_bytes(b"log")
    files = OpenedFiles(str(database), logged=True)
    for _ in range(3):
        files.check()
    assert files.lost is None


def test_without_a_write_ahead_log_only_the_database_is_checked(tmp_path: Path) -> None:
    database = tmp_path / "runs.db"
    database.write_bytes(b"db")
    files = OpenedFiles(str(database), logged=False)
    files.check()
    other = tmp_path / "other.db"
    other.write_bytes(b"db")
    os.replace(other, database)
    with pytest.raises(StoreError, match="database file was replaced by another file"):
        files.check()


def test_a_replaced_log_refuses_this_check_and_every_one_after(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    database = tmp_path / "runs.db"
    database.write_bytes(b"db")
    log = Path(f"{database}-wal")
    log.write_bytes(b"log")
    held = log.open("rb")
    request.addfinalizer(held.close)
    files = OpenedFiles(str(database), logged=True)
    files.check()
    replacement = tmp_path / "replacement"
    replacement.write_bytes(b"log")
    os.replace(replacement, log)
    with pytest.raises(StoreError, match=r"write-ahead log \(-wal\) was replaced"):
        files.check()
    # Put back as a file of the same name, it is still not the one SQLite writes to.
    log.unlink()
    log.write_bytes(b"log")
    with pytest.raises(StoreError, match="every statement is refused"):
        files.check()
    assert files.lost is not None and str(database) in files.lost


def test_a_log_replaced_before_the_first_check_is_found(tmp_path: Path) -> None:
    database = tmp_path / "runs.db"
    database.write_bytes(b"db")
    log = Path(f"{database}-wal")
    log.write_bytes(b"log")
    files = OpenedFiles(str(database), logged=True)
    # Held open, as SQLite holds its log: the file system cannot give its inode to the
    # file made in its place.
    with log.open("rb"):
        log.unlink()
        log.write_bytes(b"log")
        with pytest.raises(StoreError, match=r"write-ahead log \(-wal\) was replaced"):
            files.check()


def test_a_path_that_cannot_be_followed_refuses_this_write_only(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "runs.db").write_bytes(b"db")
    link = tmp_path / "link"
    link.symlink_to(real)
    files = OpenedFiles(str(link / "runs.db"), logged=False)
    # A link that leads to itself: the name neither leads to a file nor to none.
    link.unlink()
    link.symlink_to(link)
    with pytest.raises(StoreError, match=r"cannot look at .*symbolic links"):
        files.check()
    link.unlink()
    link.symlink_to(real)
    files.check()
    assert files.lost is None
