"""`MemoryStore`: relay state in this process's memory (`memory://`), for tests and trials.

Each `open_store("memory://")` opens a new, empty store: no other open, process or restart sees
it, and `close()` discards it. Every hook runs from start to end without awaiting, under one lock,
so each method is atomic for coroutines and threads alike. The rules are the rulebook's
(`relay.store.rules`), shared with the JSON store.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from relay.errors import InvalidInputError, StaleConfigError, StoreError
from relay.store.gate import StoreGate
from relay.store.keys.gate import Rekeyed
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
from relay.store.rules import ledger, outbox, passes, presence, revisions
from relay.store.rules import runs as run_rules
from relay.store.url import MEMORY


@dataclass(slots=True)
class _State:
    """Everything a store holds; records are frozen, so they are shared, never copied."""

    config: RelayConfig | None = None
    # The generation of the last save; 0 while none was saved, as `expected_generation` reads it.
    generation: int = 0
    keys: dict[str, str] = field(default_factory=dict)
    identities: dict[str, str] = field(default_factory=dict)
    floor: int = 0
    started: ledger.Ledger = field(default_factory=dict)
    deleted: outbox.Outbox = field(default_factory=dict)
    presence: presence.Leases = field(default_factory=dict)
    runs: run_rules.Runs = field(default_factory=dict)
    forgotten: run_rules.Forgotten = field(default_factory=dict)
    claims: outbox.Claims = field(default_factory=dict)  # deletions being delivered


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
            last = revisions.allocate(s.floor, count, now_ms)
            s.floor = s.floor if last is None else last
            return last

    async def _revision_floor(self) -> int:
        with self._locked() as s:
            return s.floor

    # ── started ledger ────────────────────────────────────────────────────────

    async def _track_started(self, profile_ids: list[str], now_ms: int) -> None:
        with self._locked() as s:
            ledger.track(s.started, profile_ids, now_ms)

    async def _record_started(self, profile_id: str, seen: dict[str, int], now_ms: int) -> None:
        with self._locked() as s:
            ledger.record(s.started, profile_id, seen, now_ms)

    async def _claim_started(
        self, profile_id: str, owner: str, now_ms: int, until: int, limit: int | None
    ) -> list[StartedEntry]:
        with self._locked() as s:
            return ledger.claim(s.started, profile_id, owner, now_ms, until, limit)

    async def _mark_started_sent(self, profile_id: str, session_ids: list[str]) -> None:
        with self._locked() as s:
            ledger.mark_sent(s.started, profile_id, session_ids)

    async def _record_started_scopes(self, seen: dict[str, dict[str, int]], now_ms: int) -> None:
        with self._locked() as s:
            for profile_id, sightings in seen.items():
                ledger.record(s.started, profile_id, sightings, now_ms)

    async def _claim_started_scopes(
        self,
        profile_ids: list[str],
        owner: str,
        now_ms: int,
        until: int,
        limit: int | None,
        sent: list[tuple[str, str]],
    ) -> list[StartedEntry]:
        with self._locked() as s:
            return ledger.advance(s.started, profile_ids, owner, now_ms, until, limit, sent)

    async def _started_ledger(self) -> list[StartedScope]:
        with self._locked() as s:
            return ledger.scopes(s.started)

    # ── deleted-session outbox ────────────────────────────────────────────────

    async def _enqueue_deleted(self, new: DeletedView, session_live: bool) -> DeletedView:
        with self._locked() as s:
            return outbox.enqueue(s.deleted, new, session_live)

    async def _bind_deleted(self, profile: str, identity: str, scope: DeletedScope) -> int:
        with self._locked() as s:
            return outbox.bind(s.deleted, profile, identity, scope)

    async def _pending_deleted(self) -> list[DeletedView]:
        with self._locked() as s:
            return outbox.pending(s.deleted)

    async def _claim_deleted(
        self, owner: str, now_ms: int, until: int, limit: int | None
    ) -> list[DeletedView]:
        with self._locked() as s:
            return outbox.claim(s.deleted, s.claims, owner, now_ms, until, limit)

    async def _ack_deleted(self, view_id: str, through: int) -> bool:
        with self._locked() as s:
            return outbox.ack(s.deleted, view_id, through)

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
            unsent = ledger.unsent(s.started)
            claims = outbox.held(s.deleted, s.claims)
            return run_rules.next_lease_end(owner, now_ms, s.runs, unsent, claims)

    async def _release_runs(self, owner: str) -> None:
        with self._locked() as s:
            run_rules.release(s.runs, owner)

    async def _run_states(self) -> list[RunState]:
        with self._locked() as s:
            return [s.runs[sid] for sid in sorted(s.runs)]

    # ── publishing passes ─────────────────────────────────────────────────────

    async def _pass_view(
        self, owner: str, profiles: list[str], scopes: list[str], now_ms: int
    ) -> passes.Reading:
        with self._locked() as s:
            reading = passes.read(owner, now_ms, s.started, s.deleted, s.claims, s.presence)
            reading.generation = None if s.config is None else s.config.generation
            reading.identities = dict(s.identities)
            return reading

    async def _pass_write(
        self,
        owner: str,
        live: list[RunState],
        now_ms: int,
        until: int,
        cutoff: int,
        forget_before: int,
    ) -> tuple[list[RunState], int] | None:
        with self._locked() as s:
            written = passes.write(
                s.runs, s.forgotten, s.floor, owner, live, now_ms, until, cutoff, forget_before
            )
            if written is not None:
                s.floor = written[1]
            return written

    # ── presence leases ───────────────────────────────────────────────────────

    async def _apply_presence(self, lease: PresenceLease, fence_ms: int, max_tabs: int) -> bool:
        with self._locked() as s:
            return presence.apply(s.presence, lease, fence_ms, max_tabs)

    async def _presence_active(self, profile: str, now_ms: int) -> bool:
        with self._locked() as s:
            return presence.active(s.presence, profile, now_ms)

    async def _presence_leases(self) -> list[PresenceLease]:
        with self._locked() as s:
            return presence.newest_first(s.presence)

    # ── copying between stores ────────────────────────────────────────────────

    async def _merge_state(self, batch: StateBatch) -> None:
        with self._locked() as s:
            for profile, identity in batch.identities.items():
                s.identities.setdefault(profile, identity)
            s.floor = max(s.floor, batch.revision_floor)
            ledger.merge(s.started, batch.started)
            outbox.merge(s.deleted, batch.deleted)
            presence.merge(s.presence, batch.presence)
