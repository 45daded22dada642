"""The state dir's lock: `flock` on a sidecar file across processes, a mutex across threads."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from relay.errors import StoreUnavailableError
from relay.store.files.io import JOURNAL, roll_forward
from relay.store.forkgate import GATE as FORK_GATE

LOCK = ".talaria-relay.lock"
# As SQLite's busy timeout: a process that holds the dir longer has hung, and a caller that
# waited for ever would hang with it (a publisher pass would never end, nor back off).
LOCK_TIMEOUT_S = 30.0


class DirLock:
    """One state dir's lock; whoever takes it first finishes a killed writer's journal."""

    def __init__(self, directory: Path, timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.directory = directory
        self.timeout_s = timeout_s
        self._journal = str(directory / JOURNAL)  # looked for at every lock: no Path on the way
        # flock excludes other processes; this keeps this process's threads out of each other's way.
        self._mutex = threading.Lock()

    @contextlib.contextmanager
    def locked(self, *, exclusive: bool) -> Iterator[None]:
        # A sidecar lock file: a lock on a file that gets replaced would hold only its old inode.
        deadline = time.monotonic() + self.timeout_s
        if not self._mutex.acquire(timeout=self.timeout_s):
            raise self.busy()
        try:
            # From open to close: a child forked in between would share the lock through its
            # copy of the descriptor, and hold it for as long as it lives.
            with FORK_GATE:
                fd = os.open(self.directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    self._flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline)
                    if os.path.exists(self._journal):
                        # A writer died inside a change: finish it before anyone reads.
                        if not exclusive:
                            self._flock(fd, fcntl.LOCK_EX, deadline)
                        roll_forward(self.directory)
                        if not exclusive:
                            self._flock(fd, fcntl.LOCK_SH, deadline)
                    yield
                finally:
                    os.close(fd)
        finally:
            self._mutex.release()

    def _flock(self, fd: int, mode: int, deadline: float) -> None:
        """Take the lock, polling (flock has no timeout) a little less often the longer it takes."""
        pause = 0.001
        while True:
            try:
                return fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise self.busy() from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def busy(self) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"relay state in {self.directory} is locked by another process "
            f"for more than {self.timeout_s:g} s"
        )
