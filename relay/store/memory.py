"""`MemoryStore`: relay state in this process's memory (`memory://`), for tests and trials.

Each `open_store("memory://")` opens a new, empty store: no other open, process or restart sees
it, and `close()` discards it. Every hook runs from start to end without awaiting, under one lock,
so each method is atomic for coroutines and threads alike. The rules are the SQL backends' own,
down to the order of what comes back and what a refused call still changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from relay.errors import InvalidInputError, StaleConfigError, StoreError
from relay.protocol import MAX_SAFE_INTEGER, STARTED_WINDOW_MS
from relay.store import run_rules
from relay.store.gate import StoreGate
from relay.store.key_gate import Rekeyed
from relay.store.records import (
    DeletedScope,
    DeletedView,
    PresenceLease,
    RelayConfig,
    RunState,
    StartedEntry,
    StartedScope,
    StateBatch,
)
from relay.store.url import MEMORY


def _oldest_first(entries: dict[str, StartedEntry]) -> list[StartedEntry]:
    return sorted(entries.values(), key=lambda e: (e.started_at, e.session_id))


@dataclass(slots=True)
class _Scope:
    """One relay scope's ledger: its floor and its entries by session id."""

    floor: int
    entries: dict[str, StartedEntry] = field(default_factory=dict)


@dataclass(slots=True)
class _State:
    """Everything a store holds; records are frozen, so they are shared, never copied."""

    config: RelayConfig | None = None
    # The generation of the last save; 0 while none was saved, as `expected_generation` reads it.
    generation: int = 0
    keys: dict[str, str] = field(default_factory=dict)
    identities: dict[str, str] = field(default_factory=dict)
    floor: int = 0
    started: dict[str, _Scope] = field(default_factory=dict)
    deleted: dict[tuple[str, str], DeletedView] = field(default_factory=dict)
    presence: dict[tuple[str, str], PresenceLease] = field(default_factory=dict)
    runs: run_rules.Runs = field(default_factory=dict)
    forgotten: run_rules.Forgotten = field(default_factory=dict)
    # Deletions being delivered: view id -> (owner, until).
    claims: dict[str, tuple[str, int]] = field(default_factory=dict)


