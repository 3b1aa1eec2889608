"""The versioned list of schema migrations; each version has one SQL file per dialect."""

from __future__ import annotations

from importlib import resources

import attrs

__all__ = ["MIGRATIONS", "Migration"]


@attrs.frozen
class Migration:
    version: int
    name: str

    def statements(self, dialect: str) -> list[str]:
        filename = f"{self.version:04d}_{self.name}.{dialect}.sql"
        text = (
            resources.files("leaseward.storage").joinpath("sql", "migrations", filename).read_text()
        )
        # DDL here has no semicolons inside statements, so splitting on them is exact.
        return [part.strip() for part in text.split(";") if _has_sql(part)]


def _has_sql(part: str) -> bool:
    return any(line.strip() and not line.strip().startswith("--") for line in part.splitlines())


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial"),
    Migration(2, "operator_resolution"),
    Migration(3, "workers_and_retention"),
    Migration(4, "statement_clock"),
    Migration(5, "submit_keys"),
    Migration(6, "approvals"),
    Migration(7, "idempotency_keys"),
    Migration(8, "lease_renewals"),
    Migration(9, "run_listing"),
)
