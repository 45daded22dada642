"""Least privilege as an operator deploys it, on a cluster of the tests' own: the owner applies
what `talaria-relay grants ROLE` prints with psql, and a replica runs as the runtime role, its
write batches one call of `relay_batch` each."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from cli_support import pg_tables, run
from databases import admin_execute
from pgcluster import SUPERUSER, PgCluster, migrated_database, sh
from replicas import cluster
from sql_support import sql_backend
from sqlalchemy import insert, select

from relay.store import open_store
from relay.store.sql import schema as t
from relay.store.sql.dialect import POSTGRES, bind
from relay.store.sql.drivers.postgres import PostgresRunner

pytest_plugins = ["pgdeploy"]
pytestmark = pytest.mark.postgres

START = 1_800_000_000.0


def apply_grants(server: PgCluster, database: str, role: str, home: Path) -> None:
    """Print the grants for `database` and run them as the owner with `psql -v ON_ERROR_STOP=1`."""
    printed = run(home, "grants", role, "--store", server.url(database), timeout=60)
    assert printed.code == 0, printed.describe()
    psql = ("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", server.host, "-p", str(server.port))
    sh(*psql, "-U", SUPERUSER, "-d", database, "-c", printed.stdout)


async def test_a_runtime_role_publishes_while_migrate_with_it_is_refused(
    extra_cluster: PgCluster, tmp_path: Path
) -> None:
    """With only the printed grants, a replica running as the runtime role pairs, publishes and
    passes `check`; meanwhile `migrate` as that role is refused in one line and creates nothing,
    and the replica publishes on."""
    role = f"relay_runtime_{uuid.uuid4().hex[:8]}"
    await admin_execute(extra_cluster.url(), f'CREATE ROLE "{role}" LOGIN')
    database = await migrated_database(extra_cluster)
    apply_grants(extra_cluster, database, role, tmp_path)
    empty = f"relay_{uuid.uuid4().hex[:12]}"
    await admin_execute(extra_cluster.url(), f'CREATE DATABASE "{empty}"')
    # No tables to grant on yet: what the runtime role holds on a database before it is migrated.
    grants = [
        f'GRANT CONNECT ON DATABASE "{empty}" TO "{role}"',
        f'GRANT USAGE ON SCHEMA public TO "{role}"',
    ]
    await admin_execute(extra_cluster.url(empty), *grants)
    runtime_url = extra_cluster.url(database).replace(f"{SUPERUSER}@", f"{role}@", 1)

    async with cluster(runtime_url, 1) as group:
        replica = group.replicas[0]
        await group.pair()
        await replica.call("session", id="s0", created_at=START)
        await replica.call("start", session="s0", stream="t0", at=START)
        await replica.call("flush")
        assert [row["streamId"] for row in group.grant_rows()] == ["t0"]
        assert run(tmp_path, "check", "--store", runtime_url).code == 0

        result = run(tmp_path, "migrate", "--store", runtime_url.replace(database, empty))
        (line,) = result.output.strip().splitlines()
        assert result.code == 1, result.describe()
        assert "permission denied" in line, result.describe()
        assert await pg_tables(extra_cluster.url(empty)) == []

        await replica.call("start", session="s0", stream="t1", at=START + 1)
        await replica.call("flush")
        assert [row["streamId"] for row in group.grant_rows()] == ["t1"]
        assert group.stale() == 0


MINT = POSTGRES.compile(
    insert(t.identities).values(
        profile=bind(t.identities.c.profile), identity=bind(t.identities.c.identity)
    )
)
IDENTITIES = POSTGRES.compile(
    select(t.identities.c.profile, t.identities.c.identity).order_by(t.identities.c.profile)
)


async def test_the_runtime_role_runs_batches_even_where_public_may_not_run_functions(
    extra_cluster: PgCluster, tmp_path: Path
) -> None:
    """An owner that took EXECUTE on new functions away from PUBLIC (a hardened database): with
    the printed grants, the runtime role's batch is one call of `relay_batch`, not a loop."""
    role = f"relay_runtime_{uuid.uuid4().hex[:8]}"
    await admin_execute(extra_cluster.url(), f'CREATE ROLE "{role}" LOGIN')
    database = await migrated_database(extra_cluster)
    await admin_execute(
        extra_cluster.url(database),
        "REVOKE EXECUTE ON FUNCTION relay_batch("
        "text[], text[], text[], text[], boolean, text[]) FROM PUBLIC",
    )
    apply_grants(extra_cluster, database, role, tmp_path)
    runtime_url = extra_cluster.url(database).replace(f"{SUPERUSER}@", f"{role}@", 1)
    async with open_store(runtime_url) as store:
        db = sql_backend(store).runner
        assert isinstance(db, PostgresRunner)
        minted = [{"profile": f"p{n}", "identity": f"pfi_{n}"} for n in range(3)]
        found = await db.batch([(MINT, minted[:1]), (MINT, minted[1:]), (IDENTITIES, {})])
        assert [tuple(row) for row in found] == [("p0", "pfi_0"), ("p1", "pfi_1"), ("p2", "pfi_2")]
        assert db.batch_calls
