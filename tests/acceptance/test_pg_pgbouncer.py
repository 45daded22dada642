"""Replica processes publishing through PgBouncer, in transaction mode and session mode; a
schema, which PgBouncer cannot take from the URL, set where it can."""

from __future__ import annotations

import asyncio
import re

import pytest
from backends import on
from databases import admin_execute, behind_the_store
from pgbouncer_proc import Bouncers, Mode
from replicas import Cluster, cluster, until
from sqlalchemy import make_url, text

from relay.errors import StoreUnavailableError
from relay.store import open_store, resolve
from relay.store.sql.migrate import upgrade

pytest_plugins = ["pgdeploy"]
pytestmark = on("postgres")

START = 1_800_000_000.0
# A service bounds its store calls to a fifth of its lease: at 2 s, a call through PgBouncer on a
# loaded two-core CI machine now and then waited the 0.4 s and was logged as a silent store.
LEASE_S = 3.0
# How `logging.basicConfig` in a replica process starts a line at WARNING and above.
LEVELS = ("WARNING:", "ERROR:", "CRITICAL:")


def phase(group: Cluster, session: str) -> object:
    return next(row["phase"] for row in group.grant_rows() if row["sessionId"] == session)


async def advisory_locks(admin_url: str, database: str) -> int:
    """Advisory locks held on `database`, whoever holds them."""
    import asyncpg

    conn = await asyncpg.connect(admin_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND database = (SELECT oid FROM pg_database WHERE datname = $1)",
            database,
        )
    finally:
        await conn.close()
    return count


@pytest.mark.parametrize("mode", ["transaction", "session"])
async def test_replicas_publish_through_pgbouncer_and_leave_no_lock(
    mode: Mode,
    store_url: str,
    pg_admin_url: str,
    bouncers: Bouncers,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Two replicas through PgBouncer pair, publish turns on each, and take over a kill -9'd
    replica's turn within the lease: no command fails and no replica logs a warning, the relay
    sees no stale revision, and no advisory lock is left on the server."""
    database = str(make_url(store_url).database)
    async with cluster(bouncers(mode).url(database), 2, lease_s=LEASE_S, heartbeat_s=1.0) as group:
        await group.pair()
        for n, replica in enumerate(group.replicas):
            await group.everywhere("session", id=f"s{n}", created_at=START)
            await replica.call("start", session=f"s{n}", stream=f"t{n}", at=START + n)
        await group.everywhere("flush")
        await group.replicas[1].call("end", stream="t1", phase="completed")
        await group.everywhere("flush")
        assert [phase(group, f"s{n}") for n in range(2)] == ["running", "completed"]
        group.replicas[0].kill()
        await until(lambda: phase(group, "s0") == "failed", 6 * LEASE_S)
        await asyncio.gather(*(replica.call("flush") for replica in group.live()))
        assert [phase(group, f"s{n}") for n in range(2)] == ["failed", "completed"]
        assert group.stale() == 0
    logged = [line for line in capfd.readouterr().err.splitlines() if line.startswith(LEVELS)]
    print(f"PgBouncer {mode} mode: {len(logged)} warnings or errors logged by the replicas")
    assert logged == []
    assert await advisory_locks(pg_admin_url, database) == 0


async def test_a_schema_through_pgbouncer_is_refused_naming_the_setting_that_works(
    pg_database: str, bouncers: Bouncers
) -> None:
    """PgBouncer refuses the startup `options` that a URL's `schema=` sends: the store says so
    and names the role setting that puts the relay in its schema instead. Run as printed, the
    URL without the schema reaches the relay's tables in that schema through PgBouncer."""
    database = str(make_url(pg_database).database)
    await upgrade(resolve(f"{pg_database}?schema=relay_pooled"))
    pooled = bouncers("transaction")
    with pytest.raises(StoreUnavailableError) as refused:
        async with open_store(pooled.url(database, schema="relay_pooled")) as store:
            await store.profile_identity("default")
    (fix,) = re.findall(r"`(ALTER ROLE [^`]*)`", str(refused.value))
    await admin_execute(pg_database, fix)
    async with open_store(pooled.url(database)) as store:
        identity = await store.profile_identity("default")
    (rows,) = await behind_the_store(
        pg_database, text("SELECT identity FROM relay_pooled.relay_identities")
    )
    assert rows == [(identity,)]
