"""Issue 24 with real processes on Postgres: one replica's wall clock minutes off (libfaketime), or
a replica frozen (SIGSTOP) past its leases and woken again. Judged on the relay alone.

    pytest tests/acceptance/test_replica_clocks.py                # the short cases, 2 s leases
    pytest tests/acceptance/test_replica_clocks.py -m soak -s     # issue 24's table, measured
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections import Counter

import faketime
import pytest
from backends import on
from handoffs import PHASES, HandOffs, Turns
from replicas import Cluster, Replica, cluster, until

pytestmark = on("postgres")

# Inside the relay's 300 s signature window: a replica off by more cannot publish at all. Four
# minutes either way in the suite; one minute, the same paths (past half the lease either way),
# with `-m soak`.
OFFSETS = [
    pytest.param(s, id=f"{s:+.0f}s", marks=[pytest.mark.soak] if abs(s) < 100 else [])
    for s in (60.0, -60.0, 240.0, -240.0)
]
SKEWED = 2  # the replica whose clock is off, by index


def once_each(seen: list[str], expected: list[str]) -> dict[str, int]:
    """The sessions of `expected` not seen exactly once, with how often they were."""
    counts = Counter(seen)
    return {sid: counts[sid] for sid in expected if counts[sid] != 1}


@pytest.mark.parametrize("offset_s", OFFSETS)
async def test_a_replica_whose_clock_is_off_changes_no_outcome(
    store_url: str, offset_s: float
) -> None:
    """Replica 2's wall clock is minutes off. Turns run on every replica for three leases while
    all of them pass in the background: no live turn is taken over, every end shows as it
    happened, announcements and deletions go out once each, and when the skewed replica dies
    with a running turn, that turn is `failed` within the lease and a few seconds."""
    lease_s = 2.0
    offsets = {SKEWED: offset_s}
    async with cluster(store_url, 3, lease_s=lease_s, heartbeat_s=1.0, offsets=offsets) as group:
        await group.pair()
        turns = Turns()
        sessions = [f"s{n}" for n in range(6)]
        for sid in sessions:
            await group.everywhere("session", id=sid, created_at=time.time())
        for n, sid in enumerate(sessions):
            turns.started(sid, f"{sid}-1")
            host = group.replicas[n % 3]
            await host.call("start", session=sid, stream=f"{sid}-1", at=time.time())
        await group.everywhere("flush")
        measured = await group.everywhere("clock_offset")
        assert abs(measured[SKEWED] - offset_s) < 1
        assert [abs(o) < 1 for n, o in enumerate(measured) if n != SKEWED] == [True, True]
        # Three leases of background passes: a clock ahead would see the others' leases end, and
        # a clock behind would make its own look ended to them.
        await asyncio.sleep(3 * lease_s)
        await group.everywhere("flush")
        assert [group.row(sid) for sid in sessions] == [(f"{s}-1", "running") for s in sessions]
        for n, sid in enumerate(sessions):
            turns.phase[f"{sid}-1"] = PHASES[n % 3]
            await group.replicas[n % 3].call("end", stream=f"{sid}-1", phase=PHASES[n % 3])
        await group.everywhere("flush")
        await group.everywhere("flush")

        # Each replica deletes one session; its deletion is acknowledged once.
        deleted = sessions[3:]
        for n, sid in enumerate(deleted):
            await group.everywhere("forget", id=sid)
            await group.replicas[n].call("delete", session=sid, profile="default")
        for _ in range(2):
            await group.everywhere("flush")

        victim = group.replicas[SKEWED]
        said = [line for line in await victim.call("logs") if "clock" in line]
        direction = "ahead of" if offset_s > 0 else "behind"
        assert len(said) == 1
        found = re.fullmatch(
            rf"ERROR \[relay\] This server's clock is ([0-9.]+)s {direction} the store's, more"
            r" than half the 2s lease: replicas compare leases on the store's clock, but check"
            r" this server's time sync \(NTP\)",
            said[0],
        )
        assert found, said
        assert abs(float(found[1]) - abs(offset_s)) < 1
        turns.started("s0", "s0-2")
        await victim.call("start", session="s0", stream="s0-2", at=time.time())
        await victim.call("flush")
        assert group.row("s0") == ("s0-2", "running")
        victim.kill()
        turns.dead.add("s0-2")
        turns.phase["s0-2"] = "failed"
        took = await until(lambda: group.row("s0") == ("s0-2", "failed"), 30)
        print(f"clock {offset_s:+.0f}s: its dead turn ended failed after {took:.1f}s")
        await asyncio.sleep(lease_s)
        await group.everywhere("flush")

        assert turns.wrong_final(group) == []
        assert turns.ends_lost(group) == []
        assert sum(turns.flips(group, sid) for sid in turns.order) == 0
        announced = [event.session_id for event in group.relay.started_events]
        assert once_each(announced, sessions) == {}
        assert once_each([ack.session_id for ack in group.relay.viewed], deleted) == {}
        assert group.stale() == 0
        assert took <= lease_s + 4


async def test_status_on_a_host_whose_clock_is_off_judges_leases_on_the_stores_clock(
    store_url: str,
) -> None:
    """`talaria-relay status` run on a host 10 minutes ahead still sees the replica that holds
    a running turn as alive: its lease is judged on the store's clock."""
    async with cluster(store_url, 1, lease_s=20.0) as group:
        await group.pair()
        await group.everywhere("session", id="s1", created_at=time.time())
        await group.replicas[0].call("start", session="s1", stream="t1", at=time.time())
        await group.everywhere("flush")
        status = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "relay", "status", "--json", "--store", store_url,
            stdout=asyncio.subprocess.PIPE, env=faketime.env(600),
        )  # fmt: skip
        out, _ = await status.communicate()
        assert status.returncode == 0
        (replica,) = json.loads(out)["fleet"]["replicas"]
        assert replica["runs"] == 1
        assert replica["alive"] is True


