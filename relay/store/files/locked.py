"""The state dir's lock and its locked reads and read-modify-writes, run in worker threads."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from relay.errors import StoreError, StoreUnavailableError
from relay.store.files.documents import _Document
from relay.store.files.io import _read, _write, stale_temps
from relay.store.forkgate import GATE as FORK_GATE

D = TypeVar("D")
R = TypeVar("R")
LOCK = ".talaria-relay.lock"
_PASSING = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EAGAIN, errno.EBUSY}
# As SQLite's busy timeout: a process that holds the dir longer has hung, and a caller that
# waited for ever would hang with it (a publisher pass would never end, nor back off).
LOCK_TIMEOUT_S = 30.0


class LockedDir:
    """One state dir: `fcntl` excludes other processes, a mutex this process's threads."""

    _dir: Path
    _mutex: threading.Lock
    lock_timeout_s: float = LOCK_TIMEOUT_S

    async def _call(self, work: Callable[[], R]) -> R:
        """Run blocking file work in a thread, reporting OS failures as `StoreError`."""

        def guarded() -> R:
            try:
                return work()
            except OSError as exc:
                # A full or read-only file system passes: it is unavailable, not misconfigured.
                kind = StoreUnavailableError if exc.errno in _PASSING else StoreError
                raise kind(f"relay state in {self._dir} is inaccessible: {exc}") from exc

        return await asyncio.to_thread(guarded)

    @contextlib.contextmanager
    def _locked(self, *, exclusive: bool) -> Iterator[None]:
        # A sidecar lock file: a lock on a file that gets replaced would hold only its old inode.
        deadline = time.monotonic() + self.lock_timeout_s
        if not self._mutex.acquire(timeout=self.lock_timeout_s):
            raise self._busy()
        try:
            # From open to close: a child forked in between would share the lock through its
            # copy of the descriptor, and hold it for as long as it lives.
            with FORK_GATE:
                fd = os.open(self._dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    self._flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline)
                    yield
                finally:
                    os.close(fd)
        finally:
            self._mutex.release()

    def _flock(self, fd: int, mode: int, deadline: float) -> None:
        """Take the lock, polling (flock has no timeout) a little less often the longer it takes."""
        pause = 0.001
        while not _try_flock(fd, mode):
            if time.monotonic() >= deadline:
                raise self._busy()
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _busy(self) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"relay state in {self._dir} is locked by another process "
            f"for more than {self.lock_timeout_s:g} s"
        )

    async def _load(self, doc: _Document[D], path: Path | None = None) -> D:
        def work() -> D:
            with self._locked(exclusive=False):
                return doc.parse(_read(path or self._dir / doc.name))

        return await self._call(work)

    async def _update(
        self, doc: _Document[D], edit: Callable[[D], tuple[D, R]], path: Path | None = None
    ) -> R:
        """Read, edit and (only if its text changed) rewrite one document, all under the lock."""
        target = path or self._dir / doc.name

        def work() -> R:
            with self._locked(exclusive=True):
                if target.parent != self._dir:
                    # A profile home, written under this lock too: `open` never sweeps it.
                    self._remove_stale(target.parent)
                value = doc.parse(_read(target))
                before = doc.dump(value)  # now: `edit` may change `value` in place
                value, result = edit(value)
                if (after := doc.dump(value)) != before:
                    _write(target, after)
                return result

        return await self._call(work)

    async def _change(self, doc: _Document[D], edit: Callable[[D], R]) -> R:
        """`_update` for an `edit` that changes the document's value in place (a rule's way)."""

        def in_place(value: D) -> tuple[D, R]:
            return value, edit(value)

        return await self._update(doc, in_place)

    def _sweep(self) -> int:
        """Remove the temp files that killed writers left in the state dir; how many."""
        if not stale_temps(self._dir):
            return 0  # the usual case: opening takes no lock
        with self._locked(exclusive=True):
            return self._remove_stale(self._dir)

    def _remove_stale(self, directory: Path) -> int:
        """Remove `directory`'s temp files of dead writers; the caller holds the exclusive lock.

        Every temp file is made by `_write`, which runs only under this lock and renames or
        removes its temp before the lock is let go. So while we hold the lock, no writer anywhere
        is between making a temp and renaming it: a temp found now is a writer's that died holding
        the lock (the kernel let go of the lock with the process). That holds even for a writer
        in another pid namespace sharing the directory, whose pids mean nothing here. The pid
        check comes on top, and only ever keeps a file: a live pid may be a writer that takes no
        lock (a program of another version), or just a reused pid, whose stale temp then waits
        for a later open, costing a small file.
        """
        stale = stale_temps(directory)
        for temp in stale:
            temp.unlink(missing_ok=True)
        # No directory fsync: a removal lost to a power cut leaves a stale temp the next open
        # removes again.
        return len(stale)

    def _create_dir(self) -> None:
        try:
            self._dir.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            if not self._dir.is_dir():
                raise StoreError(f"relay state dir {self._dir} is not a directory") from None
            return
        os.chmod(self._dir, 0o700)  # mkdir's mode went through the umask


def _try_flock(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
