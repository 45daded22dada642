"""A pool of asyncpg connections that takes a connection back without awaiting anything.

asyncpg's own `Pool` runs every release as a shielded task, with a reset query (a round trip)
unless told otherwise. Measured by `talaria-relay bench` on `profile_identity`, the store read at
0.1 x one bare connection's rate with it, 0.38-0.54 x with the reset skipped, and 0.74-1.22 x
on this pool. The store needs none of what it does: it sets no session state, and the runner
terminates a connection that a failed or cancelled body may have left inside a transaction, so
taking a connection back is a push onto a list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

Connect = Callable[[], Awaitable[Any]]


class Pool:
    """At most `size` connections, the most recently used handed out first."""

    def __init__(self, connect: Connect, size: int) -> None:
        self._connect = connect
        self._size = size
        self._idle: list[Any] = []
        # Free slots: taking one when any is free returns without suspending.
        self._slots = asyncio.Semaphore(size)
        self._closed = False

    @classmethod
    async def open(cls, connect: Connect, size: int) -> Pool:
        """A pool with one connection made, so an unreachable server fails here."""
        pool = cls(connect, size)
        pool._idle.append(await connect())
        return pool

    async def acquire(self) -> Any:
        """A live connection, waiting for a free slot when all `size` are out."""
        if self._closed:
            raise RuntimeError("the pool is closed")
        await self._slots.acquire()
        try:
            if self._closed:
                raise RuntimeError("the pool is closed")
            while self._idle:
                conn = self._idle.pop()
                if not conn.is_closed():
                    return conn
            return await self._connect()
        except BaseException:
            self._slots.release()
            raise

    def release(self, conn: Any) -> None:
        """Take `conn` back; one that is closed or still inside a transaction is dropped."""
        try:
            if conn.is_closed():
                return
            if conn.is_in_transaction():
                conn.terminate()
            else:
                self._idle.append(conn)
        finally:
            self._slots.release()

    async def close(self) -> None:
        """Refuse new calls, wait for the connections in use to come back, then close all."""
        self._closed = True
        taken = 0
        try:
            for _ in range(self._size):
                await self._slots.acquire()
                taken += 1
            idle, self._idle = self._idle, []
            for conn in idle:
                try:
                    await conn.close()
                except Exception:
                    conn.terminate()  # the server is gone; nothing to say goodbye to
        finally:
            # Callers already waiting for a slot wake, see the pool closed, and raise; so do
            # they if this close is cancelled while it waits.
            for _ in range(taken):
                self._slots.release()
