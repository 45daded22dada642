"""`StoreWatch`: whether this replica's store answers, from the calls it makes anyway.

A replica whose packets to Postgres are silently dropped (a firewall, a half-open connection, a
partition) sees no error: its calls just wait. The watch notes when each watched call began and
how it ended, so `health()` answers at once, a silence is logged once (WARNING) as soon as a
call has waited `wait_s` (well before another replica may take this one's leases over), and the
store's answer again once (INFO). Times are monotonic (`ticks`): a silence is a duration.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from relay.errors import StoreUnavailableError
from relay.logfields import fields
from relay.publishing.logs import Reporter

T = TypeVar("T")
# The store's waits (connect, statement, lock) are bounded to this share of the lease, so a
# silent store is noticed, and a call given up, within half a lease (`RelayService`): an idle
# replica asks its store every quarter lease (`Leases.poll_s`), and waits a fifth at most.
STORE_WAIT_SHARE = 0.2


@dataclass(eq=False)
class StoreWatch:
    """The store's answers as this replica saw them; one per service, shared by its publishers."""

    wait_s: float
    report: Reporter
    ticks: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._tokens = itertools.count()
        # Calls in flight, by token: when each began.
        self._calls: dict[int, float] = {}
        # Since when the store has not answered: the start of the first call that has not
        # answered since its last answer (in flight, or given up as unavailable). None: it has.
        self._since: float | None = None
        self._failed = False
        self._warned = False
        self._timer: asyncio.TimerHandle | None = None

    async def call(self, awaitable: Awaitable[T]) -> T:
        """`await awaitable`, a store call, noting whether the store answered it."""
        token = next(self._tokens)
        began = self.ticks()
        self._calls[token] = began
        if self._since is None:
            self._since = began
        self._arm()
        # Whether the store answered; any error but these is its answer (a refusal, a bad row).
        heard: bool | None = True
        try:
            return await awaitable
        except StoreUnavailableError:
            heard = False
            raise
        except asyncio.CancelledError:
            heard = None  # a cancel says nothing of the store
            raise
        finally:
            del self._calls[token]
            if heard:  # the silence, if any, is over (said once)
                if self._warned:
                    silent = self.silent_s()
                    self.report.info(
                        f"[relay] Talaria relay store answers again after {silent or 0.0:.1f}s",
                        fields("store_recovered", retry_in=silent),
                    )
                self._since = None if not self._calls else min(self._calls.values())
                self._failed = self._warned = False
            elif heard is False:  # given up without an answer (unavailable, past its wait)
                self._failed = True
                if self._since is None:
                    self._since = self.ticks()
                self.check()
            elif not self._calls and not self._failed:
                self._since = None

    def silent_s(self) -> float | None:
        """Seconds the store has left this replica without an answer; None while it answers (a
        call in flight counts from its start: a few milliseconds are normal)."""
        if self._since is None:
            return None
        return max(self.ticks() - self._since, 0.0)

    @property
    def silent(self) -> bool:
        """No answer for `wait_s` or more, or the last call was given up unanswered."""
        silent = self.silent_s()
        return silent is not None and (self._failed or silent >= self.wait_s)

    def check(self) -> None:
        """Say once that the store is silent, as soon as it has left a call waiting `wait_s`: a
        quick refusal (nothing listening, a read-only server) is the failed pass's own line."""
        silent = self.silent_s()
        if silent is not None and silent >= self.wait_s and not self._warned:
            self._warned = True
            silent = self.silent_s() or 0.0
            self.report.warning(
                f"[relay] Talaria relay store has not answered for {silent:.1f}s "
                f"(calls wait {self.wait_s:.1f}s at most); this replica's leases lapse "
                "unless it answers again",
                fields("store_silent", retry_in=silent),
            )

    def _arm(self) -> None:
        """Look again once the oldest call in flight has waited `wait_s`."""
        if self._timer is not None or not math.isfinite(self.wait_s):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return

        def fire() -> None:
            self._timer = None
            self.check()
            if self._calls and not self._warned:
                self._arm()

        oldest = min(self._calls.values(), default=self.ticks())
        delay = max(oldest + self.wait_s - self.ticks(), 0.0) + 0.001
        self._timer = loop.call_later(delay, fire)
