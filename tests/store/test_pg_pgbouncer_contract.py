"""The store contract's Postgres subset, unchanged, through PgBouncer in both pool modes.

Every test of `test_store_contract` runs here on a store URL through Debian's PgBouncer 1.18:
transaction mode (with `prepared_statement_cache_size=0`, as 1.18 needs) and session mode. One
migrated database serves them all, emptied before each test (quicker than a database each).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
import test_store_contract
from databases import admin_execute, pg_store_url
from pgbouncer_proc import Bouncers

from relay.store.sql.schema import metadata

pytest_plugins = ["pgdeploy"]
pytestmark = pytest.mark.postgres

# The same test functions, collected again here with this module's `store_url`.
globals().update(
    {name: test for name, test in vars(test_store_contract).items() if name.startswith("test_")}
)


@pytest.fixture(scope="module")
def bouncer_database(pg_admin_url: str, pg_template: str) -> Iterator[str]:
    """A migrated database on the test server, dropped after this module."""
    name = f"relay_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(admin_execute(pg_admin_url, f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"'))
    yield name
    asyncio.run(admin_execute(pg_admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["transaction", "session"])
def store_url(
    request: pytest.FixtureRequest, bouncers: Bouncers, bouncer_database: str, pg_admin_url: str
) -> str:
    """The emptied database's URL through PgBouncer in the parameter's pool mode."""
    # DELETE, not TRUNCATE: a few rows go faster than new files for every table.
    emptied = [f'DELETE FROM "{table.name}"' for table in reversed(metadata.sorted_tables)]
    asyncio.run(admin_execute(pg_store_url(pg_admin_url, bouncer_database), "; ".join(emptied)))
    return bouncers(request.param).url(bouncer_database)
