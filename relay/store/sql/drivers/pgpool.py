"""A pool of asyncpg connections that takes a connection back without awaiting anything.

asyncpg's own `Pool` runs every release as a shielded task, with a reset query (a round trip)
unless told otherwise: the store read at a tenth of one bare connection's rate on it
(docs/performance.md). The store needs none of what it does: it sets no session state, and the
runner terminates a connection that a failed or cancelled body may have left inside a
transaction, so taking a connection back is a push onto a list.

A connection lives `max_lifetime_s` at most and waits `max_idle_s` at most unused: asyncpg reads
a multi-host URL and `target_session_attrs` only when it connects, so only a new connection can
find a new primary or a new address for a name.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

Connect = Callable[[], Awaitable[Any]]


@dataclass(eq=False)
class Pool:
    """At most `size` connections, the most recently used handed out first."""

    connect: Connect
    size: int
    _: KW_ONLY
    max_idle_s: float = math.inf
    max_lifetime_s: float = math.inf
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        # Idle connections and when each came back, least recently used first.
        self._idle: list[tuple[Any, float]] = []
        # Each connection's birth and generation, by id: `discard_all` starts a new generation.
        self._born: dict[int, tuple[float, int]] = {}
        self._generation = 0
        # Free slots: taking one when any is free returns without suspending.
        self._slots = asyncio.Semaphore(self.size)
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None

    @classmethod
    async def open(cls, connect: Connect, size: int, **limits: Any) -> Pool:
        """A pool with one connection made, so an unreachable server fails here."""
        pool = cls(connect, size, **limits)
        pool._idle.append((await pool._new(), pool.clock()))
        pool._schedule()
        return pool

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def acquire(self) -> Any:
        """A live connection, waiting for a free slot when all `size` are out."""
        if self._closed:
            raise RuntimeError("the pool is closed")
        await self._slots.acquire()
        try:
            if self._closed:
                raise RuntimeError("the pool is closed")
            now = self.clock()
            while self._idle:
                conn, since = self._idle.pop()
                if self._usable(conn, since, now):
                    return conn
            return await self._new()
        except BaseException:
            self._slots.release()
            raise

    def release(self, conn: Any) -> None:
        """Take `conn` back; one closed, still inside a transaction, or past its lifetime or
        generation is dropped."""
        try:
            now = self.clock()  # read once per release
            if conn.is_closed():
                self._born.pop(id(conn), None)
            elif conn.is_in_transaction() or self._spent(conn, now):
                self._retire(conn)
            else:
                self._idle.append((conn, now))
                self._schedule()
        finally:
            self._slots.release()

    def discard_all(self) -> None:
        """Retire every connection: the idle ones now, those in use as they come back."""
        self._generation += 1
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            self._retire(conn)

    async def close(self) -> None:
        """Refuse new calls, wait for the connections in use to come back, then close all."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        taken = 0
        try:
            for _ in range(self.size):
                await self._slots.acquire()
                taken += 1
            idle, self._idle = self._idle, []
            for conn, _ in idle:
                self._born.pop(id(conn), None)
                try:
                    await conn.close()
                except Exception:
                    conn.terminate()  # the server is gone; nothing to say goodbye to
        finally:
            # Callers already waiting for a slot wake, see the pool closed, and raise; so do
            # they if this close is cancelled while it waits.
            for _ in range(taken):
                self._slots.release()

    async def _new(self) -> Any:
        conn = await self.connect()
        self._born[id(conn)] = (self.clock(), self._generation)
        return conn

    def _usable(self, conn: Any, since: float, now: float) -> bool:
        """Whether `conn`, idle since `since`, may serve again; one that may not is dropped."""
        if conn.is_closed():
            self._born.pop(id(conn), None)
        elif self._spent(conn, now) or now - since >= self.max_idle_s:
            self._retire(conn)
        else:
            return True
        return False

    def _spent(self, conn: Any, now: float) -> bool:
        born, generation = self._born.get(id(conn), (now, self._generation))
        return generation != self._generation or now - born >= self.max_lifetime_s

    def _retire(self, conn: Any) -> None:
        # An idle connection has no transaction to lose: the server just sees it go.
        self._born.pop(id(conn), None)
        conn.terminate()

    def _schedule(self) -> None:
        """Prune again when the first idle connection's time is up (no timer without limits)."""
        if self._timer is not None or self._closed or not self._idle:
            return
        now = self.clock()
        due = min(
            min(since + self.max_idle_s, self._born.get(id(c), (now, 0))[0] + self.max_lifetime_s)
            for c, since in self._idle
        )
        if math.isinf(due):
            return

        def fire() -> None:
            # Retire the idle connections past their idle time or lifetime.
            self._timer = None
            now = self.clock()
            self._idle = [(c, since) for c, since in self._idle if self._usable(c, since, now)]
            self._schedule()

        # A millisecond late, so the prune finds the connection's time up, not a hair short.
        delay = max(due - now, 0.0) + 0.001
        self._timer = asyncio.get_running_loop().call_later(delay, fire)
