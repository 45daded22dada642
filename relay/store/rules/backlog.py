"""The work waiting, counted in the documents: what `relay.store.sql.backlog` counts in SQL."""

from __future__ import annotations

from collections.abc import Iterable

from relay.store.records import Backlog, Waiting
from relay.store.rules.ledger import Ledger, unsent
from relay.store.rules.outbox import Outbox


def _grouped(pairs: Iterable[tuple[str, int]], *, newest: bool = False) -> dict[str, Waiting]:
    found: dict[str, tuple[int, int]] = {}
    for key, at in pairs:
        count, oldest = found.get(key, (0, at))
        found[key] = (count + 1, max(oldest, at) if newest else min(oldest, at))
    return {key: Waiting(count, at) for key, (count, at) in found.items()}


def count(ledger: Ledger, outbox: Outbox) -> Backlog:
    """Unsent announcements per scope, deletions per profile, claims per owner (latest end)."""
    waiting = list(unsent(ledger))
    claimed = (
        (e.claimed_by, e.claimed_until)
        for e in waiting
        if e.claimed_by is not None and e.claimed_until is not None
    )
    return Backlog(
        unsent=_grouped((e.profile_id, e.started_at) for e in waiting),
        deleted=_grouped((view.profile, view.through) for view in outbox.values()),
        claims=_grouped(claimed, newest=True),
    )
