"""The SQL store's schema for whoever is not the store: its head, where a database stands
against it, and migrating. The one door to `relay.store.sql` for the rest of `relay` (the CLI,
`health`, the operator page), and for hosts.

    target = resolve("postgresql://relay@db/relay")  # relay.store.resolve
    if (await standing(target)).below:
        await upgrade(target)

Nothing outside `relay.store` imports `relay.store.sql` (tests/unit/test_sql_layout.py).
"""

from __future__ import annotations

from relay.store.sql import migrate
from relay.store.sql.compat import Standing, later
from relay.store.sql.drivers import pgbatch
from relay.store.sql.migrate import Revision, downgrade, offline_sql, revisions, upgrade
from relay.store.sql.schema import HEAD_REVISION, metadata
from relay.store.sql.version_table import NAME as VERSION_TABLE_NAME
from relay.store.url import StoreTarget, resolve

__all__ = [
    "BATCH_ARGUMENTS",
    "BATCH_FUNCTION",
    "HEAD",
    "LOCK_TIMEOUT_MS",
    "TABLES",
    "VERSION_TABLE",
    "Revision",
    "Standing",
    "downgrade",
    "later",
    "offline_sql",
    "revisions",
    "standing",
    "upgrade",
]

HEAD: str = HEAD_REVISION
"""The schema head: the revision this code's migrations end at, and the one it runs on."""
TABLES: tuple[str, ...] = tuple(table.name for table in metadata.sorted_tables)
"""The relay tables at `HEAD`, each after those it references (a runtime role's DML grants)."""
VERSION_TABLE: str = VERSION_TABLE_NAME
"""The relay's own Alembic version table (never the application's `alembic_version`)."""
BATCH_FUNCTION: str = pgbatch.FUNCTION
"""The Postgres function a store's write batches call (a runtime role's EXECUTE grant)."""
BATCH_ARGUMENTS: tuple[str, ...] = pgbatch.ARGUMENTS
"""Its argument types, as `GRANT EXECUTE ON FUNCTION` names them."""
LOCK_TIMEOUT_MS: int = migrate.LOCK_TIMEOUT_MS
"""How long a migration waits for a table lock before it gives up, changing nothing."""


async def standing(store: str | StoreTarget | None = None) -> Standing:
    """Where the SQL store at `store` (a URL or a resolved target; None: the default store)
    stands against `HEAD`: its revision and compatibility record, read without writing. A JSON
    or memory store has no schema: `InvalidInputError`."""
    return await migrate.standing(store if isinstance(store, StoreTarget) else resolve(store))
