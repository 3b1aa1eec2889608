"""Named SQL queries, one file per dialect, read once."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from importlib import resources

__all__ = ["Queries", "load_queries"]

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


class Queries:
    def __init__(self, dialect: str, by_name: dict[str, str]) -> None:
        self.dialect = dialect
        self._by_name = by_name

    def __getitem__(self, name: str) -> str:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no query {name!r} for {self.dialect}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[str]:
        """The names of the dialect's queries (to tell which one a statement runs)."""
        return iter(self._by_name)


def parse_queries(text: str) -> dict[str, str]:
    parts = _NAME.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    by_name: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in by_name:
            raise ValueError(f"query {name!r} is defined twice")
        by_name[name] = body.strip().rstrip(";")
    return by_name


@functools.cache
def load_queries(dialect: str) -> Queries:
    text = (
        resources.files("leaseward.storage")
        .joinpath("sql", "queries", f"{dialect}.sql")
        .read_text()
    )
    return Queries(dialect, parse_queries(text))
