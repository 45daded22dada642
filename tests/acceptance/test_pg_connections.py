"""The connections each replica process holds on the server, idle and busy, under a pool size."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import asyncpg
from backends import on
from cli_support import asyncpg_dsn
from replicas import PUBLISHER_ID, spawn
from sqlalchemy import make_url

from relay.testing import DevRelay, serve

pytestmark = on("postgres")

START = 1_800_000_000.0
POOL_SIZE = 1
BUSY_S = 1.5


async def by_replica(conn: asyncpg.Connection, database: str) -> Counter[str]:
    """Server connections to `database`, counted by the replica that named itself in them."""
    rows = await conn.fetch(
        "SELECT application_name FROM pg_stat_activity"
        " WHERE datname = $1 AND application_name LIKE 'replica-%'",
        database,
    )
    return Counter(row["application_name"] for row in rows)


async def test_a_replica_holds_no_more_connections_than_its_pool_size(
    store_url: str, pg_admin_url: str
) -> None:
    """Two replicas with `pool_size=1`, each taking a presence update and starting a turn every
    20 ms while its publisher passes run: every call waits its turn for the one connection, none
    fails, and neither replica ever holds a second connection, busy or idle."""
    database = str(make_url(store_url).database)
    relay = DevRelay()
    admin = await asyncpg.connect(asyncpg_dsn(pg_admin_url))
    async with serve(relay) as relay_url:
        replicas = [
            await spawn(
                f"{store_url}?pool_size={POOL_SIZE}&application_name={name}", relay_url, name
            )
            for name in ("replica-0", "replica-1")
        ]
        try:
            invitation = relay.mint_invitation("usr_owner")
            pairing = {"relay_url": relay_url, "publisher_id": PUBLISHER_ID}
            await replicas[0].call("pair", body={**pairing, "publisher_invitation": invitation})
            for replica in replicas:
                await replica.call("start_service")
                await replica.call("session", id=replica.owner, created_at=START)
            busy: Counter[str] = Counter()
            deadline, n = time.monotonic() + BUSY_S, 0
            while time.monotonic() < deadline:
                for replica in replicas:
                    stream = f"{replica.owner}-{n:04d}"
                    await replica.call("start", session=replica.owner, stream=stream, at=START + n)
                    tab = {"tab_id": f"tab-{replica.owner}", "active": n % 2 == 0, "seq": n + 1}
                    await replica.call("presence", body=tab)
                n += 1
                busy |= await by_replica(admin, database)
                await asyncio.sleep(0.02)
            await asyncio.gather(*(replica.call("flush") for replica in replicas))
            await asyncio.sleep(1.0)
            idle = await by_replica(admin, database)
            print(f"connections per replica, busy {dict(busy)}, idle {dict(idle)}")
            assert busy == idle == {"replica-0": POOL_SIZE, "replica-1": POOL_SIZE}
        finally:
            await asyncio.gather(*(replica.stop() for replica in replicas))
            await admin.close()
