"""The store's asyncpg pool, on stand-in connections: reuse, the size cap, what is never reused."""

from __future__ import annotations

import asyncio

import pytest

from relay.store.sql.pgpool import Pool


class FakeConnection:
    """What the pool asks of an asyncpg connection."""

    def __init__(self) -> None:
        self.closed = False
        self.in_transaction = False
        self.terminated = False

    def is_closed(self) -> bool:
        return self.closed

    def is_in_transaction(self) -> bool:
        return self.in_transaction

    def terminate(self) -> None:
        self.closed = self.terminated = True

    async def close(self) -> None:
        self.closed = True


class Connector:
    def __init__(self) -> None:
        self.made: list[FakeConnection] = []

    async def __call__(self) -> FakeConnection:
        self.made.append(FakeConnection())
        return self.made[-1]


async def test_a_returned_connection_is_handed_out_again() -> None:
    """Sequential calls share one connection: the one made when the pool opened."""
    connect = Connector()
    pool = await Pool.open(connect, 2)
    for _ in range(3):
        pool.release(await pool.acquire())
    assert len(connect.made) == 1


async def test_no_more_than_size_connections_are_out_at_once() -> None:
    """A third caller on a pool of two waits until a connection comes back, then gets it."""
    connect = Connector()
    pool = await Pool.open(connect, 2)
    first, second = await pool.acquire(), await pool.acquire()
    third = asyncio.ensure_future(pool.acquire())
    await asyncio.sleep(0)
    assert not third.done()
    pool.release(second)
    assert await third is second
    assert len(connect.made) == 2
    pool.release(first)
    pool.release(second)


async def test_a_connection_left_in_a_transaction_or_closed_is_never_reused() -> None:
    """A connection still inside a transaction is terminated; a closed one is dropped."""
    connect = Connector()
    pool = await Pool.open(connect, 1)
    held = await pool.acquire()
    held.in_transaction = True
    pool.release(held)
    assert held.terminated
    broken = await pool.acquire()
    assert broken is not held
    broken.closed = True
    pool.release(broken)
    assert await pool.acquire() not in (held, broken)


async def test_closing_waits_for_the_connections_in_use_then_closes_all() -> None:
    """Close refuses new calls at once, returns once every connection is back, closes them."""
    connect = Connector()
    pool = await Pool.open(connect, 2)
    out = await pool.acquire()
    pool.release(await pool.acquire())
    closing = asyncio.ensure_future(pool.close())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError):
        await pool.acquire()
    assert not closing.done()
    assert not out.closed
    pool.release(out)
    await closing
    assert all(conn.closed and not conn.terminated for conn in connect.made)


async def test_a_close_cancelled_while_it_waits_leaves_no_caller_waiting_for_ever() -> None:
    """A caller queued for a slot when close is cancelled gets the closed pool's error."""
    connect = Connector()
    pool = await Pool.open(connect, 1)
    out = await pool.acquire()
    queued = asyncio.ensure_future(pool.acquire())
    closing = asyncio.ensure_future(pool.close())
    await asyncio.sleep(0)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    pool.release(out)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(queued, 1)
