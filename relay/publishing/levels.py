"""The store's backlog as metrics: the deleted outbox's depth and the started ledger's unsent,
from one store read (counts made in the store) taken only while an SDK records metrics, at most
every `SAMPLE_S` seconds."""

from __future__ import annotations

import time

from relay import metrics
from relay.errors import RelayError
from relay.store.contract import Backlogs

SAMPLE_S = 10.0


class Levels:
    """One publisher's view of the backlog, added to `relay.outbox.depth`/`relay.ledger.unsent`."""

    def __init__(self, store: Backlogs) -> None:
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
            found = await self._store.backlog()
        except RelayError:
            return  # the pass has already published; a failed sample waits for the next one
        self._outbox.set(sum(waiting.count for waiting in found.deleted.values()))
        self._unsent.set(sum(waiting.count for waiting in found.unsent.values()))

    def clear(self) -> None:
        """A stopped publisher no longer reports a backlog (another replica may)."""
        self._outbox.clear()
        self._unsent.clear()
