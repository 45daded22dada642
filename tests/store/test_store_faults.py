"""Faults of the store under a running publisher: a database that restarts, a connection killed
holding row locks, a SQLite file locked by another process, a read-only file or directory, a
full disk.

Each fault is real (a killed backend, a second process, a read-only mount, an immutable file, a
full tmpfs). For each: the pass fails with one `[relay]` line naming the store's trouble and the
5 s backoff, the store keeps all it held, work that arrives meanwhile waits in memory, and the
first pass after the fault ends publishes the row, the announcement and the deletion.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from backends import on
from harness import PUBLISHER_ID, Env, relay_env
from intact import failed_pass, prepared, recovered
from privileged import fill, immutable, read_only, tmpfs
from sql_support import sql_backend

from relay.errors import StoreUnavailableError
from relay.store import RelayStore, open_store
from relay.store.files import JsonDocuments
from relay.store.files.lock import LOCK
from relay.store.rules.book import RulebookBackend
from relay.store.sql.backend import SqlBackend
from relay.store.sql.dialect import Compiled
from relay.store.sql.drivers.postgres import PostgresTx
from relay.store.sql.drivers.sqlite import SqliteRunner
from relay.store.store import Store

# Held far longer than this, a lock fails the write; the default (30 s) would only be slower.
BUSY_TIMEOUT_S = 0.2


async def until(condition: Callable[[], Awaitable[bool]], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not await condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.02)


async def ends_during(env: Env) -> None:
    """Work that arrives while the store is down: s1's turn completes and is viewed. It waits
    in memory for the store."""
    await env.service.note_terminal("stream-s1", "completed")
    env.host.end_run("stream-s1")
    await env.service.mark_viewed("s1")


async def published_after(env: Env) -> None:
    """What arrived during the fault reached the relay once the store was back."""
    (row,) = [
        r for r in env.relay.rows(PUBLISHER_ID, await env.profile_id()) if r.session_id == "s1"
    ]
    assert row.phase == "completed"
    assert "s1" in [ack.session_id for ack in env.relay.viewed]


# ── Postgres ─────────────────────────────────────────────────────────────────


def database_of(store_url: str) -> str:
    return store_url.rsplit("/", 1)[1]


async def sql(url: str, statement: str, *args: object) -> Any:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        return await conn.fetchval(statement, *args)
    finally:
        await conn.close()


@on("postgres")
async def test_postgres_restarting_mid_pass_backs_off_and_recovers(
    store: RelayStore, store_url: str, pg_admin_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The database drops every connection and refuses new ones while a pass waits on the
    relay (a restart): the pass fails at its next store call, the next one while still down;
    each logs one line (asyncpg logs nothing of its own), and the first pass after the restart
    recovers with nothing lost and no connection left idle in a transaction."""
    database = database_of(store_url)
    caplog.set_level(logging.WARNING)
    async with relay_env(store) as env:
        before = await prepared(env)
        gate = env.wire.hold("snapshot")
        passing = asyncio.create_task(env.publish())
        await env.wire.held.wait()
        await sql(pg_admin_url, f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        try:
            ended = (
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1"
            )
            assert await sql(pg_admin_url, ended, database) >= 1

            async def resume() -> float | None:
                gate.set()
                return await passing

            assert "is unavailable: " in await failed_pass(env, resume)
            await ends_during(env)
            line = await failed_pass(env, env.publish, delay=10.0)
            assert "still failing (relay store " in line
            assert "is not currently accepting connections" in line
        finally:
            await sql(pg_admin_url, f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await recovered(env, before, env.publish)
        await published_after(env)
    idle = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state LIKE 'idle in tr%'"
    assert await sql(pg_admin_url, idle, database) == 0
    assert [r.getMessage() for r in caplog.records if r.name.startswith("asyncpg")] == []


@on("postgres")
async def test_a_connection_the_server_closed_is_unavailable_not_a_bug(
    store: RelayStore, store_url: str, pg_admin_url: str
) -> None:
    """The first call on a pooled connection the server has just closed raises
    `StoreUnavailableError` (not asyncpg's own InterfaceError), and the next call works."""
    database = database_of(store_url)
    ended = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1"
    for _ in range(3):
        floor = await store.revision_floor()
        assert await sql(pg_admin_url, ended, database) == 1
        with contextlib.suppress(StoreUnavailableError):  # or the pool noticed in time
            await store.revision_floor()
        assert await store.revision_floor() == floor


class _Rollback(Exception):
    pass


@on("postgres")
async def test_a_connection_killed_holding_row_locks_releases_them_and_recovers(
    store: RelayStore, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The publisher's connection dies in the middle of a transaction that has written (and so
    locked) its run rows: the server lets the locks go with it, the pass fails with one line,
    and the next pass, on a fresh connection, publishes everything."""
    holding, release = asyncio.Event(), asyncio.Event()
    many = PostgresTx.many

    async def pausing(self: PostgresTx, q: Compiled, rows: Sequence[Mapping[str, Any]]) -> None:
        await many(self, q, rows)
        if "relay_runs" in q.sql and not holding.is_set():  # the rows are written, not committed
            holding.set()
            await release.wait()

    async def writable(probe: asyncpg.Connection) -> bool:
        """Whether another transaction may write s1's run row now, without waiting for a lock."""
        try:
            async with probe.transaction():
                await probe.execute("SET LOCAL lock_timeout = '50ms'")
                await probe.execute(
                    "INSERT INTO relay_runs"
                    " (session_id, title, phase, started_at, updated_at, owner, lease_until)"
                    " VALUES ('s1', '', 'running', 0, 0, 'probe', 0)"
                    " ON CONFLICT (session_id) DO UPDATE SET owner = relay_runs.owner"
                )
                raise _Rollback  # leave the row as it was
        except asyncpg.LockNotAvailableError:
            return False
        except _Rollback:
            return True

    # A pass's write is one `relay_batch` call, atomic on the server; a transaction that holds
    # row locks between statements is its fallback (a schema at 0005, a role without EXECUTE).
    monkeypatch.setattr(sql_backend(store).runner, "batch_calls", False)
    async with relay_env(store) as env:
        before = await prepared(env)
        monkeypatch.setattr(PostgresTx, "many", pausing)
        passing = asyncio.create_task(env.publish())
        probe = await asyncpg.connect(store_url.replace("postgresql+asyncpg", "postgresql"))
        try:
            await holding.wait()
            assert not await writable(probe)
            pid = await probe.fetchval(
                "SELECT pid FROM pg_stat_activity"
                " WHERE datname = current_database() AND state LIKE 'idle in transaction%'"
            )
            assert await probe.fetchval("SELECT pg_terminate_backend($1)", pid)
            await until(lambda: writable(probe))

            async def resume() -> float | None:
                release.set()
                return await passing

            line = await failed_pass(env, resume)
            assert "is unavailable: the connection was lost (" in line
        finally:
            release.set()  # a failed check must not leave the pass (and its connection) hanging
            await passing
            await probe.close()
        monkeypatch.undo()
        await recovered(env, before, env.publish)


# ── SQLite ───────────────────────────────────────────────────────────────────


@contextlib.asynccontextmanager
async def impatient_sqlite(path: Path) -> AsyncIterator[RelayStore]:
    """A migrated SQLite store on `path` that waits BUSY_TIMEOUT_S for a lock, not 30 s."""
    async with open_store(f"sqlite:///{path}"):
        pass  # creates and migrates the file
    display = f"sqlite:///{path}"
    store = Store(SqlBackend(await SqliteRunner.open(path, display, BUSY_TIMEOUT_S), display))
    try:
        yield store
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def held_by_another_process(script: str, path: Path) -> AsyncIterator[None]:
    """Run `script` on `path` in another process: it takes a lock, prints `locked`, and holds
    the lock until the block ends (a line on its stdin)."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(path),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        assert await holder.stdout.readline() == b"locked\n"
        yield
    finally:
        holder.stdin.write(b"\n")
        await holder.stdin.drain()
        assert await holder.wait() == 0


def locked_by_another_process(path: Path) -> contextlib.AbstractAsyncContextManager[None]:
    """Another process holds the SQLite write lock (`BEGIN EXCLUSIVE`) until the block ends."""
    script = (
        "import sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.readline()\n"
        "db.execute('ROLLBACK')\n"
    )
    return held_by_another_process(script, path)


@pytest.mark.sqlite
async def test_a_sqlite_file_locked_past_the_busy_timeout_backs_off_until_released(
    tmp_path: Path,
) -> None:
    """Another process holds the write lock longer than the busy timeout: each pass fails with
    `database is locked` and backs off (5 s, then 10 s); once it lets go, the next pass
    publishes everything, what arrived meanwhile included."""
    path = tmp_path / "relay.db"
    async with impatient_sqlite(path) as store, relay_env(store) as env:
        before = await prepared(env)
        async with locked_by_another_process(path):
            line = await failed_pass(env, env.publish)
            assert "is unavailable: database is locked (SQLITE_BUSY)" in line
            assert await store.load_config() == before.config  # reads go on (WAL)
            await ends_during(env)
            assert "still failing" in await failed_pass(env, env.publish, delay=10.0)
        await recovered(env, before, env.publish)
        await published_after(env)


@pytest.mark.sqlite
async def test_a_read_only_sqlite_file_backs_off_until_writable(tmp_path: Path) -> None:
    """The database file and its WAL become unwritable (immutable: root is refused too): each
    write fails as a refused disk write and the pass backs off; writable again, it recovers.
    (The `-shm` index stays writable: it is memory-mapped, and a mapped page that cannot be
    written kills the process with SIGBUS, as a read-only file system cannot do to it either.)"""
    path = tmp_path / "relay.db"
    async with open_store(f"sqlite:///{path}") as store, relay_env(store) as env:
        before = await prepared(env)
        with immutable(path, path.with_name("relay.db-wal")):
            line = await failed_pass(env, env.publish)
            assert "is unavailable: disk I/O error (SQLITE_IOERR_WRITE)" in line
        await recovered(env, before, env.publish)


def json_dir_locked_by_another_process(state: Path) -> contextlib.AbstractAsyncContextManager[None]:
    """Another process holds the state dir's lock (a hung writer) until the block ends."""
    script = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    return held_by_another_process(script, state / LOCK)


@pytest.mark.json
async def test_a_json_state_dir_locked_past_the_timeout_backs_off_until_released(
    tmp_path: Path,
) -> None:
    """A hung process holds the state dir's lock: reads and writes give up after the lock
    timeout as unavailable, the pass backs off instead of hanging; released, it recovers."""
    state = tmp_path / "state"
    async with open_store(f"json://{state}") as store, relay_env(store) as env:
        assert isinstance(store, Store)
        assert isinstance(store.backend, RulebookBackend)
        documents = store.backend.documents
        assert isinstance(documents, JsonDocuments)
        documents.lock.timeout_s = BUSY_TIMEOUT_S
        before = await prepared(env)
        async with json_dir_locked_by_another_process(state):
            line = await failed_pass(env, env.publish)
            assert f"relay state in {state} is locked by another process for more than" in line
            with pytest.raises(StoreUnavailableError, match="locked by another process"):
                await store.load_config()
            await ends_during(env)
        await recovered(env, before, env.publish)
        await published_after(env)


@pytest.mark.json
async def test_a_read_only_json_state_dir_backs_off_until_writable(tmp_path: Path) -> None:
    """The JSON state dir is mounted read-only: the pass fails with `Read-only file system` and
    backs off; mounted writable again, the next pass recovers and nothing was lost."""
    state = tmp_path / "state"
    async with open_store(f"json://{state}") as store, relay_env(store) as env:
        before = await prepared(env)
        with read_only(state):
            line = await failed_pass(env, env.publish)
            assert f"relay state in {state} is inaccessible: [Errno 30] Read-only" in line
            await ends_during(env)
        await recovered(env, before, env.publish)
        await published_after(env)


FULL_DISK = {
    "json": "[Errno 28] No space left on device",
    "sqlite": "database or disk is full (SQLITE_FULL)",
}


@on("json", "sqlite")
async def test_a_full_disk_backs_off_until_space_returns(tmp_path: Path, backend: str) -> None:
    """The store's file system (a 4 MiB tmpfs) fills up: each pass fails naming the full disk
    and backs off; space freed, the next pass recovers and nothing was lost."""
    expected = FULL_DISK[backend]
    with tmpfs(tmp_path / "disk", "4m") as disk:
        url = f"json://{disk / 'state'}" if backend == "json" else f"sqlite:///{disk / 'relay.db'}"
        async with open_store(url) as store, relay_env(store) as env:
            before = await prepared(env)
            filler = fill(disk)
            try:
                assert expected in await failed_pass(env, env.publish)
                assert "still failing" in await failed_pass(env, env.publish, delay=10.0)
            finally:
                filler.unlink()
            await recovered(env, before, env.publish)
