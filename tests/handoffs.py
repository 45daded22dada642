"""The web app's side of the replica tests: turns handed between replicas, and how to judge the
relay's rows by what the test started, ended and killed."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field

from replicas import Cluster, until


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

    def ends_lost(self, group: Cluster) -> list[str]:
        """Turns that did not die whose row the relay showed ending other than they did (a live
        turn taken over and published `failed`): since an ended turn never changes, their true
        end can never be shown."""
        lost = []
        for sid, streams in self.order.items():
            shown = group.history(sid)
            for stream in streams:
                ends = {phase for s, phase in shown if s == stream and phase != "running"}
                if stream not in self.dead and ends - {self.phase[stream]}:
                    lost.append(stream)
        return lost

    def ended_more_than_once(self, group: Cluster) -> list[str]:
        """Dead turns the relay showed ending more than once, or live again after they ended."""
        wrong = []
        for sid in self.order:
            for stream in sorted(self.dead & set(self.order[sid])):
                mine = [phase for shown, phase in group.history(sid) if shown == stream]
                if "failed" in mine and mine[mine.index("failed") :] != ["failed"]:
                    wrong.append(stream)
        return wrong


PHASES = ("completed", "failed", "cancelled")


class HandOffs:
    """The web app's side of the soak: every 1 to 4 s a session's next turn starts on a random live
    replica, the previous one often ending at the same moment elsewhere, superseded turns ending
    late; replicas killed with running turns and started again under their names."""

    def __init__(self, group: Cluster, sessions: list[str]) -> None:
        self.group = group
        self.sessions = sessions
        self.rng = random.Random(15)
        self.turns = Turns()
        self.running: dict[str, tuple[int, str]] = {}  # stream -> (replica, session)
        self.down: set[int] = set()
        self.waiting: dict[str, float] = {}  # session -> when its newest turn died
        self.to_failed: list[float] = []
        self.count = 0

    async def watch(self) -> None:
        """Note when each dead newest turn shows `failed` on the relay."""
        while True:
            for sid, died in list(self.waiting.items()):
                if self.group.row(sid) == (self.turns.newest(sid), "failed"):
                    self.to_failed.append(time.monotonic() - died)
                    del self.waiting[sid]
            await asyncio.sleep(0.05)

    def _end(self, stream: str) -> asyncio.Future[object] | None:
        where, _ = self.running.pop(stream)
        phase = self.rng.choice(PHASES)
        self.turns.phase[stream] = phase
        return asyncio.ensure_future(
            self.group.replicas[where].call("end", stream=stream, phase=phase)
        )

    async def hand_off(self) -> None:
        free = [s for s in self.sessions if s not in self.waiting]
        sid = self.rng.choice(free)
        where = self.rng.choice([n for n in range(len(self.group.replicas)) if n not in self.down])
        self.count += 1
        stream = f"{sid}-{self.count:04d}"
        previous = self.turns.order.get(sid, [None])[-1]
        self.turns.started(sid, stream)
        self.running[stream] = (where, sid)
        calls: list[asyncio.Future[object] | None] = [
            asyncio.ensure_future(
                self.group.replicas[where].call("start", session=sid, stream=stream, at=time.time())
            )
        ]
        if previous in self.running and self.rng.random() < 0.6:
            calls.append(self._end(previous))  # racing the hand-off
        await asyncio.gather(*(call for call in calls if call is not None))
        late = [
            s for s, (_, session) in self.running.items()
            if s != self.turns.newest(session) and self.rng.random() < 0.3
        ]  # fmt: skip
        await asyncio.gather(*(call for s in late if (call := self._end(s)) is not None))

    async def kill(self, victim: int) -> None:
        """kill -9 of `victim` once it hosts a running newest turn; its turns die with it."""
        if not any(
            w == victim and s == self.turns.newest(sid) for s, (w, sid) in self.running.items()
        ):
            sid = self.rng.choice([s for s in self.sessions if s not in self.waiting])
            self.count += 1
            stream = f"{sid}-{self.count:04d}"
            self.turns.started(sid, stream)
            self.running[stream] = (victim, sid)
            await self.group.replicas[victim].call(
                "start", session=sid, stream=stream, at=time.time()
            )
            await self.group.replicas[victim].call("flush")
        self.group.replicas[victim].kill()
        died = time.monotonic()
        self.down.add(victim)
        for stream, (where, sid) in list(self.running.items()):
            if where == victim:
                del self.running[stream]
                self.turns.dead.add(stream)
                self.turns.phase[stream] = "failed"
                if stream == self.turns.newest(sid):
                    self.waiting[sid] = died

    async def restart(self, victim: int) -> None:
        again = await self.group.restart(victim)
        for sid in self.sessions:
            await again.call("session", id=sid, created_at=time.time())
        self.down.discard(victim)

    async def for_a_while(self, duration: float) -> None:
        """Hand turns off every 1 to 4 s for `duration`; replica 0 is killed at a third of it and
        replica 1 at two thirds, each restarted under its name 3 s later; then settle."""
        kills = [(duration / 3, 0), (2 * duration / 3, 1)]
        restarts: list[tuple[float, int]] = []
        began = time.monotonic()
        while time.monotonic() - began < duration:
            elapsed = time.monotonic() - began
            if kills and elapsed >= kills[0][0]:
                victim = kills.pop(0)[1]
                await self.kill(victim)
                restarts.append((elapsed + 3, victim))
            if restarts and elapsed >= restarts[0][0]:
                await self.restart(restarts.pop(0)[1])
            await self.hand_off()
            await asyncio.sleep(self.rng.uniform(1, 4))
        for _, victim in restarts:
            await self.restart(victim)
        await self.settle()

    async def settle(self) -> None:
        # Judged after the numbers are printed: a dead turn that never ends is one of them.
        with contextlib.suppress(AssertionError):
            await until(lambda: not self.waiting, 120)
        await asyncio.gather(
            *(call for s in list(self.running) if (call := self._end(s)) is not None)
        )
        for _ in range(3):
            await self.group.everywhere("flush")
            await asyncio.sleep(1)
