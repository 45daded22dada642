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
from pg_batch_support import loop_rows, postgres_runner, ten_steps, typed
from pgbouncer_proc import Bouncers
from sqlalchemy import make_url

from benchmarks.proxy import latency_proxy
from relay.store import open_store
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


async def test_a_batch_is_one_call_through_pgbouncer(store_url: str) -> None:
    """A write batch through PgBouncer is one call of `relay_batch` with the answer its
    statements give one by one: two round trips the first time (the call prepared, then run;
    no type asked about, which would change a session setting meanwhile), then one in session
    mode, where asyncpg keeps the call prepared, and two in transaction mode, where it prepares
    it each time (1.18 keeps no prepared statements, so the URL turns asyncpg's cache off)."""
    address = make_url(store_url)
    cached = "prepared_statement_cache_size" not in address.query
    async with latency_proxy(address.host or "127.0.0.1", address.port or 6432, 0) as (
        port,
        counts,
    ):
        proxied = address.set(host="127.0.0.1", port=port).update_query_dict({"pool_size": "1"})
        async with open_store(proxied.render_as_string(hide_password=False)) as store:
            db = postgres_runner(store)
            expected = await loop_rows(db, ten_steps())
            before = counts.round_trips
            assert typed(await db.batch(ten_steps())) == typed(expected)
            assert counts.round_trips - before == 2
            assert db.batch_calls
            before = counts.round_trips
            assert len(await db.batch(ten_steps(10))) == 6
            assert counts.round_trips - before == (1 if cached else 2)
