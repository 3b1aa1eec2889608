"""The versioned list of schema migrations; each version has one SQL file per dialect."""

from __future__ import annotations

from importlib import resources

import attrs

__all__ = ["MIGRATIONS", "Migration", "split_statements"]


@attrs.frozen
class Migration:
    version: int
    name: str

    def statements(self, dialect: str) -> list[str]:
        filename = f"{self.version:04d}_{self.name}.{dialect}.sql"
        text = (
            resources.files("leaseward.storage").joinpath("sql", "migrations", filename).read_text()
        )
        return split_statements(text)


def split_statements(text: str) -> list[str]:
    """The statements of a migration file, each ending with a semicolon at the end of a
    line. A trigger's body (from a line ending in BEGIN to a line "END;") and a function
    body quoted in $$ hold semicolons of their own, and stay in their statement."""
    statements: list[str] = []
    lines: list[str] = []
    in_quoted_body = in_trigger_body = False
    for line in text.splitlines():
        code = line.strip()
        if not code or code.startswith("--"):
            continue
        lines.append(line)
        if line.count("$$") % 2:
            in_quoted_body = not in_quoted_body
        if in_quoted_body:
            continue
        if code.upper().endswith("BEGIN"):
            in_trigger_body = True
        elif in_trigger_body and code.upper() == "END;":
            in_trigger_body = False
        if not in_trigger_body and code.endswith(";"):
            statements.append("\n".join(lines).strip().removesuffix(";"))
            lines = []
    if lines:
        statements.append("\n".join(lines).strip())
    return statements


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
    Migration(10, "trace_context"),
    Migration(11, "step_sources"),
    Migration(12, "hot_renewals"),
    Migration(13, "journal_rowid"),
    Migration(14, "journal_in_one_statement"),
    Migration(15, "journal_checks"),
    Migration(16, "fences_and_settlements"),
    Migration(17, "claims_planned_once"),
    Migration(18, "worker_drains"),
)
