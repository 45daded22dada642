"""The store's backlog as metrics: the deleted outbox's depth and the started ledger's unsent.

Both are store reads, so they are taken only while an SDK records metrics (`relay.metrics`),
and at most every `SAMPLE_S` seconds: a steady replica pays nothing for them without one.
"""

from __future__ import annotations

import time
from typing import Protocol

from relay import metrics
from relay.errors import RelayError
from relay.store.contract import DeletedOutbox, StartedLedger

SAMPLE_S = 10.0


class Backlog(DeletedOutbox, StartedLedger, Protocol):
    """The two aggregates whose backlog is sampled."""


class Levels:
    """One publisher's view of the backlog, added to `relay.outbox.depth`/`relay.ledger.unsent`."""

    def __init__(self, store: Backlog) -> None:
        self._store = store
        self._outbox = metrics.Gauge("outbox_depth")
        self._unsent = metrics.Gauge("ledger_unsent")
        self._next = 0.0

    async def sample(self) -> None:
        """After a pass: read both levels if metrics are on and the last sample is old enough."""
        now = time.monotonic()
        if metrics.current() is None or now < self._next:
            return
        self._next = now + SAMPLE_S
        try:
            depth = len(await self._store.pending_deleted())
            unsent = sum(
                not entry.sent
                for scope in await self._store.started_ledger()
                for entry in scope.entries
            )
        except RelayError:
            return  # the pass has already published; a failed sample waits for the next one
        self._outbox.set(depth)
        self._unsent.set(unsent)

    def clear(self) -> None:
        """A stopped publisher no longer reports a backlog (another replica may)."""
        self._outbox.clear()
        self._unsent.clear()
