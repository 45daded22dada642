"""A rolling deploy with real processes: replicas of the previous release (the code of the schema
head before the newest migration, built from the git history) beside replicas of this code, on a
Postgres database this code migrated: to head when the newest migration is an expand one, to the
previous head when it is a contract one (the old code cannot run past it). Turns move between old
and new replicas, an old replica is killed -9 and restarted on the old code mid-rollout, sessions
are deleted through both. Judged on the relay: no flip, every final row the newest turn with its
true phase, each announcement and deletion once, no stale revision. After a contract migration's
rollout, `migrate` is refused while old replicas live and applies once they stopped.

    pytest tests/acceptance/test_mixed_fleet.py               # about 30 s of hand-offs
    pytest tests/acceptance/test_mixed_fleet.py -m soak -s    # 3 minutes, figures printed
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass

import pytest
from handoffs import HandOffs
from previous_release import Release, install
from replicas import REPLY_TIMEOUT_S, Cluster, Replica, spawn, until

from relay.errors import SchemaError
from relay.store import open_store
from relay.store.sql import compat
from relay.store.sql.migrate import alembic_config, head_revision, upgrade
from relay.store.url import resolve
from relay.testing import DevRelay, serve

pytestmark = pytest.mark.postgres

HEAD = head_revision()
LEASE_S = 4.0
OLD = (1, 3)  # which of the four replicas run the previous release


async def spawn_previous(release: Release, group_url: str, relay_url: str, owner: str) -> Replica:
    """A replica of the previous release: its own interpreter and its own `replica_proc.py`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    process = await asyncio.create_subprocess_exec(
        str(release.python),
        str(release.replica_proc),
        group_url,
        relay_url,
        owner,
        str(LEASE_S),
        "1.0",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=release.replica_proc.parents[2],
        env=env,
    )
    assert process.stdout is not None
    ready = json.loads(await asyncio.wait_for(process.stdout.readline(), REPLY_TIMEOUT_S))
    assert ready["ok"], ready
    return Replica(owner, process, ready["ready"])


@dataclass
class Figures:
    turns: int
    dead: int
    flips: int
    wrong: list[str]
    twice: list[str]
    stale: int
    announced_twice: list[str]
    deleted: dict[str, int]
    republish_s: float
    fleet_listed: bool
    offsets_recorded: bool
    to_failed_s: list[float]
    # The contract step after the rollout: "" when the newest migration is an expand one.
    contract: str = ""

    def line(self) -> str:
        return (
            f"{self.turns} turns, {self.dead} died with their replica; flips {self.flips}, "
            f"wrong final rows {len(self.wrong)} {self.wrong}, ended twice {self.twice}, stale "
            f"{self.stale}, announced twice {self.announced_twice}, deletions {self.deleted}; "
            f"the restarted old replica published again {self.republish_s:.1f}s after its start; "
            f"dead turns shown failed {', '.join(f'{t:.1f}s' for t in self.to_failed_s)} after "
            f"the kill{'; contract step ' + self.contract if self.contract else ''}"
        )


