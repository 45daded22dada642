"""`FileStore`: relay state as JSON files in the legacy layout of the Python original.

An existing state dir keeps working: `talaria-relay.json`, `talaria-relay-publisher-<hash>.pem`,
`talaria-relay-revision` and `talaria-relay-started.json` are read and written as it wrote them.
What it kept in memory (deleted outbox, presence leases) gets files beside them. Every method is one
read-modify-write under the sidecar lock `.talaria-relay.lock`, run in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from relay.errors import CorruptStateError, InvalidInputError, StaleConfigError, StoreError
from relay.protocol import MAX_SAFE_INTEGER, STARTED_WINDOW_MS
from relay.store.files.documents import (
    _DELETED,
    _IDENTITIES,
    _PRESENCE,
    _PROFILE_ID,
    _REVISION,
    _STARTED,
    CONFIG,
    PROFILE_ID,
    Leases,
    Ledger,
    _dump_config,
    _merge_deleted,
    _merge_presence,
    _merge_started,
    _oldest_first,
    _parse_config,
)
from relay.store.files.io import _fsync_dir, _read, _write
from relay.store.files.keys import KeyFiles
from relay.store.files.runs import RunFiles
from relay.store.gate import StoreGate
from relay.store.records import (
    DeletedScope,
    DeletedView,
    PresenceLease,
    RelayConfig,
    StartedEntry,
    StartedScope,
    StateBatch,
)

D = TypeVar("D")
R = TypeVar("R")
ProfileHome = Callable[[str], Path]


class FileStore(KeyFiles, RunFiles, StoreGate):
    """Relay state in one directory (`json:///state-dir`), safe across threads and processes."""

    backend = "json"

    def __init__(self, state_dir: Path, profile_home: ProfileHome | None = None) -> None:
        self._dir = Path(state_dir).absolute()
        self._profile_home = profile_home
        # flock excludes other processes; this keeps this process's threads out of each other's way.
        self._mutex = threading.Lock()

    @classmethod
    async def open(cls, state_dir: Path, *, profile_home: ProfileHome | None = None) -> FileStore:
        """The store of `state_dir`, created (0700) when missing, without killed writers' temps."""
        store = cls(state_dir, profile_home)
        await store._call(store._create_dir)
        await store._call(store._sweep)
        return store

    @property
    def display_url(self) -> str:
        return f"json://{self._dir}"

    async def close(self) -> None:
        """Nothing to release: every method opens and closes its own files."""

    # ── registration and key ──────────────────────────────────────────────────

    async def _load_config(self) -> RelayConfig | None:
        def work() -> RelayConfig | None:
            path = self._dir / CONFIG
            with self._locked(exclusive=False):
                raw = _read(path)
                try:
                    return None if raw is None else _parse_config(raw, path.stat().st_mtime_ns)
                except CorruptStateError as error:
                    raise CorruptStateError(f"{path}: {error}") from None

        return await self._call(work)

    async def _save_config(self, config: RelayConfig, expected_generation: int | None) -> None:
        def work() -> None:
            path = self._dir / CONFIG
            with self._locked(exclusive=True):
                if self._key_path(config.key_ref) is None:
                    raise InvalidInputError(f"publisher key {config.key_ref!r} is not saved")
                # `generation` is the mtime: keep it rising even when two saves share a clock tick.
                previous = path.stat().st_mtime_ns if path.exists() else 0
                if expected_generation is not None and self._shown(path) != expected_generation:
                    raise StaleConfigError("the relay registration changed since it was read")
                _write(path, _dump_config(config), max(time.time_ns(), previous + 1))

        await self._call(work)

    @staticmethod
    def _shown(path: Path) -> int:
        """The generation `load_config` shows: 0 for no registration (absent or not version 2)."""
        raw = _read(path)
        try:
            return 0 if raw is None or _parse_config(raw, 0) is None else path.stat().st_mtime_ns
        except CorruptStateError:
            return path.stat().st_mtime_ns

    # ── profile identities ────────────────────────────────────────────────────

    async def _profile_identity(self, profile: str) -> str | None:
        if self._profile_home is None:
            return (await self._load(_IDENTITIES)).get(profile)
        return await self._load(_PROFILE_ID, await self._home(profile) / PROFILE_ID)

    async def _mint_identity(self, profile: str, minted: str) -> str:
        if self._profile_home is None:

            def edit(identities: dict[str, str]) -> tuple[dict[str, str], str]:
                identities.setdefault(profile, minted)
                return identities, identities[profile]

            return await self._update(_IDENTITIES, edit)

        def mint(stored: str | None) -> tuple[str, str]:
            return stored or minted, stored or minted

        return await self._update(_PROFILE_ID, mint, await self._home(profile) / PROFILE_ID)

    async def _home(self, profile: str) -> Path:
        assert self._profile_home is not None
        home = Path(self._profile_home(profile))
        if not await asyncio.to_thread(home.is_dir):
            raise StoreError(f"the home of profile {profile!r} is unavailable")
        return home

    async def _forget_identity(self, profile: str) -> None:
        if self._profile_home is None:

            def edit(identities: dict[str, str]) -> tuple[dict[str, str], None]:
                identities.pop(profile, None)
                return identities, None

            return await self._update(_IDENTITIES, edit)
        home = Path(self._profile_home(profile))

        def work() -> None:
            with self._locked(exclusive=True), contextlib.suppress(FileNotFoundError):
                (home / PROFILE_ID).unlink()
                _fsync_dir(home)

        return await self._call(work)

    # ── revisions ─────────────────────────────────────────────────────────────

    async def _allocate_revisions(self, count: int, now_ms: int) -> int | None:
        def edit(floor: int) -> tuple[int, int | None]:
            last = max(floor + 1, now_ms) + count - 1
            # Past 2^53-1 a revision is no longer exact on the wire: hand out none.
            return (floor, None) if last > MAX_SAFE_INTEGER else (last, last)

        return await self._update(_REVISION, edit)

    async def _revision_floor(self) -> int:
        return await self._load(_REVISION)

    # ── started ledger ────────────────────────────────────────────────────────

    async def _track_started(self, scopes: list[str], now_ms: int) -> None:

        def edit(ledger: Ledger) -> tuple[Ledger, None]:
            for scope in scopes:
                ledger.setdefault(scope, StartedScope(scope, now_ms))
            return ledger, None

        await self._update(_STARTED, edit)

    async def _record_started(self, profile_id: str, seen: dict[str, int], now_ms: int) -> None:

        def edit(ledger: Ledger) -> tuple[Ledger, None]:
            scope = ledger.get(profile_id) or StartedScope(profile_id, now_ms)
            cutoff = max(scope.floor, now_ms - STARTED_WINDOW_MS)
            kept = {e.session_id: e for e in scope.entries if e.started_at >= cutoff}
            for sid, started_at in seen.items():
                if started_at >= cutoff:
                    kept.setdefault(sid, StartedEntry(profile_id, sid, started_at))
            ledger[profile_id] = replace(scope, entries=_oldest_first(kept.values()))
            return ledger, None

        await self._update(_STARTED, edit)

    async def _claim_started(
        self, profile_id: str, owner: str, now_ms: int, until: int, limit: int | None
    ) -> list[StartedEntry]:

        def claimable(entry: StartedEntry) -> bool:
            expired = entry.claimed_until is None or entry.claimed_until <= now_ms
            return not entry.sent and (entry.claimed_by in (None, owner) or expired)

        def edit(ledger: Ledger) -> tuple[Ledger, list[StartedEntry]]:
            scope = ledger.get(profile_id)
            if scope is None:
                return ledger, []
            claims = {
                e.session_id: replace(e, claimed_by=owner, claimed_until=until)
                for e in _oldest_first(filter(claimable, scope.entries))[:limit]
            }
            entries = tuple(claims.get(e.session_id, e) for e in scope.entries)
            ledger[profile_id] = replace(scope, entries=entries)
            return ledger, list(claims.values())

        return await self._update(_STARTED, edit)

    async def _mark_started_sent(self, profile_id: str, session_ids: list[str]) -> None:
        marked = set(session_ids)

        def edit(ledger: Ledger) -> tuple[Ledger, None]:
            if (scope := ledger.get(profile_id)) is not None:
                sent = (
                    replace(e, sent=True, claimed_by=None, claimed_until=None)
                    if e.session_id in marked
                    else e
                    for e in scope.entries
                )
                ledger[profile_id] = replace(scope, entries=tuple(sent))
            return ledger, None

        await self._update(_STARTED, edit)

    async def _started_ledger(self) -> list[StartedScope]:
        ledger = await self._load(_STARTED)
        return [ledger[profile_id] for profile_id in sorted(ledger)]

    # ── deleted-session outbox ────────────────────────────────────────────────

    async def _enqueue_deleted(self, new: DeletedView, session_live: bool) -> DeletedView:
        def edit(views: list[DeletedView]) -> tuple[list[DeletedView], DeletedView]:
            for index, view in enumerate(views):
                if (view.session_id, view.profile) == (new.session_id, new.profile):
                    # A session that still has data pushes `through` on, to cover newer runs.
                    if session_live and new.through > view.through:
                        views[index] = replace(view, through=new.through)
                    return views, views[index]
            return [*views, new], new

        return await self._update(_DELETED, edit)

    async def _bind_deleted(self, profile: str, identity: str, scope: DeletedScope) -> int:

        def edit(views: list[DeletedView]) -> tuple[list[DeletedView], int]:
            unbound = [
                v.profile == profile and v.scope is None and v.identity in (None, identity)
                for v in views
            ]
            views = [
                replace(v, identity=identity, scope=scope) if free else v
                for v, free in zip(views, unbound, strict=True)
            ]
            return views, sum(unbound)

        return await self._update(_DELETED, edit)

    async def _pending_deleted(self) -> list[DeletedView]:
        views = await self._load(_DELETED)
        return sorted(views, key=lambda v: (v.through, v.id))

    async def _ack_deleted(self, view_id: str, through: int) -> bool:

        def edit(views: list[DeletedView]) -> tuple[list[DeletedView], bool]:
            kept = [v for v in views if (v.id, v.through) != (view_id, through)]
            return kept, len(kept) < len(views)

        return await self._update(_DELETED, edit)

    # ── presence leases ───────────────────────────────────────────────────────

    async def _apply_presence(self, new: PresenceLease, fence_ms: int, max_tabs: int) -> bool:
        key, now_ms = (new.profile, new.tab_id), new.updated_at

        def edit(leases: Leases) -> tuple[Leases, bool]:
            leases = {k: v for k, v in leases.items() if v.expires_at + fence_ms > now_ms}
            stored = leases.get(key)
            # The sequence fence: a stale or replayed update changes nothing.
            if stored is not None and stored.seq >= new.seq:
                return leases, False
            leases[key] = new
            while len(leases) > max_tabs:
                others = (k for k in leases if k != key)
                del leases[min(others, key=lambda k: (leases[k].updated_at, k))]
            return leases, True

        return await self._update(_PRESENCE, edit)

    async def _presence_active(self, profile: str, now_ms: int) -> bool:
        leases = (await self._load(_PRESENCE)).values()
        return any(v.profile == profile and v.active and v.expires_at > now_ms for v in leases)

    async def _presence_leases(self) -> list[PresenceLease]:
        leases = (await self._load(_PRESENCE)).values()
        return sorted(leases, key=lambda v: (-v.updated_at, v.profile, v.tab_id))

    # ── copying between stores ────────────────────────────────────────────────

    async def _identities(self) -> dict[str, str]:
        if self._profile_home is None:
            return await self._load(_IDENTITIES)
        config = await self.load_config()
        found: dict[str, str] = {}
        for name in config.profiles if config else ():
            path = Path(self._profile_home(name)) / PROFILE_ID
            with contextlib.suppress(CorruptStateError, StoreError):
                if (identity := await self._load(_PROFILE_ID, path)) is not None:
                    found[name] = identity
        return found

    async def _merge_state(self, batch: StateBatch) -> None:
        for profile, identity in batch.identities.items():
            await self._merge_identity(profile, identity)
        await self._update(_REVISION, lambda floor: (max(floor, batch.revision_floor), None))
        if batch.started:
            await self._update(
                _STARTED, lambda ledger: (_merge_started(ledger, batch.started), None)
            )
        if batch.deleted:
            await self._update(_DELETED, lambda views: (_merge_deleted(views, batch.deleted), None))
        if batch.presence:
            await self._update(
                _PRESENCE, lambda leases: (_merge_presence(leases, batch.presence), None)
            )

    async def _merge_identity(self, profile: str, identity: str) -> None:
        if self._profile_home is None:

            def edit(identities: dict[str, str]) -> tuple[dict[str, str], None]:
                identities.setdefault(profile, identity)
                return identities, None

            return await self._update(_IDENTITIES, edit)
        home = Path(self._profile_home(profile))
        if await asyncio.to_thread(home.is_dir):
            await self._update(
                _PROFILE_ID, lambda stored: (stored or identity, None), home / PROFILE_ID
            )
        return None
