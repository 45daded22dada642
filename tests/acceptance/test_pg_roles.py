"""Least privilege as an operator deploys it, on a cluster of the tests' own: the owner applies
what `talaria-relay grants ROLE` prints with psql, and a replica runs as the runtime role."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from cli_support import pg_tables, run
from databases import admin_execute
from pgcluster import SUPERUSER, PgCluster, migrated_database, sh
from replicas import cluster

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