def newest_is_contract() -> bool:
    """Whether this code's newest migration is a contract one (the old code stops below it)."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    return compat.kind(scripts.get_revision(head_revision())) == compat.CONTRACT


async def contract_step(url: str, replicas: list[Replica]) -> str:
    """`migrate` to head while the old replicas live (refused, naming them), then once they
    stopped (applied); the new replicas still flush on the migrated database."""
    with pytest.raises(SchemaError, match="contract") as refused:
        await upgrade(resolve(url))
    named = [r.incarnation for n, r in enumerate(replicas) if n in OLD]
    assert all(owner in str(refused.value) for owner in named), refused.value
    for n in OLD:
        await replicas[n].stop()
    applied = [revision.id for revision in await upgrade(resolve(url))]
    assert applied[-1] == head_revision(), applied
    for n, replica in enumerate(replicas):
        if n not in OLD:
            await replica.call("flush")
    return f"refused while old replicas lived, then applied {', '.join(applied)}"


async def mixed_fleet(url: str, duration: float) -> Figures:
    """Two old and two new replicas, hand-offs for `duration` seconds, an old one killed -9 at a
    third of it and restarted (old code) 3 s later; deletions through every replica halfway."""
    release = await asyncio.to_thread(install)
    assert release.head != head_revision(), "the previous release has this schema head"
    contract = newest_is_contract()
    # A contract migration waits for the rollout: the deploy runs at the old code's head.
    await upgrade(resolve(url), release.head if contract else "head")
    relay = DevRelay()
    async with AsyncExitStack() as stack:
        relay_url = await stack.enter_async_context(serve(relay))
        replicas: list[Replica] = []

        async def stop_all() -> None:
            await asyncio.gather(*(r.stop() for r in replicas))

        stack.push_async_callback(stop_all)
        for n in range(4):
            name = f"{'old' if n in OLD else 'new'}-{n}"
            replicas.append(
                await spawn_previous(release, url, relay_url, name)
                if n in OLD
                else await spawn(url, relay_url, name, lease_s=LEASE_S, heartbeat_s=1.0)
            )
        group = Cluster(relay, relay_url, url, replicas, LEASE_S, 1.0)
        await group.pair()
        sessions = [f"s{n:02d}" for n in range(10)]
        doomed = [f"d{n}" for n in range(4)]
        for sid in [*sessions, *doomed]:
            await group.everywhere("session", id=sid, created_at=time.time())
        for n, sid in enumerate(doomed):
            await replicas[n].call("start", session=sid, stream=f"{sid}-t", at=time.time())
            await replicas[n].call("end", stream=f"{sid}-t", phase="completed")
        await group.everywhere("flush")

        soak = HandOffs(group, sessions)
        watcher = asyncio.create_task(soak.watch())
        victim, kill_at, deleted, republish = OLD[0], duration / 3, False, 0.0
        began = time.monotonic()
        try:
            while time.monotonic() - began < duration:
                elapsed = time.monotonic() - began
                if republish == 0.0 and elapsed >= kill_at:
                    await soak.kill(victim)
                    await asyncio.sleep(3)
                    republish = await restart_previous(soak, victim, release)
                if not deleted and elapsed >= duration / 2:
                    deleted = True
                    for n, sid in enumerate(doomed):
                        await group.everywhere("forget", id=sid)
                        await replicas[n].call("delete", session=sid, profile="default")
                await soak.hand_off()
                await asyncio.sleep(soak.rng.uniform(0.3, 1.2))
            await soak.settle()
        finally:
            watcher.cancel()
        # The fleet lists the replicas of this code (the previous release may record none), each
        # with its clock offset to the store's, whatever rows the old replicas wrote beside them.
        async with open_store(url) as store:
            members = [m for m in await store.fleet() if m.live(int(time.time() * 1000))]
        live = {m.owner for m in members}
        newer = {r.incarnation for n, r in enumerate(replicas) if n not in OLD}
        offsets = {m.owner: m.clock_offset_ms for m in members if m.owner in newer}
        turns = soak.turns
        announced = Counter(event.session_id for event in relay.started_events)
        acks = Counter(ack.session_id for ack in relay.viewed)
        step = await contract_step(url, replicas) if contract else ""
        return Figures(
            turns=soak.count,
            dead=len(turns.dead),
            flips=sum(turns.flips(group, sid) for sid in turns.order),
            wrong=turns.wrong_final(group),
            twice=turns.ended_more_than_once(group),
            stale=group.stale(),
            announced_twice=sorted(sid for sid, n in announced.items() if n > 1),
            deleted={sid: acks[sid] for sid in doomed},
            republish_s=republish,
            fleet_listed=newer <= live,
            offsets_recorded=all(offset is not None for offset in offsets.values()),
            to_failed_s=sorted(soak.to_failed),
            contract=step,
        )


async def restart_previous(soak: HandOffs, index: int, release: Release) -> float:
    """The killed old replica started again on the old code under its name; seconds from its
    start until the relay shows a turn it then runs."""
    group = soak.group
    await group.replicas[index].process.wait()
    again = await spawn_previous(
        release, group.store_url, group.relay_url, group.replicas[index].owner
    )
    group.replicas[index] = again
    await again.call("start_service")
    started = time.monotonic()
    for sid in soak.sessions:
        await again.call("session", id=sid, created_at=time.time())
    soak.down.discard(index)
    sid = soak.rng.choice([s for s in soak.sessions if s not in soak.waiting])
    soak.count += 1
    stream = f"{sid}-{soak.count:04d}"
    soak.turns.started(sid, stream)
    soak.running[stream] = (index, sid)
    await again.call("start", session=sid, stream=stream, at=time.time())
    await until(lambda: group.row(sid) == (stream, "running"), 10 * LEASE_S)
    return time.monotonic() - started


def judge(figures: Figures) -> None:
    print(f"\nmixed fleet: {figures.line()}")
    assert figures.flips == 0
    assert figures.wrong == []
    assert figures.twice == []
    assert figures.stale == 0
    assert figures.announced_twice == []
    assert set(figures.deleted.values()) == {1}, figures.deleted
    assert figures.dead > 0
    assert figures.fleet_listed
    assert figures.offsets_recorded
    assert figures.contract in ("", f"refused while old replicas lived, then applied {HEAD}")


async def test_mixed_fleet(pg_database: str) -> None:
    """Old and new replicas share one database at head for 30 s of hand-offs with an old replica
    killed -9 and restarted: one truth per session, announcements and deletions once."""
    judge(await mixed_fleet(pg_database, float(os.environ.get("TALARIA_RELAY_MIXED_S", "30"))))


@pytest.mark.soak
async def test_mixed_fleet_for_minutes(pg_database: str) -> None:
    """The same for 3 minutes (`TALARIA_RELAY_MIXED_SOAK_S`), figures printed (`-s`)."""
    judge(
        await mixed_fleet(pg_database, float(os.environ.get("TALARIA_RELAY_MIXED_SOAK_S", "180")))
    )