async def paused_past_its_leases(group: Cluster, replica: Replica, method: str) -> None:
    """Arm `replica`'s trap on `method`: it stops itself (SIGSTOP) right after that call takes
    work; wait for that, then for two leases more."""
    await replica.call("trap", method=method)
    await replica.call("changed")
    await until(replica.paused, 20)
    await asyncio.sleep(2 * group.lease_s)


async def test_a_replica_frozen_after_taking_its_rows_does_not_publish_them_late(
    store_url: str,
) -> None:
    """Replica 0 freezes (SIGSTOP) right after its pass wrote the rows it publishes, before it
    sends them; another replica ends its turn `failed` meanwhile. Woken (SIGCONT), it sends
    nothing of that pass: the relay takes no stale revision. Its turn still runs, so its next
    pass corrects the takeover's `failed` once with a new revision (issue 33), and the turn then
    ends as it truly does."""
    lease_s = 2.0
    async with cluster(store_url, 3, lease_s=lease_s, heartbeat_s=1.0) as group:
        await group.pair()
        await group.everywhere("session", id="s1", created_at=time.time())
        frozen = group.replicas[0]
        await frozen.call("start", session="s1", stream="t1", at=time.time())
        await frozen.call("flush")
        assert group.row("s1") == ("t1", "running")
        try:
            await paused_past_its_leases(group, frozen, "pass_write")
            await until(lambda: group.row("s1") == ("t1", "failed"), 5 * lease_s)
        finally:
            frozen.resume()
        await frozen.call("flush")
        await frozen.call("end", stream="t1", phase="completed")
        await group.everywhere("flush")
        assert group.history("s1") == [
            ("t1", "running"),
            ("t1", "failed"),
            ("t1", "running"),
            ("t1", "completed"),
        ]
        assert group.stale() == 0


async def test_a_replica_frozen_holding_announcement_claims_sends_none_of_them(
    store_url: str,
) -> None:
    """Replica 0 freezes right after it claimed new sessions' announcements; the others take
    them over when the claims end. Woken, it sends none of them again: each goes out once."""
    # No heartbeat passes: the others pass when a claim of replica 0 ends, not before.
    async with cluster(store_url, 3, lease_s=2.0) as group:
        await group.pair()
        await group.everywhere("flush")
        frozen = group.replicas[0]
        sessions = [f"new-{n}" for n in range(3)]
        for sid in sessions:  # seen by replica 0 alone: it records them, then claims them
            await frozen.call("session", id=sid, created_at=time.time())
        try:
            await paused_past_its_leases(group, frozen, "claim_started_scopes")

            def all_sent() -> bool:
                sent = {event.session_id for event in group.relay.started_events}
                return sent >= set(sessions)

            await until(all_sent, 10 * group.lease_s)
        finally:
            frozen.resume()
        await frozen.call("flush")
        await group.everywhere("flush")
        announced = [event.session_id for event in group.relay.started_events]
        assert once_each(announced, sessions) == {}