class MemoryStore(StoreGate):
    """Relay state in a few dicts, private to this object; `open_store("memory://")` makes one."""

    backend = "memory"

    def __init__(self) -> None:
        self._state: _State | None = _State()
        # asyncio needs no lock (no hook awaits); this keeps threads sharing a store apart.
        self._lock = threading.Lock()

    @property
    def display_url(self) -> str:
        return MEMORY

    async def close(self) -> None:
        """Discard the state; the store refuses every call from now on, as a closed SQL one."""
        with self._lock:
            self._state = None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[_State]:
        with self._lock:
            if self._state is None:
                raise StoreError(f"the store {MEMORY} is closed")
            yield self._state

    # ── registration and key ──────────────────────────────────────────────────

    async def _load_config(self) -> RelayConfig | None:
        with self._locked() as s:
            return s.config

    async def _save_config(self, config: RelayConfig, expected_generation: int | None) -> None:
        with self._locked() as s:
            if config.key_ref not in s.keys:
                raise InvalidInputError(f"publisher key {config.key_ref!r} is not saved")
            if expected_generation is not None and s.generation != expected_generation:
                raise StaleConfigError("the relay registration changed since it was read")
            s.generation += 1
            s.config = replace(config, generation=s.generation)

    async def _save_key(self, key_id: str, pem: str) -> str:
        # As on SQL: one reference per key id, so saving a key id again replaces its key.
        ref = hashlib.sha256(key_id.encode()).hexdigest()[:16]
        with self._locked() as s:
            s.keys[ref] = pem
        return ref

    async def _load_key(self, ref: str) -> str | None:
        with self._locked() as s:
            return s.keys.get(ref)

    async def _rekey(self, rekeyed: Rekeyed) -> int:
        with self._locked() as s:
            # Every key is rekeyed before any is stored: one that raises changes none.
            changed = {ref: rekeyed(ref, pem) for ref, pem in s.keys.items()}
            s.keys.update(changed)
            return len(changed)

    async def _delete_key(self, ref: str) -> bool:
        with self._locked() as s:
            if ref not in s.keys or (s.config is not None and s.config.key_ref == ref):
                return False
            del s.keys[ref]
            return True

    async def _profile_identity(self, profile: str) -> str | None:
        with self._locked() as s:
            return s.identities.get(profile)

    async def _mint_identity(self, profile: str, minted: str) -> str:
        with self._locked() as s:
            return s.identities.setdefault(profile, minted)

    async def _forget_identity(self, profile: str) -> None:
        with self._locked() as s:
            s.identities.pop(profile, None)

    async def _identities(self) -> dict[str, str]:
        with self._locked() as s:
            return dict(s.identities)

    # ── revisions ─────────────────────────────────────────────────────────────

    async def _allocate_revisions(self, count: int, now_ms: int) -> int | None:
        with self._locked() as s:
            last = max(s.floor + 1, now_ms) + count - 1
            # Past 2^53-1 a revision is no longer exact on the wire: hand out none.
            if last > MAX_SAFE_INTEGER:
                return None
            s.floor = last
            return last

    async def _revision_floor(self) -> int:
        with self._locked() as s:
            return s.floor

    # ── started ledger ────────────────────────────────────────────────────────

    async def _track_started(self, profile_ids: list[str], now_ms: int) -> None:
        with self._locked() as s:
            for profile_id in profile_ids:
                s.started.setdefault(profile_id, _Scope(now_ms))

    async def _record_started(self, profile_id: str, seen: dict[str, int], now_ms: int) -> None:
        with self._locked() as s:
            scope = s.started.setdefault(profile_id, _Scope(now_ms))
            cutoff = max(scope.floor, now_ms - STARTED_WINDOW_MS)
            scope.entries = {k: e for k, e in scope.entries.items() if e.started_at >= cutoff}
            for session_id, started_at in seen.items():
                if started_at >= cutoff and session_id not in scope.entries:
                    scope.entries[session_id] = StartedEntry(profile_id, session_id, started_at)

    async def _claim_started(
        self, profile_id: str, owner: str, now_ms: int, until: int, limit: int | None
    ) -> list[StartedEntry]:
        with self._locked() as s:
            scope = s.started.get(profile_id)
            if scope is None:
                return []
            claimable = [
                e
                for e in _oldest_first(scope.entries)
                if not e.sent
                and (e.claimed_until is None or e.claimed_until <= now_ms or e.claimed_by == owner)
            ]
            claims = [replace(e, claimed_by=owner, claimed_until=until) for e in claimable[:limit]]
            for claim in claims:
                scope.entries[claim.session_id] = claim
            return claims

    async def _mark_started_sent(self, profile_id: str, session_ids: list[str]) -> None:
        with self._locked() as s:
            if (scope := s.started.get(profile_id)) is None:
                return
            for session_id in session_ids:
                if (entry := scope.entries.get(session_id)) is not None:
                    scope.entries[session_id] = replace(
                        entry, sent=True, claimed_by=None, claimed_until=None
                    )

    async def _started_ledger(self) -> list[StartedScope]:
        with self._locked() as s:
            return [
                StartedScope(p, scope.floor, tuple(_oldest_first(scope.entries)))
                for p, scope in sorted(s.started.items())
            ]

    # ── deleted-session outbox ────────────────────────────────────────────────

    async def _enqueue_deleted(self, new: DeletedView, session_live: bool) -> DeletedView:
        key = (new.session_id, new.profile)
        with self._locked() as s:
            queued = s.deleted.setdefault(key, new)
            # A session that still has data pushes `through` on, to cover newer runs.
            if session_live and new.through > queued.through:
                queued = s.deleted[key] = replace(queued, through=new.through)
            return queued

    async def _bind_deleted(self, profile: str, identity: str, scope: DeletedScope) -> int:
        with self._locked() as s:
            unbound = [
                key
                for key, view in s.deleted.items()
                if view.profile == profile
                and view.scope is None
                and view.identity in (None, identity)
            ]
            for key in unbound:
                s.deleted[key] = replace(s.deleted[key], identity=identity, scope=scope)
            return len(unbound)

    async def _pending_deleted(self) -> list[DeletedView]:
        with self._locked() as s:
            return sorted(s.deleted.values(), key=lambda v: (v.through, v.id))

    async def _claim_deleted(
        self, owner: str, now_ms: int, until: int, limit: int | None
    ) -> list[DeletedView]:
        with self._locked() as s:
            free = [
                view
                for view in sorted(s.deleted.values(), key=lambda v: (v.through, v.id))
                if (held := s.claims.get(view.id)) is None or held[0] == owner or held[1] <= now_ms
            ][:limit]
            s.claims.update((view.id, (owner, until)) for view in free)
            return free

    async def _ack_deleted(self, view_id: str, through: int) -> bool:
        with self._locked() as s:
            for key, view in s.deleted.items():
                if (view.id, view.through) == (view_id, through):
                    del s.deleted[key]
                    s.claims.pop(view_id, None)
                    return True
            return False

    # ── run state ─────────────────────────────────────────────────────────────

    async def _save_run(self, run: RunState, until: int) -> bool:
        with self._locked() as s:
            return run_rules.save(s.runs, s.forgotten, run, until)

    async def _sync_runs(
        self,
        owner: str,
        live: list[RunState],
        now_ms: int,
        until: int,
        cutoff: int,
        forget_before: int,
    ) -> list[RunState]:
        with self._locked() as s:
            return run_rules.sync(
                s.runs, s.forgotten, owner, live, now_ms, until, cutoff, forget_before
            )

    async def _keep_alive(self, owner: str, now_ms: int, until: int) -> int | None:
        with self._locked() as s:
            run_rules.renew(s.runs, owner, until)
            started = (e for scope in s.started.values() for e in scope.entries.values())
            return run_rules.next_lease_end(owner, now_ms, s.runs, started, s.claims.values())

    async def _release_runs(self, owner: str) -> None:
        with self._locked() as s:
            run_rules.release(s.runs, owner)

    async def _run_states(self) -> list[RunState]:
        with self._locked() as s:
            return [s.runs[sid] for sid in sorted(s.runs)]

    # ── presence leases ───────────────────────────────────────────────────────

    async def _apply_presence(self, lease: PresenceLease, fence_ms: int, max_tabs: int) -> bool:
        key = (lease.profile, lease.tab_id)
        with self._locked() as s:
            # Forgotten even when the update below is refused, as the SQL transaction commits.
            s.presence = {
                k: v for k, v in s.presence.items() if v.expires_at + fence_ms > lease.updated_at
            }
            stored = s.presence.get(key)
            # The sequence fence: a stale or replayed update changes nothing.
            if stored is not None and stored.seq >= lease.seq:
                return False
            s.presence[key] = lease
            excess = len(s.presence) - max_tabs
            if excess > 0:
                others = sorted(
                    (k for k in s.presence if k != key), key=lambda k: (s.presence[k].updated_at, k)
                )
                for evicted in others[:excess]:
                    del s.presence[evicted]
            return True

    async def _presence_active(self, profile: str, now_ms: int) -> bool:
        with self._locked() as s:
            return any(
                v.profile == profile and v.active and v.expires_at > now_ms
                for v in s.presence.values()
            )

    async def _presence_leases(self) -> list[PresenceLease]:
        with self._locked() as s:
            return sorted(s.presence.values(), key=lambda v: (-v.updated_at, v.profile, v.tab_id))

    # ── copying between stores ────────────────────────────────────────────────

    async def _merge_state(self, batch: StateBatch) -> None:
        with self._locked() as s:
            for profile, identity in batch.identities.items():
                s.identities.setdefault(profile, identity)
            s.floor = max(s.floor, batch.revision_floor)
            for incoming in batch.started:
                _merge_scope(s, incoming)
            for view in batch.deleted:
                _merge_view(s, view)
            for lease in batch.presence:
                key = (lease.profile, lease.tab_id)
                if key not in s.presence or s.presence[key].seq < lease.seq:
                    s.presence[key] = lease


def _merge_scope(s: _State, incoming: StartedScope) -> None:
    """A scope keeps the lower floor; an entry stays sent once either side sent it."""
    scope = s.started.get(incoming.profile_id)
    if scope is None:
        scope = s.started[incoming.profile_id] = _Scope(incoming.floor)
    scope.floor = min(scope.floor, incoming.floor)
    for entry in incoming.entries:
        kept = scope.entries.get(entry.session_id)
        if kept is None:
            # Claims are not copied: the other store's claimers do not work here.
            scope.entries[entry.session_id] = replace(entry, claimed_by=None, claimed_until=None)
        elif entry.sent and not kept.sent:
            scope.entries[entry.session_id] = replace(kept, sent=True)


def _merge_view(s: _State, view: DeletedView) -> None:
    """A queued deletion keeps its id, the later `through` and whichever binding it has."""
    key = (view.session_id, view.profile)
    kept = s.deleted.get(key)
    if kept is None:
        s.deleted[key] = view
        return
    kept = replace(kept, through=max(kept.through, view.through))
    if kept.scope is None and view.scope is not None:
        kept = replace(kept, identity=view.identity, scope=view.scope)
    s.deleted[key] = kept
