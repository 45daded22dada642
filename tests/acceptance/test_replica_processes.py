"""Replicas as real processes on one Postgres, behind no sticky sessions, with one dev relay.

Each test drives three replica processes (`tests/replica_proc.py`) through their public API and
judges only what the relay received: the row of each session, the stale revisions it ignored,
the events and acknowledgements it took.
"""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
from backends import on
from replicas import cluster, until

from relay.publishing.leases import DEFAULT_LEASE_S
from relay.store import open_store

pytestmark = on("postgres")

START = 1_800_000_000.0
# A take-over waits out the lease: 2 s in the suite; the default (20 s) behind `-m soak`.
TAKE_OVER_LEASES = pytest.mark.parametrize(
    "lease_s",
    [
        pytest.param(2.0, id="lease-2s"),
        pytest.param(DEFAULT_LEASE_S, id="default-lease", marks=pytest.mark.soak),
    ],
)


async def test_a_sessions_row_follows_its_newest_turn_wherever_it_runs(store_url: str) -> None:
    """Turns of two sessions hand off between three replicas every step while all of them
    publish in the background: the relay's row is always the newest turn, never an older one,
    and the relay never receives a stale revision."""
    async with cluster(store_url, 3, heartbeat_s=1.0) as group:
        await group.pair()
        sessions = ("alpha", "beta")
        for sid in sessions:
            await group.everywhere("session", id=sid, created_at=START)
        turns = 12
        for turn in range(turns):
            for offset, sid in enumerate(sessions):
                host = group.replicas[(turn + offset) % 3]
                stream = f"{sid}-{turn:02d}"
                await host.call("start", session=sid, stream=stream, at=START + turn)
                await group.everywhere("flush")
                assert [r["streamId"] for r in group.rows_of(sid)] == [stream]
                assert group.rows_of(sid)[0]["phase"] == "running"
                await host.call("end", stream=stream, phase="completed")
                await group.everywhere("flush")
                assert [(r["streamId"], r["phase"]) for r in group.rows_of(sid)] == [
                    (stream, "completed")
                ]
        await asyncio.sleep(1.5)  # background heartbeats of every replica
        await group.everywhere("flush")
        flips = sum(
            len(group.history(sid)) - 2 * turns for sid in sessions
        )  # beyond running→completed per turn
        print(f"{2 * turns} handoffs, {group.stale()} stale, {flips} extra transitions")
        assert group.stale() == 0
        assert flips == 0
        for sid in sessions:
            streams = [stream or "" for stream, _ in group.history(sid)]
            assert streams == sorted(streams), f"{sid} went back to an older turn"
            assert streams[-1] == f"{sid}-{turns - 1:02d}"


async def test_a_dead_replicas_running_turn_ends_failed_once(store_url: str) -> None:
    """kill -9 of the replica hosting a turn: within the lease the turn ends as `failed` on the
    relay, once, and stays that way."""
    lease_s = 2.0
    async with cluster(store_url, 3, lease_s=lease_s) as group:
        await group.pair()
        await group.everywhere("session", id="s1", created_at=START)
        host = group.replicas[0]
        await host.call("start", session="s1", stream="t1", at=START)
        await host.call("flush")
        assert group.rows_of("s1")[0]["phase"] == "running"
        host.kill()
        took = await until(lambda: group.rows_of("s1")[0]["phase"] == "failed", 6 * lease_s)
        print(f"dead replica's turn ended failed after {took:.1f}s (lease {lease_s}s)")
        assert took <= 3 * lease_s
        await asyncio.sleep(lease_s)
        await group.everywhere("flush")
        assert [phase for _, phase in group.history("s1")] == ["running", "failed"]
        assert group.stale() == 0


