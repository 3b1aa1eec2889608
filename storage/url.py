"""Store URLs: ``sqlite:///relative.db``, ``sqlite:////absolute/path.db``,
``postgresql://user@host:5432/db``; options as a query."""

from __future__ import annotations

import os
import re
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

from leaseward.runtime.clock import MAX_DURATION_SECONDS
from leaseward.runtime.errors import ConfigurationError
from leaseward.storage.sqlite import BUSY_TIMEOUT_MS, SYNCHRONOUS_MODES, SQLiteOptions

__all__ = [
    "COMMAND_TIMEOUT_SECONDS",
    "CONNECT_TIMEOUT_SECONDS",
    "DEFAULT_POOL_SIZE",
    "MAX_POOL_SIZE",
    "PostgresOptions",
    "StoreURL",
    "parse_store_url",
    "pool_size_for",
    "store_location",
    "without_password",
]

CONNECT_TIMEOUT_SECONDS = 5.0
COMMAND_TIMEOUT_SECONDS = 15.0
DEFAULT_POOL_SIZE = 4
MAX_POOL_SIZE = 20


def pool_size_for(concurrency: int) -> int:
    """PostgreSQL connections for a worker that runs ``concurrency`` runs at once.

    The Persister writes on one, or on two for a server a network away (two batches on
    it at once); claims, the reaper and client reads take a few more; runs that start
    together load their journals in parallel.
    """
    return max(DEFAULT_POOL_SIZE, min(MAX_POOL_SIZE, 4 + concurrency // 4))


@attrs.frozen
class PostgresOptions:
    """Where a PostgreSQL store is and how to use it.

    ``dsn`` is the URL without leaseward's own options; the rest of its query
    (``sslmode=...``, ...) goes to the driver. ``pool_size`` None means "size it
    from the runtime's concurrency".
    """

    dsn: str
    pool_size: int | None = None
    connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS
    command_timeout_seconds: float = COMMAND_TIMEOUT_SECONDS

    @property
    def display(self) -> str:
        """The DSN without its password, for messages and logs."""
        return _without_password(urlsplit(self.dsn))


# A user's password in a URL, up to the last @ before the path: a password may hold
# an unescaped @, and a URL refused for its form may not split into parts at all.
_PASSWORD = re.compile(r"([^/:@]*):[^/]*@")


def _shown(url: str) -> str:
    """A URL refused before it could be read, as an error echoes it: no password."""
    return _PASSWORD.sub(r"\1@", url, count=1)


def _without_password(parts: SplitResult) -> str:
    """A PostgreSQL URL as messages and logs show it: no password, no options."""
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@attrs.frozen
class StoreURL:
    scheme: str
    sqlite: SQLiteOptions | None = None
    postgresql: PostgresOptions | None = None

    @property
    def location(self) -> str:
        """Where the store is, as messages and logs name it: a SQLite file's absolute path
        (a relative one means little in a daemon's log), a PostgreSQL URL without password."""
        if self.postgresql is not None:
            return self.postgresql.display
        assert self.sqlite is not None
        path = self.sqlite.path
        return path if path == ":memory:" else os.path.abspath(path)


def without_password(url: str) -> str:
    """``url`` as a command printed for an operator to run gives it: whole, but for a
    PostgreSQL password, written as ``***`` (output gets pasted into tickets)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres") or parts.password is None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.partition(':')[0]}:***@{host}"))


def store_location(url: str) -> str:
    """The location of the store ``url`` names (see ``StoreURL.location``)."""
    return parse_store_url(url).location


def parse_store_url(url: str) -> StoreURL:
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            f"store URL {_shown(url)!r} is not a URL; expected e.g. sqlite:///runs.db"
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        # Not echoed: a URL that cannot be read cannot have its password taken out.
        raise ConfigurationError(f"the store URL is not a URL: {exc}") from None
    if parts.scheme == "sqlite":
        return StoreURL(
            "sqlite", sqlite=_sqlite_options(url, parts.netloc, parts.path, parts.query)
        )
    if parts.scheme in ("postgresql", "postgres"):
        return StoreURL("postgresql", postgresql=_postgres_options(url))
    raise ConfigurationError(
        f"store URL {_shown(url)!r} has an unknown scheme {parts.scheme!r}; "
        "expected sqlite:// or postgresql://"
    )


def _positive_seconds(key: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_DURATION_SECONDS:
        raise ConfigurationError(
            f"store URL option {key}={value!r} is not a positive number of seconds, "
            f"at most {MAX_DURATION_SECONDS:.0f} (a year)"
        )
    return seconds


def _postgres_options(url: str) -> PostgresOptions:
    parts = urlsplit(url)
    if not parts.hostname and not parts.path.strip("/") and not parts.query:
        # postgresql:// alone would mean "everything from PG* variables"; say so explicitly.
        raise ConfigurationError(
            f"store URL {_shown(url)!r} names no server or database; "
            "expected e.g. postgresql://user@host:5432/dbname"
        )
    try:
        # urlsplit reads the port only when asked, and refuses one out of range then.
        parts.port  # noqa: B018
    except ValueError:
        port = parts.netloc.rpartition(":")[2]
        raise ConfigurationError(
            f"store URL {_without_password(parts)!r}: {port!r} is not a port number (0 to 65535)"
        ) from None
    pool_size: int | None = None
    connect_timeout = CONNECT_TIMEOUT_SECONDS
    command_timeout = COMMAND_TIMEOUT_SECONDS
    driver: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "pool_size":
            if not value.isdigit() or int(value) < 1:
                raise ConfigurationError(
                    f"store URL option pool_size={value!r} is not a positive whole number"
                )
            pool_size = int(value)
        elif key == "connect_timeout_seconds":
            connect_timeout = _positive_seconds(key, value)
        elif key == "command_timeout_seconds":
            command_timeout = _positive_seconds(key, value)
        else:
            # sslmode, application_name, ...: the driver knows these.
            driver.append((key, value))
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(driver), ""))
    return PostgresOptions(
        dsn,
        pool_size=pool_size,
        connect_timeout_seconds=connect_timeout,
        command_timeout_seconds=command_timeout,
    )


def _sqlite_options(url: str, netloc: str, path: str, query: str) -> SQLiteOptions:
    if netloc:
        raise ConfigurationError(
            f"store URL {_shown(url)!r} names a host; a SQLite URL is sqlite:///path/to/file.db"
        )
    # sqlite:///runs.db is relative, sqlite:////var/lib/runs.db absolute, and
    # sqlite:///~/runs.db in the home directory, as a shell would read it.
    file_path = os.path.expanduser(path[1:] if path.startswith("/") else path)
    if not file_path:
        raise ConfigurationError(f"store URL {_shown(url)!r} names no database file")
    synchronous = "FULL"
    busy_timeout_ms = BUSY_TIMEOUT_MS
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "synchronous":
            synchronous = value.upper()
            if synchronous not in SYNCHRONOUS_MODES:
                raise ConfigurationError(
                    f"store URL option synchronous={value!r} is not one of "
                    f"{', '.join(m.lower() for m in SYNCHRONOUS_MODES)}"
                )
        elif key == "busy_timeout_ms":
            if not value.isdigit():
                raise ConfigurationError(
                    f"store URL option busy_timeout_ms={value!r} is not a whole number"
                )
            busy_timeout_ms = int(value)
        else:
            raise ConfigurationError(f"store URL option {key!r} is unknown")
    return SQLiteOptions(file_path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms)
