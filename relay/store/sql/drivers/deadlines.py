"""Deadlines for the calls in flight, on one timer for all of them.

A call in autocommit (one statement, or one `relay_batch` call) is bounded from the client by
`statement_timeout`: a server that never answers, or a wait the server does not end, must not hold
a replica for ever. asyncpg's `timeout=` makes a timer of its own for every statement, a tenth of
the client's time on a one-row read (docs/query-plans.md). Here every call only notes its
deadline; one timer, running only while calls are in flight, looks a few times per timeout and
cancels the task of a call past its deadline, which asyncpg answers as it does a timeout (it asks
the server to cancel the statement), so a call ends between 1 and 1.25 times the timeout after it
began.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

# How often the timer looks, per timeout: a call ends at most a quarter of one late.
CHECKS = 4


class Deadlines:
    """`start()` a call, `expired(token)` if it was cancelled here, `end(token)` always."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._period = timeout_s / CHECKS
        self._calls: dict[int, tuple[float, asyncio.Task[Any]]] = {}
        self._expired: set[int] = set()
        self._tokens = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> int:
        task = asyncio.current_task()
        assert task is not None
        token = next(self._tokens)
        self._calls[token] = (time.monotonic() + self.timeout_s, task)
        if self._timer is None or self._loop is not task.get_loop():
            self._loop = task.get_loop()
            self._timer = self._loop.call_later(self._period, self._check)
        return token

    def expired(self, token: int) -> bool:
        return token in self._expired

    def end(self, token: int) -> None:
        self._calls.pop(token, None)
        self._expired.discard(token)

    def _check(self) -> None:
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        for token, (deadline, task) in list(self._calls.items()):
            if deadline <= now and token not in self._expired and not task.done():
                self._expired.add(token)
                task.cancel()
        # Only while calls are in flight: an idle store leaves nothing on the loop.
        self._timer = loop.call_later(self._period, self._check) if self._calls else None