@TAKE_OVER_LEASES
async def test_an_announcement_is_sent_once_and_taken_over_after_a_kill(
    store_url: str, lease_s: float
) -> None:
    """A replica killed while announcing leaves the event to another, which sends it under the
    same eventId within the lease and 10 s (30 s by default); every other event goes out once."""
    async with cluster(store_url, 3, lease_s=lease_s) as group:
        await group.pair()
        for n in range(3):
            await group.everywhere("session", id=f"calm-{n}", created_at=time.time())
        await group.everywhere("flush")
        await group.everywhere("flush")
        calm = sorted(e.session_id for e in group.relay.started_events)
        assert calm == ["calm-0", "calm-1", "calm-2"]

        group.relay.inject("started", 503, delay=10.0)
        await group.everywhere("session", id="fragile", created_at=time.time())
        victim = group.replicas[0]
        await victim.call("changed")
        await until(lambda: any(r.route == "started" for r in group.relay.requests[-3:]), 10)
        victim.kill()
        killed_at = time.monotonic()
        await until(lambda: any(e.session_id == "fragile" for e in group.relay.started_events), 40)
        print(f"announcement taken over {time.monotonic() - killed_at:.1f}s after kill -9")
        assert time.monotonic() - killed_at <= lease_s + 10
        events = [e for e in group.relay.started_events if e.session_id == "fragile"]
        assert len(events) == 1
        await group.everywhere("flush")
        assert sorted(e.session_id for e in group.relay.started_events) == [*calm, "fragile"]


async def test_a_slow_relay_does_not_cause_a_second_announcement(store_url: str) -> None:
    """Claims are renewed while their holder sends: with every announcement answered later than
    half the lease, no other replica takes one over, and each goes out once."""
    async with cluster(store_url, 3, lease_s=4.0) as group:
        await group.pair()
        group.relay.slow("started", 1.5, times=6)
        for n in range(6):
            await group.everywhere("session", id=f"slow-{n}", created_at=time.time())
        await asyncio.gather(*(r.call("flush") for r in group.replicas))
        await asyncio.sleep(4.0)
        await group.everywhere("flush")
        sent = sorted(e.session_id for e in group.relay.started_events)
        assert sent == [f"slow-{n}" for n in range(6)]


@TAKE_OVER_LEASES
async def test_a_deletion_is_delivered_once_and_taken_over_after_a_kill(
    store_url: str, lease_s: float
) -> None:
    """Deletions queued on one replica go out once, whoever delivers them; after a kill -9 of
    the one delivering, another delivers within the lease and 10 s (30 s by default)."""
    async with cluster(store_url, 3, lease_s=lease_s) as group:
        await group.pair()
        for n in range(4):
            await group.everywhere("session", id=f"d{n}", created_at=START)
            await group.replicas[n % 3].call("start", session=f"d{n}", stream=f"t{n}", at=START)
            await group.replicas[n % 3].call("end", stream=f"t{n}", phase="completed")
        await group.everywhere("flush")
        for n in range(4):
            await group.everywhere("forget", id=f"d{n}")
            await group.replicas[0].call("delete", session=f"d{n}", profile="default")
        for _ in range(3):
            await group.everywhere("flush")
        acks = sorted(ack.session_id for ack in group.relay.viewed)
        assert acks == ["d0", "d1", "d2", "d3"]

        group.relay.inject("viewed", 503, delay=10.0)
        await group.everywhere("forget", id="late")
        victim = group.replicas[1]
        await victim.call("delete", session="late", profile="default")
        await until(lambda: any(r.route == "viewed" for r in group.relay.requests[-3:]), 10)
        victim.kill()
        killed_at = time.monotonic()
        await until(lambda: any(a.session_id == "late" for a in group.relay.viewed), 40)
        print(f"deletion taken over {time.monotonic() - killed_at:.1f}s after kill -9")
        assert time.monotonic() - killed_at <= lease_s + 10
        assert sorted(ack.session_id for ack in group.relay.viewed) == [*acks, "late"]


async def test_presence_on_one_replica_mutes_another_and_stays_revoked(store_url: str) -> None:
    """A tab's renewal on replica A mutes alerts in B's snapshot; a stale renewal landing on B
    cannot revive the tab A revoked."""
    async with cluster(store_url, 3) as group:
        await group.pair()
        a, b, _ = group.replicas
        await group.everywhere("session", id="s1", created_at=START)
        await b.call("start", session="s1", stream="t1", at=START)
        await b.call("flush")
        assert group.rows_of("s1")[0].get("alertEligible") in (None, True)

        await a.call("presence", body={"tab_id": "tab-0000001", "active": True, "seq": 1})
        await b.call("flush")
        assert group.rows_of("s1")[0]["alertEligible"] is False

        await a.call("presence", body={"tab_id": "tab-0000001", "active": False, "seq": 3})
        await b.call("presence", body={"tab_id": "tab-0000001", "active": True, "seq": 2})
        await b.call("start", session="s1", stream="t2", at=START + 1)
        await b.call("flush")
        assert group.rows_of("s1")[0].get("alertEligible") in (None, True)


