"""`fork()` while another thread is inside store work on local files: the child's store works.

Without the fork gate the child inherits the parent's lock bookkeeping (SQLite's in-process lock
tables, a `flock` shared through the inherited descriptor) with no thread left to release it, and
each of its writes waits out the busy timeout (the threaded facade's forked child once hung so).
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from relay.errors import StoreError
from relay.store.files import JsonDocuments
from relay.store.rules.book import RulebookBackend
from relay.store.sql.dialect import Compiled
from relay.store.sql.drivers.runner import Tx
from relay.store.sql.drivers.sqlite import SqliteRunner

HOLD_S = 0.5
pytestmark = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")


def _statement(sql: str) -> Compiled:
    return Compiled(sql, None, {})


def _insert(path: Path, value: str, busy_timeout_s: float, hold: Callable[[], None]) -> None:
    async def body(tx: Tx) -> None:
        await tx.run(_statement(f"INSERT INTO t VALUES ('{value}')"))
        hold()

    async def main() -> None:
        runner = await SqliteRunner.open(path, "test", busy_timeout_s)
        try:
            await runner.write(body)
        finally:
            await runner.close()

    asyncio.run(main())


def _in_child(work: Callable[[], None]) -> tuple[int | None, float]:
    """Fork (multiprocessing's fork runs the at-fork hooks), run `work` in the child: its exit
    code and when the fork returned in the parent."""
    child = multiprocessing.get_context("fork").Process(target=work)
    child.start()
    forked = time.monotonic()
    child.join(30)
    return child.exitcode, forked


@dataclass
class Held:
    """`hold()`, called inside a section: it signals `inside`, stays HOLD_S, notes when it left."""

    inside: threading.Event = field(default_factory=threading.Event)
    left: float = math.inf

    def hold(self) -> None:
        self.inside.set()
        time.sleep(HOLD_S)
        self.left = time.monotonic()


@pytest.fixture
def held() -> Held:
    return Held()


def test_a_fork_waits_for_a_sqlite_write_under_way(tmp_path: Path, held: Held) -> None:
    """The child forks once the parent's transaction is over, and has SQLite to itself."""
    path, other = tmp_path / "relay.db", tmp_path / "other.db"
    asyncio.run(_create(path))
    writer = threading.Thread(target=_insert, args=(path, "parent", 5.0, held.hold))
    writer.start()
    assert held.inside.wait(10)
    code, forked = _in_child(lambda: asyncio.run(_create(other)))
    writer.join()
    assert code == 0
    assert forked > held.left  # it waited for the parent's transaction
    assert asyncio.run(_values(path)) == ["parent"]


def test_a_child_refuses_the_sqlite_files_its_parent_has_open(tmp_path: Path) -> None:
    """SQLite's state of a file the parent has open comes along into the child without its
    locks: the child is refused that file (a clear `StoreError`), not others, and not once the
    parent had closed it before the fork."""
    path = tmp_path / "relay.db"
    asyncio.run(_create(path))

    def refused() -> None:
        with pytest.raises(StoreError, match="forked"):
            asyncio.run(_values(path))
        asyncio.run(_create(tmp_path / "child.db"))

    # Forked from this thread (as a server forks its workers), the file open on a loop here.
    with asyncio.Runner() as loop:
        runner = loop.run(SqliteRunner.open(path, "test"))
        try:
            code, _ = _in_child(refused)
            assert code == 0
        finally:
            loop.run(runner.close())
    code, _ = _in_child(lambda: _insert(path, "child", 2.0, lambda: None))
    assert code == 0
    assert asyncio.run(_values(path)) == ["child"]


def test_a_fork_waits_for_the_state_dir_lock(tmp_path: Path, held: Held) -> None:
    """A child forked while another thread holds the JSON state dir's lock waits for it, then
    writes."""
    documents = asyncio.run(JsonDocuments.open(tmp_path))

    def lock() -> None:
        with documents.lock.locked(exclusive=True):
            held.hold()

    def child() -> None:
        async def main() -> Any:
            again = await JsonDocuments.open(tmp_path)
            again.lock.timeout_s = 2.0
            backend = RulebookBackend(again)
            try:
                return await backend.allocate_revisions(1, 0)
            finally:
                await backend.close()

        asyncio.run(main())

    holder = threading.Thread(target=lock)
    holder.start()
    assert held.inside.wait(10)
    code, forked = _in_child(child)
    holder.join()
    assert code == 0
    assert forked > held.left


async def _create(path: Path) -> None:
    async def body(tx: Tx) -> None:
        await tx.run(_statement("CREATE TABLE IF NOT EXISTS t (v TEXT)"))

    runner = await SqliteRunner.open(path, "test")
    try:
        await runner.write(body)
    finally:
        await runner.close()


async def _values(path: Path) -> list[str]:
    async def body(tx: Tx) -> list[str]:
        return [row[0] for row in await tx.rows(_statement("SELECT v FROM t ORDER BY v"))]

    runner = await SqliteRunner.open(path, "test")
    try:
        return await runner.read(body)
    finally:
        await runner.close()
