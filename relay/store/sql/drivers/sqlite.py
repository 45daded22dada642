"""The SQLite runner: writes in one thread of the store's own, reads on the caller's thread.

A write transaction is one hop to the writer thread: `BEGIN IMMEDIATE` (a deferred transaction
that reads and then writes fails at once with "database is locked" instead of waiting out the busy
timeout), the body, `COMMIT`. A cancelled caller does not stop the thread, so a transaction is
never left half-done. Reads in WAL mode do not wait for writers: they run at once on a read-only
connection, without a thread hop; one that finds the database busy (a checkpoint, a recovery)
goes to the writer thread, which waits out the busy timeout.

The writer thread is `Worker`: a hop to it is one queue put and one loop wake-up, about 22 µs
against 35 µs for `loop.run_in_executor` on a one-thread executor (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from relay.errors import StoreError
from relay.store.forkgate import GATE as FORK_GATE
from relay.store.sql.dialect import SQLITE, Compiled, Row
from relay.store.sql.drivers.runner import NO_PARAMS, Body, Stats, Step, drive, run_steps
from relay.store.sql.drivers.sqlstate import store_error

T = TypeVar("T")
BUSY_TIMEOUT_S = 30.0
_Queued = tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[Any], asyncio.AbstractEventLoop]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    # A caller cancelled while its call ran has stopped waiting; the call itself still finished.
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class Worker:
    """One daemon thread; `await worker.run(fn, *args)` runs `fn(*args)` on it."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Queued | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the thread, after every call queued before it (a cancelled caller stops
        waiting, never the call)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((fn, args, future, loop))
        return await future

    def stop(self) -> None:
        """End the thread once the calls queued so far have run."""
        self._calls.put(None)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            fn, args, future, loop = call
            result, error = None, None
            try:
                with FORK_GATE:  # every call here is SQLite's: never cut in two by a fork
                    result = fn(*args)
            except BaseException as raised:  # handed to the caller, as an executor would
                error = raised
            # A closed loop raises RuntimeError: its caller is gone, and nobody is waiting.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, result, error)


@dataclass(slots=True)
class SqliteTx:
    conn: sqlite3.Connection
    stats: Stats

    async def rows(self, q: Compiled, params: Mapping[str, Any] = NO_PARAMS) -> list[Row]:
        self.stats.statements += 1
        return self.conn.execute(q.sql, q.args(params)).fetchall()

    async def run(self, q: Compiled, params: Mapping[str, Any] = NO_PARAMS) -> int:
        self.stats.statements += 1
        return self.conn.execute(q.sql, q.args(params)).rowcount

    async def many(self, q: Compiled, rows: Sequence[Mapping[str, Any]]) -> None:
        self.stats.statements += 1
        self.conn.executemany(q.sql, [q.args(row) for row in rows])


def connect(path: Path, *, busy_timeout_s: float, read_only: bool = False) -> sqlite3.Connection:
    # isolation_level=None: the driver opens no transactions of its own; we BEGIN ourselves.
    conn = sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        if read_only:
            conn.execute("PRAGMA query_only = 1")
        else:
            _enter_wal(conn, busy_timeout_s)
            # FULL: a commit survives power loss, not only a killed process.
            conn.execute("PRAGMA synchronous = FULL")
    except BaseException:
        conn.close()
        raise
    return conn


def _enter_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> None:
    """WAL mode, waiting out the busy timeout: turning a new file to WAL needs its exclusive lock,
    and SQLite answers SQLITE_BUSY at once, without its busy handler, while another connection
    writes in rollback mode (a second process creating the same new file, a host's own writer)."""
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
        else:
            return


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that never writes, for `status` on a database it may not write.

    `mode=ro` still needs the WAL index (`-shm`) writable; on read-only media, or a file it may
    not write, `immutable=1` reads the file as it is.
    """
    uri = path.absolute().as_uri()
    for flags in ("mode=ro", "immutable=1"):
        conn = sqlite3.connect(
            f"{uri}?{flags}", uri=True, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute("PRAGMA query_only = 1")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
        except sqlite3.OperationalError:
            conn.close()
            if flags == "immutable=1":
                raise
            continue
        return conn
    raise AssertionError("unreachable")


def create_private(path: Path) -> None:
    """The database holds the publisher key: create it 0600 in a 0700 directory."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))


# The files this process has open, and those the process it was forked from had open. SQLite's
# per-process lock tables and WAL-index bookkeeping are keyed by file: a child that opens one of
# its parent's files shares that inherited state without the locks behind it, and can lose its
# writes when the parent checkpoints (seen: a child's committed row gone).
_open_files: Counter[str] = Counter()
_inherited: set[str] = set()


