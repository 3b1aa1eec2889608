"""A migration file is split into statements at the semicolons that end them, not at
those inside a trigger's or a function's body."""

from __future__ import annotations

from leaseward.storage.migrations import MIGRATIONS, split_statements


def test_statements_end_at_semicolons_that_end_a_line() -> None:
    text = "-- a comment; not a statement\nCREATE TABLE t (a INT);\n\nCREATE INDEX i\nON t (a);\n"
    assert split_statements(text) == ["CREATE TABLE t (a INT)", "CREATE INDEX i\nON t (a)"]


def test_a_trigger_body_stays_in_its_statement() -> None:
    text = (
        "CREATE TRIGGER t AFTER INSERT ON runs\nBEGIN\n"
        "    UPDATE c SET n = n + 1;\n    UPDATE d SET n = n + 1;\nEND;\nSELECT 1;\n"
    )
    assert split_statements(text) == [
        "CREATE TRIGGER t AFTER INSERT ON runs\nBEGIN\n"
        "    UPDATE c SET n = n + 1;\n    UPDATE d SET n = n + 1;\nEND",
        "SELECT 1",
    ]


def test_a_dollar_quoted_function_body_stays_in_its_statement() -> None:
    text = (
        "CREATE FUNCTION f() RETURNS trigger\nLANGUAGE plpgsql AS $$\nBEGIN\n"
        "    INSERT INTO c VALUES (1);\n    RETURN NULL;\nEND\n$$;\n"
        "CREATE FUNCTION g() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;\n"
    )
    (first, second) = split_statements(text)
    assert first.startswith("CREATE FUNCTION f()") and first.endswith("END\n$$")
    assert second == "CREATE FUNCTION g() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$"


def test_every_migration_splits_into_statements_that_end_without_a_dangling_body() -> None:
    for migration in MIGRATIONS:
        for dialect in ("sqlite", "postgresql"):
            for statement in migration.statements(dialect):
                assert statement.count("$$") % 2 == 0, (migration, statement)
                assert not statement.endswith(";"), (migration, statement)