async def test_a_replica_frozen_holding_deletion_claims_acknowledges_none_again(
    store_url: str,
) -> None:
    """Replica 0 freezes right after it claimed deletions; the others deliver them when the
    claims end. Woken, it acknowledges none of them again."""
    async with cluster(store_url, 3, lease_s=2.0) as group:
        await group.pair()
        deleted = [f"d{n}" for n in range(3)]
        for sid in deleted:
            await group.everywhere("session", id=sid, created_at=time.time())
        await group.everywhere("flush")
        for sid in deleted:
            await group.everywhere("forget", id=sid)
        # Queued by a replica that does not publish (not started): none of them claimed yet.
        queuing = await group.spare(1)
        await queuing.call("delete", sessions=deleted, profile="default")
        await queuing.stop()
        frozen = group.replicas[0]
        try:
            await paused_past_its_leases(group, frozen, "claim_deleted")

            def all_acknowledged() -> bool:
                return {ack.session_id for ack in group.relay.viewed} >= set(deleted)

            await until(all_acknowledged, 10 * group.lease_s)
        finally:
            frozen.resume()
        await frozen.call("flush")
        await group.everywhere("flush")
        assert once_each([ack.session_id for ack in group.relay.viewed], deleted) == {}


@pytest.mark.soak
@pytest.mark.parametrize("offset_s", [pytest.param(0.0, id="exact"), *OFFSETS])
async def test_hand_offs_with_one_replica_clock_off(store_url: str, offset_s: float) -> None:
    """Issue 24's measurement (`-m soak -s`): issue 15's hand-offs (3 replicas, default leases,
    12 sessions, a hand-off every 1 to 4 s for `TALARIA_RELAY_CLOCK_SOAK_S`, 120 s by default),
    replica 0's clock off by `offset_s`; replica 0 and then replica 1 killed with running turns
    and restarted under their names. Prints one row of the table."""
    duration = float(os.environ.get("TALARIA_RELAY_CLOCK_SOAK_S", "120"))
    async with cluster(store_url, 3, heartbeat_s=5.0, offsets={0: offset_s}) as group:
        await group.pair()
        sessions = [f"s{n:02d}" for n in range(12)]
        for sid in sessions:
            await group.everywhere("session", id=sid, created_at=time.time())
        soak = HandOffs(group, sessions)
        watcher = asyncio.create_task(soak.watch())
        try:
            await soak.for_a_while(duration)
            deleted = sessions[:3]
            for n, sid in enumerate(deleted):
                await group.everywhere("forget", id=sid)
                await group.replicas[n].call("delete", session=sid, profile="default")
            for _ in range(3):
                await group.everywhere("flush")
        finally:
            watcher.cancel()
        turns = soak.turns
        wrong = turns.wrong_final(group)
        lost = turns.ends_lost(group)
        announced = once_each([e.session_id for e in group.relay.started_events], sessions)
        acknowledged = once_each([a.session_id for a in group.relay.viewed], deleted)
        print(
            f"\n| {offset_s:+.0f} s | {len(wrong)} of {len(sessions)} {wrong} | {len(lost)} {lost}"
            f" | announcements not once {announced}, deletions not once {acknowledged}"
            f" | {', '.join(f'{t:.1f} s' for t in sorted(soak.to_failed))}"
            f" never {sorted(soak.waiting)} | {soak.count} turns, stale {group.stale()} |"
        )
        assert wrong == []
        assert lost == []
        assert announced == {}
        assert acknowledged == {}
        assert soak.waiting == {}
        assert max(soak.to_failed) <= group.lease_s + 10
        assert group.stale() == 0
