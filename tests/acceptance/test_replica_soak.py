"""Soak: three replicas under churn for minutes, their clocks running days ahead (opt in).

    pytest -m soak                          # 2 minutes
    TALARIA_RELAY_SOAK_S=600 pytest -m soak

Sessions come and go, turns hop between replicas, tabs renew presence and the clocks jump an
hour every few seconds, so the 24 h ledger window and the 15 min retention both turn over many
times. What must hold: every table stays bounded, no replica's memory keeps growing, and the
relay never saw a stale revision.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

import asyncpg
import pytest
from backends import on
from replicas import Cluster, cluster

pytestmark = [pytest.mark.soak, on("postgres")]

HOUR = 3600.0
TABLES = ("relay_started", "relay_runs", "relay_deleted", "relay_presence")


async def counts(store_url: str) -> dict[str, int]:
    conn = await asyncpg.connect(store_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        return {t: int(await conn.fetchval(f"SELECT count(*) FROM {t}")) for t in TABLES}
    finally:
        await conn.close()


class Churn:
    """The web app's side: sessions, turns on replicas, deletions, tabs; a clock that jumps."""

    def __init__(self, group: Cluster, skew: list[float]) -> None:
        self.group = group
        self.skew = skew
        self.rng = random.Random(8)
        self.sessions: list[str] = []
        self.running: dict[str, tuple[int, str]] = {}  # session -> (replica, stream)
        self.created: dict[str, float] = {}
        self.count = 0
        self.seq = 0

    def now(self) -> float:
        return time.time() + self.skew[0]

    async def step(self) -> None:
        group, rng = self.group, self.rng
        action = rng.random()
        idle = [s for s in self.sessions if s not in self.running]
        if action < 0.25 or not self.sessions:
            self.count += 1
            sid = f"s{self.count}"
            await group.everywhere("session", id=sid, created_at=self.now())
            self.sessions.append(sid)
            self.created[sid] = self.now()
        elif action < 0.5 and idle:
            sid, where = rng.choice(idle), rng.randrange(3)
            self.count += 1
            stream = f"t{self.count}"
            await group.replicas[where].call("start", session=sid, stream=stream, at=self.now())
            self.running[sid] = (where, stream)
        elif action < 0.75 and self.running:
            sid = rng.choice(sorted(self.running))
            where, stream = self.running.pop(sid)
            phase = rng.choice(["completed", "failed", "cancelled"])
            await group.replicas[where].call("end", stream=stream, phase=phase)
        elif action < 0.85 and idle:
            sid = rng.choice(idle)
            self.sessions.remove(sid)
            await group.everywhere("forget", id=sid)
            await group.replicas[rng.randrange(3)].call("delete", session=sid, profile="default")
        else:
            self.seq += 1
            tab = f"tab-{rng.randrange(4):07d}"
            body = {"tab_id": tab, "active": rng.random() < 0.7, "seq": self.seq}
            await group.replicas[rng.randrange(3)].call("presence", body=body)

    async def advance(self, seconds: float) -> None:
        self.skew[0] += seconds
        await self.group.everywhere("advance", seconds=seconds)

    async def settle(self) -> None:
        for where, stream in sorted(self.running.values()):
            await self.group.replicas[where].call("end", stream=stream, phase="completed")
        self.running.clear()
        for _ in range(3):
            await self.group.everywhere("flush")


async def test_state_and_memory_stay_bounded_under_churn(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under churn and clock jumps past a ledger window, tables shrink back and replica memory stays
    flat."""
    duration = float(os.environ.get("TALARIA_RELAY_SOAK_S", "120"))
    # The clocks jump by hand: each replica's wall clock is its time base, not Postgres's.
    monkeypatch.setenv("TALARIA_RELAY_TEST_LOCAL_CLOCK", "1")
    skew = [0.0]
    async with cluster(store_url, 3, heartbeat_s=2.0, clock=lambda: time.time() + skew[0]) as group:
        await group.pair()
        churn = Churn(group, skew)
        began = time.monotonic()
        baseline: list[int] | None = None
        jumped = began
        while time.monotonic() - began < duration:
            await churn.step()
            if time.monotonic() - jumped > duration / 40:
                await churn.advance(HOUR)
                jumped = time.monotonic()
            if baseline is None and time.monotonic() - began > duration / 4:
                baseline = await group.everywhere("rss")
            await asyncio.sleep(0.02)
        await churn.settle()
        # Past the 15 min retention of every finished turn.
        await churn.advance(16 * 60)
        await churn.settle()

        tables = await counts(store_url)
        recent = [sid for sid, at in churn.created.items() if at >= churn.now() - 24 * HOUR]
        assert skew[0] >= 24 * HOUR, "the clocks did not pass one ledger window"
        assert tables["relay_started"] <= len(recent)
        assert tables["relay_runs"] == 0
        assert tables["relay_deleted"] == 0
        assert tables["relay_presence"] <= 4
        assert group.stale() == 0
        assert baseline is not None
        grown = [
            end - start for start, end in zip(baseline, await group.everywhere("rss"), strict=True)
        ]
        assert max(grown) < 30 * 1024, f"replica memory grew by {grown} KiB"
