"""Store URLs: ``sqlite:///relative.db``, ``sqlite:////absolute/path.db``, options as a query."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import attrs

from runtime.errors import ConfigurationError
from storage.sqlite import BUSY_TIMEOUT_MS, SYNCHRONOUS_MODES, SQLiteOptions

__all__ = ["StoreURL", "parse_store_url"]


@attrs.frozen
class StoreURL:
    scheme: str
    sqlite: SQLiteOptions | None = None


def parse_store_url(url: str) -> StoreURL:
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"store URL {url!r} is not a URL; expected e.g. sqlite:///runs.db")
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return StoreURL(
            "sqlite", sqlite=_sqlite_options(url, parts.netloc, parts.path, parts.query)
        )
    if parts.scheme in ("postgresql", "postgres"):
        raise ConfigurationError("PostgreSQL stores are not available in this version")
    raise ConfigurationError(
        f"store URL {url!r} has an unknown scheme {parts.scheme!r}; expected sqlite://"
    )


def _sqlite_options(url: str, netloc: str, path: str, query: str) -> SQLiteOptions:
    if netloc:
        raise ConfigurationError(
            f"store URL {url!r} names a host; a SQLite URL is sqlite:///path/to/file.db"
        )
    # sqlite:///runs.db is relative, sqlite:////var/lib/runs.db absolute.
    file_path = path[1:] if path.startswith("/") else path
    if not file_path:
        raise ConfigurationError(f"store URL {url!r} names no database file")
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
