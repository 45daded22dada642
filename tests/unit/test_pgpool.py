"""The store's asyncpg pool, on stand-in connections: reuse, the size cap, what is never reused."""

from __future__ import annotations

import asyncio

import pytest

from relay.store.sql.drivers.pgpool import Pool


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


class Ticks:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_an_idle_connection_past_its_idle_time_is_closed_not_reused() -> None:
    """A connection idle longer than `max_idle_s` is terminated and a new one made instead."""
    connect, ticks = Connector(), Ticks()
    pool = await Pool.open(connect, 2, max_idle_s=60, clock=ticks)
    pool.release(await pool.acquire())
    ticks.now = 59
    pool.release(await pool.acquire())
    assert len(connect.made) == 1
    ticks.now = 59 + 60
    fresh = await pool.acquire()
    assert fresh is not connect.made[0]
    assert connect.made[0].terminated
    pool.release(fresh)


async def test_a_connection_past_its_lifetime_is_closed_however_busy() -> None:
    """A connection in constant use still ends after `max_lifetime_s`: on its way back."""
    connect, ticks = Connector(), Ticks()
    pool = await Pool.open(connect, 1, max_idle_s=60, max_lifetime_s=100, clock=ticks)
    for second in range(0, 100, 10):
        ticks.now = second
        pool.release(await pool.acquire())
    assert len(connect.made) == 1
    held = await pool.acquire()
    ticks.now = 100
    pool.release(held)
    assert held.terminated
    assert await pool.acquire() is connect.made[1]


async def test_idle_connections_are_closed_with_no_caller_coming() -> None:
    """A pool nobody calls still lets its idle connections go once their idle time is up."""
    connect = Connector()
    pool = await Pool.open(connect, 3, max_idle_s=0.05)
    taken = [await pool.acquire() for _ in range(3)]
    for conn in taken:
        pool.release(conn)
    for _ in range(500):
        if pool.idle == 0:
            break
        await asyncio.sleep(0.01)
    assert pool.idle == 0
    assert all(conn.terminated for conn in connect.made)
    await pool.close()


async def test_discard_all_retires_idle_connections_now_and_busy_ones_on_return() -> None:
    """After `discard_all()` no connection made before it is handed out again."""
    connect = Connector()
    pool = await Pool.open(connect, 2)
    busy, idle = await pool.acquire(), await pool.acquire()
    pool.release(idle)
    pool.discard_all()
    assert idle.terminated
    assert not busy.terminated
    pool.release(busy)
    assert busy.terminated
    assert await pool.acquire() not in (busy, idle)