async def test_replicas_pairing_at_once_leave_one_registration_and_every_mapping(
    store_url: str,
) -> None:
    """Three replicas register at once: one wins, the others get the documented 409 and leave
    no key behind. Then two enroll different profiles at once: every mapping survives."""
    async with cluster(store_url, 3) as group:
        replies = await asyncio.gather(
            *(r.reply("pair", body=group.pairing()) for r in group.replicas)
        )
        won = [reply for reply in replies if reply["ok"]]
        lost = [reply["error"] for reply in replies if not reply["ok"]]
        assert len(won) == 1
        assert (
            lost
            == ["RelayPairingError: Another server process registered this Hermes server meanwhile"]
            * 2
        )
        assert await stored_keys(store_url) == 1

        await group.everywhere("start_service")
        _, b, c = group.replicas
        await asyncio.gather(
            b.call("pair", body=group.pairing("usr_work"), profile="work"),
            c.call("pair", body=group.pairing("usr_home"), profile="home"),
        )
        async with open_store(store_url) as store:
            config = await store.load_config()
        assert config is not None
        assert sorted(config.profiles) == ["default", "home", "work"]
        assert await stored_keys(store_url) == 1


async def stored_keys(store_url: str) -> int:
    """How many private keys the store holds (orphans included), counted in SQL."""
    import asyncpg

    conn = await asyncpg.connect(store_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM relay_keys")
    finally:
        await conn.close()
    return count


async def admin(store_url: str, statement: str, *args: object) -> object:
    import asyncpg

    dsn = store_url.replace("postgresql+asyncpg", "postgresql").rsplit("/", 1)[0] + "/postgres"
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(statement, *args)
    finally:
        await conn.close()


async def test_replicas_ride_out_a_postgres_outage_and_a_migration(store_url: str) -> None:
    """The database refuses connections and drops every one it has for a while (a restart):
    replicas back off, resume by themselves and lose nothing; no connection is left idle in a
    transaction. `talaria-relay migrate` run meanwhile (a rolling upgrade) disturbs nothing."""
    database = store_url.rsplit("/", 1)[1]
    async with cluster(store_url, 3, heartbeat_s=1.0) as group:
        await group.pair()
        a, b, c = group.replicas
        await group.everywhere("session", id="before", created_at=time.time())
        await a.call("start", session="before", stream="b1", at=START)
        await group.everywhere("flush")

        await admin(store_url, f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        try:
            await admin(
                store_url,
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1",
                database,
            )
            # Work arrives during the outage: a turn ends, one starts, a session is created.
            await a.call("end", stream="b1", phase="completed")
            await group.everywhere("session", id="during", created_at=time.time())
            await b.call("start", session="during", stream="d1", at=START + 1)
            await asyncio.sleep(3)
        finally:
            await admin(store_url, f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')

        migrate = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "relay", "migrate", "--store", store_url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        await group.everywhere("flush")
        _, err = await migrate.communicate()
        assert migrate.returncode == 0, err
        await c.call("start", session="before", stream="b2", at=START + 2)

        def caught_up() -> bool:
            phases = {row["sessionId"]: row["phase"] for row in group.grant_rows()}
            started = {event.session_id for event in group.relay.started_events}
            return phases == {"before": "running", "during": "running"} and "during" in started

        # Each replica's backoff (5 s, jittered) ends by itself; nothing else wakes them.
        await until(caught_up, 30)
        assert group.stale() == 0
        # Between two statements a transaction is idle in it for an instant: none may stay so.
        idle = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = $1 AND state LIKE 'idle in transaction%'"
        )
        for _ in range(100):
            if await admin(store_url, idle, database) == 0:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("a connection stays idle in a transaction")
        assert [phase for _, phase in group.history("before")] == [
            "running",
            "completed",
            "running",
        ]
