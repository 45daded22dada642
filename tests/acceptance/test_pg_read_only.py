"""A server flipped read-only (`default_transaction_read_only`) and back, under a publisher."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_support import run
from pgcluster import PgCluster, migrated_database
from replicas import Cluster, cluster, until

from relay.errors import StoreUnavailableError
from relay.store import open_store

pytest_plugins = ["pgdeploy"]
pytestmark = pytest.mark.postgres

START = 1_800_000_000.0
# The publisher's first backoff is 5 s (±20 %), the second 10 s: room for both.
RECOVERY_S = 30.0
# The shortest backoff there is: the first, 5 s jittered down by 20 %.
SHORTEST_BACKOFF_S = 4.0


def set_read_only(server: PgCluster, on: bool) -> None:
    """`ALTER SYSTEM` and a reload: every session, open ones too, turns read-only (or back)."""
    server.sql(f"ALTER SYSTEM SET default_transaction_read_only = {'on' if on else 'off'}")
    server.sql("SELECT pg_reload_conf()")


@pytest.fixture
def read_only_flip(extra_cluster: PgCluster) -> Iterator[Callable[[bool], None]]:
    """Flips the extra cluster read-only or back; it is writable again after the test."""
    yield lambda on: set_read_only(extra_cluster, on)
    extra_cluster.sql("ALTER SYSTEM RESET default_transaction_read_only")
    extra_cluster.sql("SELECT pg_reload_conf()")


def stream_of(group: Cluster) -> object:
    return next(row["streamId"] for row in group.grant_rows() if row["sessionId"] == "s0")


async def test_a_read_only_server_is_unavailable_and_the_publisher_recovers(
    extra_cluster: PgCluster,
    read_only_flip: Callable[[bool], None],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """While the server is read-only a store write is `StoreUnavailableError`, `check` exits 1
    saying so, and the publisher backs off (a turn starting every 100 ms brings no pass sooner);
    flipped back, it publishes what changed meanwhile."""
    url = extra_cluster.url(await migrated_database(extra_cluster))
    async with cluster(url, 1, heartbeat_s=1.0) as group:
        await group.pair()
        replica = group.replicas[0]
        await replica.call("session", id="s0", created_at=START)
        await replica.call("start", session="s0", stream="before", at=START)
        await replica.call("flush")
        assert stream_of(group) == "before"
        assert run(tmp_path, "check", "--store", url).code == 0

        await asyncio.to_thread(read_only_flip, True)
        flipped = time.monotonic()
        for n in range(20):
            await replica.call("start", session="s0", stream=f"during-{n:02d}", at=START + 1 + n)
            await asyncio.sleep(0.1)
        async with open_store(url) as store:
            with pytest.raises(StoreUnavailableError, match="read-only"):
                await store.allocate_revisions(1, int(time.time() * 1000))
        result = await asyncio.to_thread(run, tmp_path, "check", "--store", url)
        lines = result.output.strip().splitlines()
        assert (result.code, len(lines)) == (1, 1), result.describe()
        assert "read-only" in lines[0], result.describe()
        assert stream_of(group) == "before"

        await asyncio.to_thread(read_only_flip, False)
        read_only_s = time.monotonic() - flipped
        took = await until(lambda: stream_of(group) == "during-19", RECOVERY_S)
        failing = [line for line in capfd.readouterr().err.splitlines() if "retrying in" in line]
        print(
            f"{len(failing)} failing passes in {read_only_s:.1f}s read-only; "
            f"published {took:.1f}s after the server took writes again"
        )
        assert 1 <= len(failing) <= 1 + read_only_s / SHORTEST_BACKOFF_S
        assert group.stale() == 0
