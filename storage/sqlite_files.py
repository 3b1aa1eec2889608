"""The SQLite database file and its write-ahead log, as the writing connection opened them.

SQLite keeps writing through the descriptors it opened: a database file replaced
under a running process (a restore, a deploy that copies a fresh file over it), or
a -wal file deleted (a clean-up of "stray" files), is not noticed, and every commit
after it goes where no other process reads, and where nothing is left once this
one exits. A journal row stored there is no record: the write it stands for could
run again. So each write transaction checks, before its COMMIT, that the names
still lead to the files the connection has open, and the store refuses every
write from the first time they do not.
"""

from __future__ import annotations

import os

from leaseward.runtime.errors import StoreError
from leaseward.runtime.logs import get_logger

__all__ = ["OpenedFiles"]


log = get_logger("leaseward.store")


def _identity(path: str) -> tuple[int, int] | None:
    """The file a name leads to (device and inode), None where it leads nowhere."""
    try:
        stat = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        # Not known to have changed, nor known not to: this write is refused, not the
        # next ones, which may find the directory readable again.
        raise StoreError(f"sqlite: cannot look at {path}: {exc.strerror or exc}") from exc
    return stat.st_dev, stat.st_ino


class OpenedFiles:
    """The database and its -wal, as found when the connection opened them."""

    def __init__(self, path: str, *, logged: bool) -> None:
        self._path = os.path.abspath(path)
        self._database = _identity(self._path)
        # Whether the database is in WAL mode: a file system without the shared memory
        # WAL needs leaves it in rollback mode, with no -wal to check.
        self._logged = logged
        # Created by SQLite at a connection's first read in WAL mode (the store's reader
        # has read by now), and kept while any connection has the database open.
        self._wal = _identity(f"{self._path}-wal") if logged else None
        self.lost: str | None = None
        """Why writes are refused, once a check found the files changed."""

    def check(self) -> None:
        """Inside a write transaction: raise StoreError unless both names still lead to
        the files opened. Two system calls, once a transaction."""
        if self.lost is None:
            self.lost = self._changed()
            if self.lost is not None:
                # Once: every statement after this fails with the same words.
                log.error("store.files_lost", store=self._path, error=self.lost)
        if self.lost is not None:
            raise StoreError(self.lost)

    def _changed(self) -> str | None:
        database = _identity(self._path)
        if database != self._database:
            what = "removed" if database is None else "replaced by another file"
            return self._refusal(f"the database file was {what}")
        if not self._logged:
            return None
        wal = _identity(f"{self._path}-wal")
        if wal is None:
            return self._refusal("its write-ahead log (-wal) was deleted")
        if self._wal is None:
            self._wal = wal
        elif wal != self._wal:
            return self._refusal("its write-ahead log (-wal) was replaced by another file")
        return None

    def _refusal(self, what: str) -> str:
        return (
            f"sqlite: {self._path}: {what} while this process had it open, so what it "
            "would commit now no other process would read, and it could be lost: "
            "every statement is refused from now on; stop every process that uses the "
            "store, and start them again on the files now there"
        )
