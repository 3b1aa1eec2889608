"""The schema of a store: bringing it up to date, and which version it is at."""

from __future__ import annotations

from leaseward.runtime.errors import StoreError
from leaseward.storage.concern import StoreConcern
from leaseward.storage.migrations import MIGRATIONS

__all__ = ["Migrator"]


class Migrator(StoreConcern):
    """Applies the migrations this leaseward knows, once, whoever starts first."""

    async def migrate(self) -> int:
        q = self._queries
        async with self._executor.transaction():
            # Two processes starting on a new database must not both migrate it.
            await self._executor.execute(q["lock_migrations"])
            present = await self._executor.fetch_one(q["schema_present"])
            if present is not None and present["present"]:
                # A current schema needs no write: a database this process may only
                # read would get through, and then fail at every claim.
                try:
                    await self._executor.execute(q["check_writable"])
                except StoreError as exc:
                    raise StoreError(f"cannot write to the store: {exc.message}") from exc
            await self._executor.execute(q["create_migrations_table"])
            applied = await self._applied_migrations()
            newest = MIGRATIONS[-1].version
            if applied and max(applied) > newest:
                raise StoreError(
                    f"the database schema is at version {max(applied)}, newer than this "
                    f"leaseward knows ({newest}); upgrade leaseward"
                )
            # Every version not applied yet, not only those above the newest applied:
            # a version numbered below one merged before it must still run.
            for migration in MIGRATIONS:
                if migration.version in applied:
                    continue
                for statement in migration.statements(self._executor.dialect):
                    await self._executor.execute(statement)
                await self._executor.execute(
                    q["record_migration"],
                    {"version": migration.version, "name": migration.name, "now": self._now()},
                )
        return newest

    async def schema_present(self) -> bool:
        """Whether this database has been migrated at least once (by any version)."""
        async with self._executor.reading():
            row = await self._executor.fetch_one(self._queries["schema_present"])
        return row is not None and bool(row["present"])

    async def schema_version(self) -> int:
        """The version this database's schema is complete up to: the newest migration
        applied with every one this leaseward knows before it (or a version newer than
        it knows); 0 if it has none. Changes nothing."""
        async with self._executor.reading():
            present = await self._executor.fetch_one(self._queries["schema_present"])
            if present is None or not present["present"]:
                return 0
            applied = await self._applied_migrations()
        if applied and max(applied) > MIGRATIONS[-1].version:
            return max(applied)
        complete = 0
        for migration in MIGRATIONS:
            if migration.version not in applied:
                break
            complete = migration.version
        return complete

    async def _applied_migrations(self) -> set[int]:
        rows = await self._executor.fetch_all(self._queries["applied_migrations"])
        return {int(row["version"]) for row in rows}
