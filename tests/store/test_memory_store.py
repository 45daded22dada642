"""What only the memory store does: every open is a new store, and it ends when it is closed.

Its rules are the contract's, proven by `test_store_contract.py` like every backend's.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from relay.cli import demo
from relay.errors import InvalidInputError, StoreError
from relay.store import open_store, resolve
from relay.store.sql import migrate

pytestmark = pytest.mark.memory

NOW = 1_800_000_000_000


async def test_each_open_is_a_new_empty_store() -> None:
    """Two opens of `memory://` share nothing, and an open after a close starts empty."""
    async with open_store("memory://") as first, open_store("memory://") as second:
        identity = await first.profile_identity("alpha")
        await first.allocate_revisions(1, NOW)
        assert await second.identities() == {}
        assert await second.revision_floor() == 0
        assert await second.profile_identity("alpha") != identity
    async with open_store("memory://") as reopened:
        assert await reopened.identities() == {}


async def test_a_closed_memory_store_refuses_every_call() -> None:
    """After `close()` the state is gone, and a call says the store is closed."""
    store = await open_store("memory://")
    await store.allocate_revisions(1, NOW)
    await store.close()
    with pytest.raises(StoreError, match="memory:// is closed"):
        await store.revision_floor()
    with pytest.raises(StoreError, match="memory:// is closed"):
        await store.allocate_revisions(1, NOW)


async def test_threads_sharing_a_memory_store_never_share_a_revision() -> None:
    """Event loops in several threads drawing from one store get distinct revisions."""
    async with open_store("memory://") as store:
        drawn: list[int] = []
        lock = threading.Lock()

        async def draw() -> None:
            for _ in range(200):
                revisions = await store.allocate_revisions(2, NOW)
                with lock:
                    drawn.extend(revisions)

        await asyncio.gather(*(asyncio.to_thread(asyncio.run, draw()) for _ in range(4)))
        assert sorted(drawn) == list(range(NOW, NOW + 1600))


async def test_a_memory_store_has_no_schema_and_no_place() -> None:
    """`memory://` names no file or database: it has no schema to show or migrate."""
    target = resolve(" MEMORY:// ")
    assert (target.backend, target.path, target.url, target.display) == (
        "memory",
        None,
        None,
        "memory://",
    )
    with pytest.raises(InvalidInputError, match="memory stores have no database schema"):
        _ = target.sqlalchemy_url
    with pytest.raises(InvalidInputError, match="a memory store has no schema revision"):
        await migrate.current(resolve("memory://"))
    with pytest.raises(InvalidInputError, match="a memory store has no schema to migrate"):
        await migrate.upgrade(resolve("memory://"))


async def test_the_demo_refuses_replica_processes_on_a_memory_store() -> None:
    """Replica processes would each open a store of their own, so the demo refuses them."""
    with pytest.raises(InvalidInputError, match="cannot share a memory:// store"):
        await demo.run("memory://", replicas=1)
