"""Presence leases' rules: one lease per browser tab, fenced by its sequence number."""

from __future__ import annotations

from collections.abc import Iterable

from relay.store.backend import PresenceUpdate
from relay.store.records import PresenceLease

Leases = dict[tuple[str, str], PresenceLease]  # by (profile, tab_id)


def apply(leases: Leases, update: PresenceUpdate) -> bool:
    """True if stored. The fenced entries are forgotten even when the update is then refused."""
    new, key = update.lease, (update.lease.profile, update.lease.tab_id)
    fenced = [k for k, v in leases.items() if v.expires_at + update.fence_ms <= new.updated_at]
    for old in fenced:
        del leases[old]
    stored = leases.get(key)
    if stored is not None and stored.seq >= new.seq:
        return False
    leases[key] = new
    excess = len(leases) - update.max_tabs
    if excess > 0:
        others = sorted((k for k in leases if k != key), key=lambda k: (leases[k].updated_at, k))
        for evicted in others[:excess]:
            del leases[evicted]
    return True


def active_profiles(leases: Leases, now_ms: int) -> set[str]:
    """The profiles some tab of which holds an active, unexpired lease."""
    return {v.profile for v in leases.values() if v.active and v.expires_at > now_ms}


def newest_first(leases: Leases) -> list[PresenceLease]:
    return sorted(leases.values(), key=lambda v: (-v.updated_at, v.profile, v.tab_id))


def merge(leases: Leases, incoming: Iterable[PresenceLease]) -> None:
    """A lease takes the higher sequence."""
    for lease in incoming:
        key = (lease.profile, lease.tab_id)
        if key not in leases or leases[key].seq < lease.seq:
            leases[key] = lease
