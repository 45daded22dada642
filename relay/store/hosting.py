"""The relay inside an application's own database: what the application's tools need.

The relay keeps its revision in its own version table (`relay_alembic_version`) and, on Postgres,
its objects in its own schema when the URL names one (`?schema=relay`), so the application's
Alembic chain and the relay's never meet. Two helpers for the application's Alembic `env.py`
keep its autogenerate (and `alembic check`) from offering to drop the relay's tables:

    from relay.store.hosting import include_name, include_object

    context.configure(
        connection=connection,
        target_metadata=metadata,
        include_name=include_name,
        include_object=include_object,
    )

and the relay's migrations, called from the application's release script or a Django migration:

    from relay.store.hosting import migrate

    migrate("postgresql://owner@db/app?schema=relay")  # the revisions applied, oldest first

See docs/in-your-database.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Mapping
from typing import Any

from relay.store import migrations
from relay.store.url import StoreTarget, resolve

__all__ = ["RELAY_TABLES", "include_name", "include_object", "migrate", "migrate_async"]

RELAY_TABLES: frozenset[str] = frozenset((*migrations.TABLES, migrations.VERSION_TABLE))
"""Every table the relay's migrations make (its version table included)."""


def include_name(name: str | None, type_: str, parent_names: Mapping[Any, str | None]) -> bool:
    """Alembic's `include_name` hook: False for the relay's tables (and what is on them), so a
    host's autogenerate neither reflects nor drops them; True for everything else."""
    if type_ == "table":
        return name not in RELAY_TABLES
    return parent_names.get("table_name") not in RELAY_TABLES


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Alembic's `include_object` hook: False for the relay's tables and their indexes and
    constraints (for hosts whose Alembic reflects before it filters by name)."""
    if type_ == "table":
        return name not in RELAY_TABLES
    table = getattr(obj, "table", None)
    return getattr(table, "name", None) not in RELAY_TABLES


async def migrate_async(url: str | StoreTarget | None = None) -> list[str]:
    """Upgrade the relay's schema in the database at `url` (None: `$TALARIA_RELAY_STORE_URL`,
    else the embedded SQLite file) to this release's head; the revisions applied, oldest first.

    The same step as `talaria-relay migrate`: safe beside replicas, a contract migration refused
    (`SchemaError`) while live replicas of older code would break on it.
    """
    target = url if isinstance(url, StoreTarget) else resolve(url)
    return [revision.id for revision in await migrations.upgrade(target)]


def migrate(url: str | StoreTarget | None = None) -> list[str]:
    """`migrate_async` for synchronous code (a release script, a Django migration); from a thread
    of its own when the caller already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(migrate_async(url))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, migrate_async(url)).result()
