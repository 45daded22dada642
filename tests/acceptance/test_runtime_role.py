"""Least privilege, as deployed: an owner role migrates, a runtime role runs the replicas with
exactly what `talaria-relay grants ROLE` prints, and cannot change the schema; the refusal names
that command for that role and store.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import on
from cli_support import pasted, run
from databases import admin_execute
from harness import relay_env
from intact import running
from sqlalchemy import make_url

from relay.cli.grants import grants_sql, quoted
from relay.errors import InvalidInputError, StoreError
from relay.store import open_store, resolve
from relay.store.sql import migrate

pytestmark = on("postgres")


@pytest.fixture
def runtime_role(pg_admin_url: str) -> Iterator[str]:
    """A login role of its own, dropped after the test (and after its databases)."""
    role = f"relay_rt_{uuid.uuid4().hex[:10]}"
    asyncio.run(admin_execute(pg_admin_url, f'CREATE ROLE "{role}" LOGIN'))
    try:
        yield role
    finally:
        asyncio.run(admin_execute(pg_admin_url, f'DROP ROLE IF EXISTS "{role}"'))


def as_role(url: str, role: str) -> str:
    return make_url(url).set(username=role).render_as_string(hide_password=False)


async def revision_of(url: str) -> str | None:
    """The relay's revision, wherever this revision keeps it (below 0010: `alembic_version`)."""
    return (await migrate.standing(resolve(url))).current


async def test_the_runtime_role_publishes_with_the_printed_grants_and_cannot_migrate(
    runtime_role: str, store_url: str, tmp_path: Path
) -> None:
    """With only the printed grants, the runtime role pairs and publishes; `migrate` as that
    role, on a database one revision below head, exits nonzero in one line and changes nothing.
    Before the grants, the role's refusal names the command that prints them, as pasted."""
    home = tmp_path / "xdg"
    home.mkdir()
    printed = run(home, "grants", runtime_role, "--store", store_url, timeout=60)
    assert printed.code == 0, printed.describe()
    runtime = as_role(store_url, runtime_role)
    # Before the grants, the runtime role is refused, naming the command that prints them.
    with pytest.raises(StoreError) as refused:
        async with open_store(runtime) as store:
            await store.load_config()
    hinted = run(home, *pasted(str(refused.value)), timeout=60)
    assert (hinted.code, hinted.stdout) == (0, printed.stdout), hinted.describe()
    await admin_execute(store_url, printed.stdout)

    async with open_store(runtime) as store, relay_env(store) as env:
        await env.pair()
        running(env, "s1")
        assert await env.publish() is None
        assert [r.status for r in env.sent("snapshot")][-1] == 200
        assert await store.allocate_revisions(1, 1_800_000_000_000)

    await migrate.downgrade(resolve(store_url), "-1")
    below = await revision_of(store_url)
    assert below != migrate.head_revision()
    result = run(home, "migrate", "--store", runtime, timeout=60)
    assert result.code == 1, result.describe()
    (line,) = result.stderr.strip().splitlines()
    # 42501, whatever the step needs: "permission denied" to create, "must be owner" to alter.
    assert "permission denied" in line or "must be owner" in line
    assert "owner role" in line
    assert await revision_of(store_url) == below
    # The owner can, and then the runtime role reads it again.
    await migrate.upgrade(resolve(store_url))
    async with open_store(runtime) as store:
        assert (await store.load_config()) is not None


def test_the_printed_sql_covers_every_table_and_future_ones() -> None:
    """The statements name every relay table with DML, the version table read-only, and
    default privileges for the owner's future tables."""
    from relay.store.sql.schema import metadata

    sql = grants_sql("relay_rt", "relay", "relay_schema", owner="relay_owner")
    for table in metadata.sorted_tables:
        assert f'"relay_schema"."{table.name}"' in sql
    assert 'GRANT SELECT ON TABLE "relay_schema"."relay_alembic_version" TO "relay_rt";' in sql
    assert (
        'ALTER DEFAULT PRIVILEGES FOR ROLE "relay_owner" IN SCHEMA "relay_schema" '
        'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO "relay_rt";'
    ) in sql
    # DML only: the one CREATE is the relay's schema itself, made by (and owned by) the owner.
    assert 'CREATE SCHEMA IF NOT EXISTS "relay_schema" AUTHORIZATION "relay_owner";' in sql
    assert "CREATE" not in sql.replace("CREATE SCHEMA IF NOT EXISTS", "")
    assert "CREATE SCHEMA" not in grants_sql("relay_rt", "relay", "public")
    assert "ALL" not in sql.replace("ALTER", "")


@pytest.mark.parametrize(
    "role", ['x"; DROP TABLE relay_keys; --', "", "a" * 64, "tab\there", "PUBLIC", "public"]
)
def test_a_role_name_that_cannot_be_quoted_safely_is_refused(role: str) -> None:
    """A name with a double quote or control character, empty, too long, or PUBLIC: refused."""
    with pytest.raises(InvalidInputError):
        quoted("ROLE", role)


def test_grants_needs_a_postgres_store(tmp_path: Path) -> None:
    """`grants` on a SQLite store: exit 2 and a line saying it is for Postgres."""
    home = tmp_path / "xdg"
    home.mkdir()
    result = run(home, "grants", "relay_rt", "--store", f"sqlite:///{tmp_path / 'r.db'}")
    assert result.code == 2
    assert "grants are for Postgres stores" in result.stderr
