"""The started ledger's rules: per relay scope, a floor and the sessions seen starting."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from relay.protocol import STARTED_WINDOW_MS
from relay.store.backend import StartedClaim
from relay.store.records import StartedEntry, StartedScope

Ledger = dict[str, StartedScope]  # by profile_id


def oldest_first(entries: Iterable[StartedEntry]) -> tuple[StartedEntry, ...]:
    return tuple(sorted(entries, key=lambda e: (e.started_at, e.session_id)))


def track(ledger: Ledger, profile_ids: Iterable[str], now_ms: int) -> None:
    """A scope without a ledger gets a floor of now: earlier sessions are never announced."""
    for profile_id in profile_ids:
        ledger.setdefault(profile_id, StartedScope(profile_id, now_ms))


def record(ledger: Ledger, profile_id: str, seen: dict[str, int], now_ms: int) -> None:
    """Drop entries older than max(floor, now - 24 h); add the unseen sessions not older."""
    scope = ledger.get(profile_id) or StartedScope(profile_id, now_ms)
    cutoff = max(scope.floor, now_ms - STARTED_WINDOW_MS)
    kept = {e.session_id: e for e in scope.entries if e.started_at >= cutoff}
    for session_id, started_at in seen.items():
        if started_at >= cutoff:
            kept.setdefault(session_id, StartedEntry(profile_id, session_id, started_at))
    ledger[profile_id] = replace(scope, entries=oldest_first(kept.values()))


def claimable(entry: StartedEntry, owner: str, now_ms: int) -> bool:
    """Unsent, and free, expired or the owner's own: what a claim by `owner` takes."""
    expired = entry.claimed_until is None or entry.claimed_until <= now_ms
    return not entry.sent and (entry.claimed_by in (None, owner) or expired)


def with_claimable(ledger: Ledger, owner: str, now_ms: int) -> set[str]:
    """The scopes holding an entry a claim by `owner` would take now."""
    return {
        profile_id
        for profile_id, scope in ledger.items()
        if any(claimable(e, owner, now_ms) for e in scope.entries)
    }


def advance(ledger: Ledger, request: StartedClaim) -> list[StartedEntry]:
    """`StartedClaim`: a sent entry is no longer claimed; a claim takes `claimable` entries."""
    sent, claim = set(request.sent), request.claim
    marked = {
        (profile_id, e.session_id): replace(e, sent=True, claimed_by=None, claimed_until=None)
        for profile_id in {profile_id for profile_id, _ in sent} & ledger.keys()
        for e in ledger[profile_id].entries
        if (profile_id, e.session_id) in sent
    }
    _put(ledger, marked)
    free = [
        e
        for profile_id in request.scopes
        if (scope := ledger.get(profile_id)) is not None
        for e in scope.entries
        if claimable(e, claim.owner, claim.now_ms)
    ][: claim.limit]
    claimed = [replace(e, claimed_by=claim.owner, claimed_until=claim.until) for e in free]
    _put(ledger, {(e.profile_id, e.session_id): e for e in claimed})
    return claimed


def _put(ledger: Ledger, changed: dict[tuple[str, str], StartedEntry]) -> None:
    """Each changed entry, by (scope, session), in place of its scope's entry."""
    for profile_id in {profile_id for profile_id, _ in changed}:
        scope = ledger[profile_id]
        entries = tuple(changed.get((profile_id, e.session_id), e) for e in scope.entries)
        ledger[profile_id] = replace(scope, entries=entries)


def unsent(ledger: Ledger) -> Iterator[StartedEntry]:
    return (e for scope in ledger.values() for e in scope.entries if not e.sent)


def merge(ledger: Ledger, incoming: Iterable[StartedScope]) -> None:
    """A scope keeps the lower floor; an entry stays sent once either side sent it.

    Claims are not copied: the other store's claimers do not work here.
    """
    for scope in incoming:
        mine = ledger.get(scope.profile_id)
        floor = scope.floor if mine is None else min(mine.floor, scope.floor)
        entries = {e.session_id: e for e in (mine.entries if mine else ())}
        for entry in scope.entries:
            kept = entries.get(entry.session_id)
            if kept is None:
                entries[entry.session_id] = replace(entry, claimed_by=None, claimed_until=None)
            elif entry.sent and not kept.sent:
                entries[entry.session_id] = replace(kept, sent=True)
        ledger[scope.profile_id] = StartedScope(
            scope.profile_id, floor, oldest_first(entries.values())
        )
