"""The relay in a Postgres schema of its own (`?schema=NAME`, or `options=-csearch_path=NAME`):
every object it makes lands there, two relays in two schemas of one database each keep their own
version and fleet, and a role that may not create the schema is told the grant it needs."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import forked
import pytest
from backends import on
from cli_support import child_env
from databases import admin_execute
from harness import relay_env
from intact import running
from sqlalchemy import make_url

from relay.store import open_store, resolve
from relay.store.migrations import BATCH_FUNCTION, HEAD, TABLES, VERSION_TABLE, standing

pytestmark = on("postgres")

ROOT = Path(__file__).resolve().parents[2]


async def relay_cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`talaria-relay ARGS` as a process of its own (forked: `forked.py`)."""
    env = child_env(tmp / "state")
    return await forked.run("relay", *args, module=True, env=env, cwd=ROOT, within_s=120)


async def objects(url: str) -> dict[str, set[str]]:
    """Each schema's relations (tables, indexes) and functions in the database at `url`."""
    dsn = make_url(url).set(drivername="postgresql", query={}).render_as_string(False)
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        rows = await conn.fetch(
            "SELECT n.nspname, c.relname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'i') "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg_toast%' "
            "UNION ALL SELECT n.nspname, p.proname || '()' FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')"
        )
    finally:
        await conn.close()
    found: dict[str, set[str]] = {}
    for schema, name in rows:
        found.setdefault(schema, set()).add(name)
    return found


async def publish_once(url: str) -> set[str]:
    """Pair and publish a turn on the store at `url`; the owners its fleet then lists."""
    async with open_store(url) as store, relay_env(store) as env:
        await env.pair()
        running(env, "s1")
        assert await env.publish() is None
        return {member.owner for member in await store.fleet()}


async def test_two_relays_in_two_schemas_side_by_side(pg_database: str, tmp_path: Path) -> None:
    """`?schema=` and `options=-csearch_path=` each put every relay object (tables, indexes, the
    batch function, the version table) in their schema and none in public; each relay has its
    own revision and its own fleet."""
    first = f"{pg_database}?schema=relay_a"
    second = f"{pg_database}?options=-csearch_path%3Drelay_b"
    for url in (first, second):
        done = await relay_cli(tmp_path, "migrate", "--store", url)
        assert done.returncode == 0, done.stderr
        assert f"at head {HEAD}" in done.stdout
    found = await objects(pg_database)
    assert not {name for name in found.get("public", set()) if name.startswith("relay_")}
    for schema in ("relay_a", "relay_b"):
        assert {*TABLES, VERSION_TABLE, f"{BATCH_FUNCTION}()"} <= found[schema]
        assert "ix_relay_started_unsent" in found[schema]
        assert "alembic_version" not in found[schema]
    assert found["relay_a"] == found["relay_b"]
    assert (await standing(resolve(first))).at_head
    assert (await standing(resolve(second))).at_head
    owners_a, owners_b = await publish_once(first), await publish_once(second)
    assert owners_a
    assert owners_b
    assert not owners_a & owners_b
    # Each fleet is its schema's own: the second relay's pass left the first's as it was.
    async with open_store(first) as store:
        assert {member.owner for member in await store.fleet()} == owners_a


@pytest.fixture
def plain_role(pg_database: str) -> Iterator[str]:
    """A login role with no CREATE on the database (dropped after the test)."""
    role = f"v30_plain_{uuid.uuid4().hex[:8]}"
    import asyncio

    asyncio.run(admin_execute(pg_database, f'CREATE ROLE "{role}" LOGIN'))
    try:
        yield role
    finally:
        name = make_url(pg_database).database
        asyncio.run(
            admin_execute(
                pg_database,
                f'REVOKE ALL ON DATABASE "{name}" FROM "{role}"',
                f'DROP OWNED BY "{role}"',
                f'DROP ROLE IF EXISTS "{role}"',
            )
        )


async def test_a_role_that_may_not_create_the_schema_is_told_the_grant(
    pg_database: str, plain_role: str, tmp_path: Path
) -> None:
    """`migrate` as a role without CREATE on the database: exit 1, one line naming the statement
    the owner runs, nothing made; `grants` prints that statement; once it ran, `migrate` works."""
    url = make_url(pg_database).set(username=plain_role).render_as_string(False)
    store = f"{url}?schema=relay_x"
    refused = await relay_cli(tmp_path, "migrate", "--store", store)
    assert refused.returncode == 1, refused.stderr
    assert f'CREATE SCHEMA relay_x AUTHORIZATION "{plain_role}"' in refused.stderr
    assert "relay_x" not in await objects(pg_database)
    grants = ("grants", "relay_rt", "--owner", plain_role, "--store", store)
    printed = await relay_cli(tmp_path, *grants)
    assert f'CREATE SCHEMA IF NOT EXISTS "relay_x" AUTHORIZATION "{plain_role}";' in printed.stdout
    await admin_execute(pg_database, f'CREATE SCHEMA relay_x AUTHORIZATION "{plain_role}"')
    done = await relay_cli(tmp_path, "migrate", "--store", store)
    assert done.returncode == 0, done.stderr
    assert {*TABLES, VERSION_TABLE} <= (await objects(pg_database))["relay_x"]
