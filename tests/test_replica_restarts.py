"""Issue 15 with real processes on Postgres: a replica killed (-9) while it hosts running turns
and started again under its own name, while other replicas hold superseded turns and remembered
outcomes. Judged on the relay alone: no row ever goes back to an older turn, every final row is
the session's newest turn with its true phase, each dead turn ends `failed` once.

    pytest tests/test_replica_restarts.py                 # the short case, 2 s leases
    pytest tests/test_replica_restarts.py -m soak -s      # 3 minutes of hand-offs, measured
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from backends import on
from replicas import Cluster, cluster

pytestmark = on("postgres")


async def until(condition: Callable[[], bool], within: float, step: float = 0.05) -> float:
    """Seconds it took `condition` to hold; fails after `within` seconds."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > within:
            raise AssertionError(f"not within {within}s")
        await asyncio.sleep(step)
    return time.monotonic() - began


@dataclass
class Turns:
    """What the test started and ended, to judge the relay by: each session's turns in order,
    the newest one's true phase, the turns that died with their replica."""

    order: dict[str, list[str]] = field(default_factory=dict)  # session -> its streams, in order
    phase: dict[str, str] = field(default_factory=dict)  # stream -> its true phase now
    dead: set[str] = field(default_factory=set)

    def started(self, session: str, stream: str) -> None:
        self.order.setdefault(session, []).append(stream)
        self.phase[stream] = "running"

    def newest(self, session: str) -> str:
        return self.order[session][-1]

    def flips(self, group: Cluster, session: str) -> int:
        """How often the relay's row went back to an older turn of `session`."""
        rank = {stream: n for n, stream in enumerate(self.order[session])}
        newest, back = -1, 0
        for stream, _ in group.history(session):
            n = rank[stream or ""]
            back += n < newest
            newest = max(newest, n)
        return back

    def wrong_final(self, group: Cluster) -> list[str]:
        """Sessions whose row on the relay is not their newest turn with its true phase."""
        return [
            sid
            for sid in sorted(self.order)
            if group.row(sid) != (self.newest(sid), self.phase[self.newest(sid)])
        ]

    def ended_more_than_once(self, group: Cluster) -> list[str]:
        """Dead turns the relay showed ending more than once, or live again after they ended."""
        wrong = []
        for sid in self.order:
            for stream in sorted(self.dead & set(self.order[sid])):
                mine = [phase for shown, phase in group.history(sid) if shown == stream]
                if "failed" in mine and mine[mine.index("failed") :] != ["failed"]:
                    wrong.append(stream)
        return wrong


async def test_a_replica_restarted_under_its_name_ends_its_dead_turns_once(store_url: str) -> None:
    """Replica 0 hosts the newest turn of three sessions; replica 1 still runs turns they
    superseded and replica 2 remembers older outcomes. Replica 0 is killed and a new process
    under its name starts at once: every row stays the newest turn and ends `failed` once within
    a few leases; late ends of the superseded turns change nothing; the relay took no stale
    revision."""
    lease_s = 2.0
    async with cluster(store_url, 3, lease_s=lease_s, heartbeat_s=1.0) as group:
        await group.pair()
        a, b, c = group.replicas
        turns = Turns()
        sessions = ("s1", "s2", "s3")
        for sid in sessions:
            await group.everywhere("session", id=sid, created_at=time.time())
        base = time.time()
        for n, sid in enumerate(sessions):
            turns.started(sid, f"{sid}-0")
            await c.call("start", session=sid, stream=f"{sid}-0", at=base + n)
            await c.call("end", stream=f"{sid}-0", phase="completed")
            turns.phase[f"{sid}-0"] = "completed"
            turns.started(sid, f"{sid}-1")
            await b.call("start", session=sid, stream=f"{sid}-1", at=base + 10 + n)
            turns.started(sid, f"{sid}-2")
            await a.call("start", session=sid, stream=f"{sid}-2", at=base + 20 + n)
        await group.everywhere("flush")
        await group.everywhere("flush")
        assert [group.row(sid) for sid in sessions] == [(f"{s}-2", "running") for s in sessions]

        a.kill()
        killed = time.monotonic()
        again = await group.restart(0)
        assert again.owner == a.owner
        assert again.incarnation != a.incarnation
        assert again.incarnation.startswith(f"{a.owner}/")
        for sid in sessions:
            await again.call("session", id=sid, created_at=base)
            turns.dead.add(f"{sid}-2")
            turns.phase[f"{sid}-2"] = "failed"

        def all_failed() -> bool:
            return all(group.row(sid) == (f"{sid}-2", "failed") for sid in sessions)

        took = await until(all_failed, 10 * lease_s)
        print(f"dead turns ended failed {time.monotonic() - killed:.1f}s after kill -9")
        # The superseded turns end late, on the replicas still hosting them.
        for sid in sessions:
            await b.call("end", stream=f"{sid}-1", phase="completed")
            turns.phase[f"{sid}-1"] = "completed"
        await asyncio.sleep(lease_s)
        await group.everywhere("flush")
        await group.everywhere("flush")
        assert took <= 5 * lease_s
        assert [turns.flips(group, sid) for sid in sessions] == [0, 0, 0]
        assert turns.wrong_final(group) == []
        assert turns.ended_more_than_once(group) == []
        for sid in sessions:
            assert group.history(sid)[-2:] == [(f"{sid}-2", "running"), (f"{sid}-2", "failed")]
        assert group.stale() == 0
