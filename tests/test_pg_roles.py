"""Least privilege: a runtime role with DML only runs the publisher and cannot migrate."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from cli_support import pg_tables, run
from databases import admin_execute
from pgcluster import PgCluster, migrated_database
from replicas import cluster

pytest_plugins = ["pgdeploy"]
pytestmark = pytest.mark.postgres

START = 1_800_000_000.0


def runtime_grants(role: str, database: str) -> list[str]:
    """What an operator grants the runtime role: connect, the schema, and rows, nothing else."""
    return [
        f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"',
        f'GRANT USAGE ON SCHEMA public TO "{role}"',
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"',
    ]


async def test_a_runtime_role_publishes_and_cannot_migrate(
    extra_cluster: PgCluster, tmp_path: Path
) -> None:
    """A role holding CONNECT, USAGE and SELECT/INSERT/UPDATE/DELETE pairs and publishes through
    a replica and passes `check`; `migrate` with it is refused in one line, creating nothing."""
    role = f"relay_runtime_{uuid.uuid4().hex[:8]}"
    database = await migrated_database(extra_cluster)
    await admin_execute(extra_cluster.url(), f'CREATE ROLE "{role}" LOGIN')
    await admin_execute(extra_cluster.url(database), *runtime_grants(role, database))
    runtime_url = extra_cluster.url(database).replace("postgres@", f"{role}@", 1)

    async with cluster(runtime_url, 1) as group:
        await group.pair()
        await group.everywhere("session", id="s0", created_at=START)
        await group.replicas[0].call("start", session="s0", stream="t0", at=START)
        await group.everywhere("flush")
        assert [row["streamId"] for row in group.grant_rows()] == ["t0"]
    assert run(tmp_path, "check", "--store", runtime_url).code == 0

    empty = f"relay_{uuid.uuid4().hex[:12]}"
    await admin_execute(extra_cluster.url(), f'CREATE DATABASE "{empty}"')
    await admin_execute(extra_cluster.url(empty), *runtime_grants(role, empty))
    result = run(tmp_path, "migrate", "--store", runtime_url.replace(database, empty))
    lines = result.output.strip().splitlines()
    assert result.code == 1, result.describe()
    assert len(lines) == 1, result.describe()
    assert "permission denied" in lines[0], result.describe()
    assert await pg_tables(extra_cluster.url(empty)) == []
