"""`fork()` while another thread is inside store work on local files: the child's store works.

Without the fork gate the child inherits the parent's lock bookkeeping (SQLite's in-process lock
tables, a `flock` shared through the inherited descriptor) with no thread left to release it, and
each of its writes waits out the busy timeout (the threaded facade's forked child once hung so).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from relay.store.files.store import FileStore
from relay.store.sql.dialect import Compiled
from relay.store.sql.runner import Tx
from relay.store.sql.sqlite import SqliteRunner

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
    code and how long the fork itself took in the parent."""
    began = time.monotonic()
    child = multiprocessing.get_context("fork").Process(target=work)
    child.start()
    forked = time.monotonic() - began
    child.join(30)
    return child.exitcode, forked


@pytest.fixture
def held() -> tuple[threading.Event, Callable[[], None]]:
    """`hold`, to call inside the section: it signals `inside`, then stays HOLD_S."""
    inside = threading.Event()

    def hold() -> None:
        inside.set()
        time.sleep(HOLD_S)

    return inside, hold


def test_a_fork_waits_for_a_sqlite_write_under_way(
    tmp_path: Path, held: tuple[threading.Event, Callable[[], None]]
) -> None:
    path = tmp_path / "relay.db"
    asyncio.run(_create(path))
    inside, hold = held
    writer = threading.Thread(target=_insert, args=(path, "parent", 5.0, hold))
    writer.start()
    assert inside.wait(10)
    code, forked = _in_child(lambda: _insert(path, "child", 2.0, lambda: None))
    writer.join()
    assert code == 0
    assert forked >= HOLD_S * 0.8  # it waited for the parent's transaction
    assert asyncio.run(_values(path)) == ["child", "parent"]


def test_a_fork_waits_for_the_state_dir_lock(
    tmp_path: Path, held: tuple[threading.Event, Callable[[], None]]
) -> None:
    store = asyncio.run(FileStore.open(tmp_path))
    inside, hold = held

    def lock() -> None:
        with store._locked(exclusive=True):
            hold()

    def child() -> None:
        async def main() -> Any:
            again = await FileStore.open(tmp_path)
            again.lock_timeout_s = 2.0
            try:
                return await again.allocate_revisions(1, 0)
            finally:
                await again.close()

        asyncio.run(main())

    holder = threading.Thread(target=lock)
    holder.start()
    assert inside.wait(10)
    code, forked = _in_child(child)
    holder.join()
    assert code == 0
    assert forked >= HOLD_S * 0.8


async def _create(path: Path) -> None:
    async def body(tx: Tx) -> None:
        await tx.run(_statement("CREATE TABLE t (v TEXT)"))

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
