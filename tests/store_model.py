"""The store contract as plain Python: what each operation of `RelayStore` must answer.

A model of the aggregates a property test drives (revisions, identities, the started ledger, the
deleted outbox, presence), written from the docstrings of `relay/store/contract.py` and no store's
code. Minted values (identities, outbox ids) are the store's to choose: the model learns them from
its answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from relay.protocol import STARTED_WINDOW_MS
from relay.store import DeletedScope, DeletedView, PresenceLease, StartedEntry, StartedScope
from relay.store.records import PassView


@dataclass
class Model:
    floor: int = 0
    identities: dict[str, str] = field(default_factory=dict)
    forgotten: dict[str, set[str]] = field(default_factory=dict)  # profile -> its old identities
    scopes: dict[str, int] = field(default_factory=dict)  # profile_id -> floor
    entries: dict[str, dict[str, StartedEntry]] = field(default_factory=dict)
    views: dict[tuple[str, str], DeletedView] = field(default_factory=dict)  # (session, profile)
    claims: dict[str, tuple[str, int]] = field(default_factory=dict)  # view id -> (owner, until)
    leases: dict[tuple[str, str], PresenceLease] = field(default_factory=dict)

    # ── revisions ──

    def allocate(self, count: int, now_ms: int) -> list[int]:
        if count == 0:
            return []
        first = max(self.floor + 1, now_ms)
        self.floor = first + count - 1
        return list(range(first, self.floor + 1))

    # ── the started ledger ──

    def track(self, profile_ids: list[str], now_ms: int) -> None:
        for profile_id in profile_ids:
            self.scopes.setdefault(profile_id, now_ms)

    def record(self, profile_id: str, seen: list[tuple[str, int]], now_ms: int) -> None:
        floor = self.scopes.setdefault(profile_id, now_ms)
        cutoff = max(floor, now_ms - STARTED_WINDOW_MS)
        kept = {s: e for s, e in self.entries.get(profile_id, {}).items() if e.started_at >= cutoff}
        # The first sighting of a session wins, before the cutoff is applied.
        first: dict[str, int] = {}
        for session_id, started_at in seen:
            first.setdefault(session_id, started_at)
        for session_id, started_at in first.items():
            if started_at >= cutoff and session_id not in kept:
                kept[session_id] = StartedEntry(profile_id, session_id, started_at)
        self.entries[profile_id] = kept

    def claim_started(
        self, profile_id: str, owner: str, now_ms: int, lease_ms: int, limit: int | None
    ) -> list[StartedEntry]:
        entries = self.entries.get(profile_id, {})
        free = [
            e
            for e in oldest_first(entries.values())
            if not e.sent
            and (e.claimed_until is None or e.claimed_until <= now_ms or e.claimed_by == owner)
        ][:limit]
        claimed = [replace(e, claimed_by=owner, claimed_until=now_ms + lease_ms) for e in free]
        entries.update((e.session_id, e) for e in claimed)
        return claimed

    def mark_sent(self, profile_id: str, session_ids: list[str]) -> None:
        entries = self.entries.get(profile_id, {})
        for session_id in session_ids:
            if session_id in entries:
                entries[session_id] = replace(
                    entries[session_id], sent=True, claimed_by=None, claimed_until=None
                )

    def record_scopes(self, seen: dict[str, list[tuple[str, int]]], now_ms: int) -> None:
        for profile_id, sightings in seen.items():
            self.record(profile_id, sightings, now_ms)

    def claim_scopes(
        self,
        profile_ids: list[str],
        owner: str,
        now_ms: int,
        lease_ms: int,
        limit: int | None,
        sent: list[tuple[str, str]],
    ) -> list[StartedEntry]:
        """Mark `sent`, then claim scope by scope in the order listed (each once)."""
        for profile_id, session_id in sent:
            self.mark_sent(profile_id, [session_id])
        claimed: list[StartedEntry] = []
        for profile_id in dict.fromkeys(profile_ids):
            left = None if limit is None else limit - len(claimed)
            if left == 0:
                break
            claimed += self.claim_started(profile_id, owner, now_ms, lease_ms, left)
        return claimed

    def ledger(self) -> list[StartedScope]:
        return [
            StartedScope(p, floor, tuple(oldest_first(self.entries.get(p, {}).values())))
            for p, floor in sorted(self.scopes.items())
        ]

    # ── the deleted outbox ──

    def enqueue(
        self,
        answer: DeletedView,
        now_ms: int,
        *,
        session_live: bool,
        identity: str | None,
        scope: DeletedScope | None,
    ) -> DeletedView:
        """What `enqueue_deleted` must have answered; a new entry takes the id it was given."""
        key = (answer.session_id, answer.profile)
        kept = self.views.get(key)
        if kept is None:
            kept = DeletedView(answer.id, key[0], key[1], now_ms, identity, scope)
        elif session_live and now_ms > kept.through:
            kept = replace(kept, through=now_ms)
        self.views[key] = kept
        return kept

    def bind(self, profile: str, identity: str, scope: DeletedScope) -> int:
        bound = 0
        for key, view in self.views.items():
            if view.profile == profile and view.scope is None and view.identity in (None, identity):
                self.views[key] = replace(view, identity=identity, scope=scope)
                bound += 1
        return bound

    def pending(self) -> list[DeletedView]:
        return sorted(self.views.values(), key=lambda v: (v.through, v.id))

    def claim_deleted(
        self, owner: str, now_ms: int, lease_ms: int, limit: int | None
    ) -> list[DeletedView]:
        def free(view: DeletedView) -> bool:
            holder, until = self.claims.get(view.id, (owner, 0))
            return holder == owner or until <= now_ms

        claimed = [view for view in self.pending() if free(view)][:limit]
        self.claims.update((view.id, (owner, now_ms + lease_ms)) for view in claimed)
        return claimed

    def ack(self, view_id: str, through: int) -> bool:
        for key, view in self.views.items():
            if (view.id, view.through) == (view_id, through):
                del self.views[key]
                self.claims.pop(view_id, None)
                return True
        return False

    # ── presence ──

    def apply(
        self,
        lease: PresenceLease,
        *,
        fence_ms: int,
        max_tabs: int,
    ) -> bool:
        now_ms = lease.updated_at
        self.leases = {k: v for k, v in self.leases.items() if v.expires_at + fence_ms > now_ms}
        key = (lease.profile, lease.tab_id)
        stored = self.leases.get(key)
        if stored is not None and stored.seq >= lease.seq:
            return False
        self.leases[key] = lease
        while len(self.leases) > max_tabs:
            others = [k for k in self.leases if k != key]
            del self.leases[min(others, key=lambda k: (self.leases[k].updated_at, k))]
        return True

    def active(self, profile: str, now_ms: int) -> bool:
        return any(
            v.profile == profile and v.active and v.expires_at > now_ms
            for v in self.leases.values()
        )

    def presence(self) -> list[PresenceLease]:
        return sorted(self.leases.values(), key=lambda v: (-v.updated_at, v.profile, v.tab_id))

    # ── a publishing pass's view (of stores with no registration) ──

    def view(self, owner: str, profiles: list[str], scopes: list[str], now_ms: int) -> PassView:
        """What `pass_view` must answer: what a claim by `owner` would take, and the rest."""

        def claimable(entry: StartedEntry) -> bool:
            free = entry.claimed_until is None or entry.claimed_until <= now_ms
            return not entry.sent and (free or entry.claimed_by == owner)

        def deletable(view: DeletedView) -> bool:
            holder, until = self.claims.get(view.id, (owner, 0))
            return holder == owner or until <= now_ms

        return PassView(
            None,
            {p: self.identities.get(p) for p in profiles},
            {p: self.active(p, now_ms) for p in profiles},
            any(deletable(view) for view in self.views.values()),
            frozenset(
                s for s in scopes if any(claimable(e) for e in self.entries.get(s, {}).values())
            ),
            frozenset(s for s in scopes if s not in self.scopes),
        )


def oldest_first(entries: Iterable[StartedEntry]) -> list[StartedEntry]:
    return sorted(entries, key=lambda e: (e.started_at, e.session_id))
