"""Store work on local files never straddles `fork()`: a fork waits for the work under way.

A child forked while a thread of its parent was inside SQLite (a transaction, or only an open or
a close: SQLite's global mutexes), or held the JSON state dir's `flock`, inherits that lock's
bookkeeping (SQLite's per-process lock tables and mutexes, the `flock` shared by an inherited file
descriptor) but not the thread that would release it: the child's store then waits out its busy
timeout on every call, or hangs in its first open. So each such critical section
runs inside `with GATE:`, and a hook run before every `fork()` (gunicorn's, multiprocessing's,
`os.fork`'s) waits until none is under way and holds new ones back until the fork is done.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from relay.logfields import fields

logger = logging.getLogger("relay.store")
T = TypeVar("T")

# A section is one transaction or one locked file operation: milliseconds, unless another
# process holds the file; a fork waits no longer than this for it.
FORK_WAIT_S = 10.0


class ForkGate:
    """Critical sections in any thread (`with GATE:`); `fork()` happens between them."""

    def __init__(self) -> None:
        self.after_fork_in_child()

    def __enter__(self) -> None:
        with self._state:
            while self._forking:
                self._state.wait()
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        with self._state:
            self._inside -= 1
            if not self._inside:
                self._state.notify_all()

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` as one section (for `asyncio.to_thread`)."""
        with self:
            return fn(*args)

    def before_fork(self) -> None:
        """Hold new sections back and wait for those under way; shut until the fork is done."""
        self._state.acquire()
        self._forking = True
        if not self._state.wait_for(lambda: not self._inside, FORK_WAIT_S):
            logger.warning(
                "[relay] fork() while store work ran for %gs: the child may find the store locked",
                FORK_WAIT_S,
                extra=fields("fork_during_store_work"),
            )

    def after_fork_in_parent(self) -> None:
        self._forking = False
        self._state.notify_all()
        self._state.release()

    def after_fork_in_child(self) -> None:
        # No section under way: in a child, the parent's belong to threads it does not have.
        self._state = threading.Condition(threading.Lock())
        self._inside = 0
        self._forking = False


GATE = ForkGate()
os.register_at_fork(
    before=GATE.before_fork,
    after_in_parent=GATE.after_fork_in_parent,
    after_in_child=GATE.after_fork_in_child,
)
