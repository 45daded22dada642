"""A cancelled store call never leaves a lock or a half-done transaction behind."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from backends import on
from sqlalchemy import make_url

from relay.store import open_store

NOW = 1_800_000_000_000


@pytest.fixture
async def blocker(store_url: str) -> AsyncIterator[Any]:
    """A connection of its own to the store's database, to hold row locks."""
    dsn = make_url(store_url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


@on("postgres")
async def test_cancelled_postgres_call_releases_its_connection(
    store_url: str, blocker: Any
) -> None:
    """A call cancelled while waiting on a row lock leaves no transaction open on the server."""
    async with open_store(store_url) as store:
        await store.allocate_revisions(1, NOW)
        blocking = blocker.transaction()
        await blocking.start()
        await blocker.execute("SELECT floor FROM relay_revision WHERE id = 1 FOR UPDATE")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(store.allocate_revisions(1, NOW), 0.5)
        await blocking.rollback()
        # The cancelled statement's backend is gone: nothing waits on or holds relay rows.
        for _ in range(50):
            waiting = await blocker.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND state <> 'idle'"
            )
            if waiting == 0:
                break
            await asyncio.sleep(0.1)
        assert waiting == 0
        # The cancelled allocation may or may not have committed; either way none repeats.
        after = await store.allocate_revisions(2, NOW)
        assert after in ([NOW + 1, NOW + 2], [NOW + 2, NOW + 3])
        assert await store.revision_floor() == after[-1]


@on("sqlite")
async def test_cancelled_sqlite_call_still_ends_its_transaction(store_url: str) -> None:
    """A call cancelled while SQLite is busy ends in its thread; the file is never left locked."""
    path = make_url(store_url).database
    assert path is not None
    async with open_store(store_url) as store:
        await store.allocate_revisions(1, NOW)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(store.allocate_revisions(1, NOW), 0.3)
        other.execute("ROLLBACK")
        other.close()
        # The cancelled allocation completes in the store's thread; the next one follows it.
        assert await store.allocate_revisions(1, NOW) == [NOW + 2]
        probe = sqlite3.connect(path, isolation_level=None, timeout=0)
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        probe.close()


@on("postgres")
async def test_closing_a_postgres_store_lets_a_call_under_way_finish(
    store_url: str, blocker: Any
) -> None:
    """A store closed while a call waits on a row lock: the call ends, then the store closes."""
    store = await open_store(store_url)
    await store.allocate_revisions(1, NOW)
    async with blocker.transaction():
        await blocker.execute("SELECT floor FROM relay_revision WHERE id = 1 FOR UPDATE")
        call = asyncio.create_task(store.allocate_revisions(1, NOW))
        await asyncio.sleep(0.3)  # the call waits on the lock
        closing = asyncio.create_task(store.close())
        await asyncio.sleep(0.3)
        assert not closing.done()  # waiting for the call's connection
    assert await asyncio.wait_for(call, 30) == [NOW + 1]
    await asyncio.wait_for(closing, 30)
