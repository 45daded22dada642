"""A publishing pass's read and write, from the aggregates' own rules.

The SQL store states the same as one SELECT and one batch of statements (`relay.store.sql.passes`).
"""

from __future__ import annotations

from relay.store.backend import RunSync, ViewReading
from relay.store.records import RunState
from relay.store.rules import ledger, outbox, presence, revisions
from relay.store.rules import runs as run_rules


def read(
    owner: str,
    now_ms: int,
    started: ledger.Ledger,
    deleted: outbox.Outbox,
    claims: outbox.Claims,
    leases: presence.Leases,
) -> ViewReading:
    """The work-related parts of a pass's view (registration and identities are the caller's)."""
    return ViewReading(
        active=presence.active_profiles(leases, now_ms),
        deleted=outbox.any_claimable(deleted, claims, owner, now_ms),
        unsent=ledger.with_claimable(started, owner, now_ms),
        tracked=set(started),
    )


def write(
    runs: run_rules.Runs, forgotten: run_rules.Forgotten, floor: int, sync: RunSync
) -> tuple[list[RunState], int] | None:
    """`sync` then one revision per owned row: (the rows, the new floor). None when the revisions
    would pass 2^53-1: then neither `runs` nor `forgotten` is changed."""
    new_runs, new_forgotten = dict(runs), dict(forgotten)
    rows = run_rules.sync(new_runs, new_forgotten, sync)
    last = revisions.allocate(floor, len(rows), sync.now_ms) if rows else floor
    if last is None:
        return None
    runs.clear()
    runs.update(new_runs)
    forgotten.clear()
    forgotten.update(new_forgotten)
    return rows, last