def _after_fork_in_child() -> None:
    _inherited.update(name for name, count in _open_files.items() if count)
    _open_files.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class SqliteRunner:
    """Runs bodies on one SQLite file; `await SqliteRunner.open(path, display)`."""

    dialect = SQLITE

    def __init__(self, display: str, thread: Worker) -> None:
        self.stats = Stats()
        self._display = display
        self._name: str | None = None  # registered in `_open_files`
        self._thread: Worker | None = thread
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        # Whether the file is in WAL mode, where a commit without an fsync is safe (see `write`).
        self._wal = False

    @classmethod
    async def open(
        cls,
        path: Path,
        display: str,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        *,
        read_only: bool = False,
    ) -> SqliteRunner:
        runner = cls(display, Worker("relay-sqlite"))
        try:
            # By its real path: the same file under another name is the same SQLite state.
            name = await runner._in_thread(os.path.realpath, path)
            if name in _inherited:
                raise StoreError(
                    f"relay store {display} was open in the process this one was forked from, "
                    "and SQLite cannot share a database across fork(): open it in a process that "
                    "never had it open (start the relay service after the fork, e.g. in "
                    "gunicorn's post_fork)"
                )
            _open_files[name] += 1
            runner._name = name
            if read_only:
                # One connection that cannot write; a write on it fails as SQLite refuses it.
                runner._writer = runner._reader = await runner._in_thread(connect_read_only, path)
            else:
                runner._writer, runner._reader, runner._wal = await runner._in_thread(
                    _open_pair, path, busy_timeout_s
                )
        except BaseException:
            await runner.close()
            raise
        return runner

    async def read(self, body: Body[T]) -> T:
        reader = self._reader
        if reader is None:
            raise StoreError(f"the store {self._display} is closed")
        try:
            self.stats.transactions += 1
            with FORK_GATE:
                return drive(body(SqliteTx(reader, self.stats)))
        except sqlite3.Error as error:
            code = getattr(error, "sqlite_errorcode", None)
            if code not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise self._translated(error) from error
        return await self._in_thread(self._read_waiting, body)

    async def batch(self, steps: Sequence[Step]) -> list[Row]:
        return await self.write(lambda tx: run_steps(tx, steps))

    async def write(self, body: Body[T], *, single: bool = False, durable: bool = True) -> T:
        return await self._in_thread(self._transaction, body, durable or not self._wal)

    def _read_waiting(self, body: Body[T]) -> T:
        assert self._writer is not None
        return drive(body(SqliteTx(self._writer, self.stats)))

    def _transaction(self, body: Body[T], durable: bool = True) -> T:
        conn = self._writer
        assert conn is not None
        self.stats.transactions += 1
        if durable:
            self.stats.writes += 1
        else:
            self.stats.unsynced += 1
            # In WAL mode, NORMAL appends the commit to the WAL without syncing it: a crash
            # of the process loses nothing, a power cut may lose this commit (never older
            # ones, nor the file's integrity), and the next durable commit or checkpoint
            # syncs it along with its own.
            conn.execute("PRAGMA synchronous = NORMAL")
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = drive(body(SqliteTx(conn, self.stats)))
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result
        finally:
            if not durable:
                conn.execute("PRAGMA synchronous = FULL")

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        if self._thread is None:
            raise StoreError(f"the store {self._display} is closed")
        try:
            return await self._thread.run(fn, *args)
        except sqlite3.Error as error:
            raise self._translated(error) from error

    def _translated(self, error: sqlite3.Error) -> StoreError:
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        # The extended code tells "disk I/O error" apart: a write refused (a read-only file or
        # file system) is SQLITE_IOERR_WRITE.
        if name := getattr(error, "sqlite_errorname", None):
            text = f"{text} ({name})"
        failed = not isinstance(error, sqlite3.OperationalError)
        return store_error(self._display, text, failed=failed)

    def bound_waits(self, seconds: float) -> None:
        """Nothing to bound: the file is on this host, and its busy wait is its own."""

    async def close(self) -> None:
        if self._name is not None:
            _open_files[self._name] -= 1
            self._name = None
        thread, self._thread = self._thread, None
        reader, self._reader = self._reader, None
        writer, self._writer = self._writer, None
        if reader is not None and reader is not writer:
            with FORK_GATE:
                reader.close()
        if thread is not None:
            if writer is not None:
                await thread.run(writer.close)
            thread.stop()


def _open_pair(
    path: Path, busy_timeout_s: float
) -> tuple[sqlite3.Connection, sqlite3.Connection, bool]:
    """The writer, the reader, and whether the file is in WAL mode."""
    writer = connect(path, busy_timeout_s=busy_timeout_s)
    try:
        wal = str(writer.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
        # Never waits on the caller's thread: a busy read goes to the writer thread instead.
        reader = connect(path, busy_timeout_s=0.0, read_only=True)
    except BaseException:
        writer.close()
        raise
    return writer, reader, wal
