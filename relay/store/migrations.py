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
from relay.store.sql.drivers.pgbatch import ARGUMENTS as BATCH_ARGUMENTS
from relay.store.sql.drivers.pgbatch import FUNCTION as BATCH_FUNCTION
from relay.store.sql.migrate import (
    LOCK_TIMEOUT_MS,
    Revision,
    downgrade,
    offline_sql,
    revisions,
    upgrade,
)
from relay.store.sql.schema import HEAD_REVISION as HEAD
from relay.store.sql.schema import metadata
from relay.store.url import StoreTarget, resolve

__all__ = [
    "BATCH_ARGUMENTS",
    "BATCH_FUNCTION",
    "HEAD",
    "LOCK_TIMEOUT_MS",
    "TABLES",
    "Revision",
    "Standing",
    "downgrade",
    "later",
    "offline_sql",
    "revisions",
    "standing",
    "upgrade",
]

# The relay tables at HEAD, each after the tables it references (what a runtime role is granted).
TABLES = tuple(table.name for table in metadata.sorted_tables)


async def standing(store: str | StoreTarget | None = None) -> Standing:
    """Where the SQL store at `store` (a URL or a resolved target; None: the default store)
    stands against `HEAD`: its revision and compatibility record, read without writing.

    A JSON or memory store has no schema: `InvalidInputError`.
    """
    return await migrate.standing(store if isinstance(store, StoreTarget) else resolve(store))
