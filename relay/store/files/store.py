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
from pathlib import Path
from typing import TypeVar

from relay.errors import CorruptStateError, InvalidInputError, StaleConfigError, StoreError
from relay.store.files.documents import (
    _DELETED,
    _IDENTITIES,
    _PRESENCE,
    _PROFILE_ID,
    _REVISION,
    _STARTED,
    CONFIG,
    PROFILE_ID,
    _dump_config,
    _parse_config,
)
from relay.store.files.io import _fsync_dir, _read, _write
from relay.store.files.keys import KeyFiles
from relay.store.files.passes import PassFiles, shown_generation
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
from relay.store.rules import ledger, outbox, presence, revisions

D = TypeVar("D")
R = TypeVar("R")
ProfileHome = Callable[[str], Path]


class FileStore(KeyFiles, RunFiles, PassFiles, StoreGate):
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
                shown = shown_generation(path)
                if expected_generation is not None and shown != expected_generation:
                    raise StaleConfigError("the relay registration changed since it was read")
                _write(path, _dump_config(config), max(time.time_ns(), previous + 1))

        await self._call(work)

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
            last = revisions.allocate(floor, count, now_ms)
            return (floor if last is None else last), last

        return await self._update(_REVISION, edit)

    async def _revision_floor(self) -> int:
        return await self._load(_REVISION)

    # ── started ledger ────────────────────────────────────────────────────────

    async def _track_started(self, scopes: list[str], now_ms: int) -> None:
        await self._change(_STARTED, lambda led: ledger.track(led, scopes, now_ms))

    async def _record_started(self, profile_id: str, seen: dict[str, int], now_ms: int) -> None:
        await self._change(_STARTED, lambda led: ledger.record(led, profile_id, seen, now_ms))

    async def _claim_started(
        self, profile_id: str, owner: str, now_ms: int, until: int, limit: int | None
    ) -> list[StartedEntry]:
        def edit(led: ledger.Ledger) -> list[StartedEntry]:
            return ledger.claim(led, profile_id, owner, now_ms, until, limit)

        return await self._change(_STARTED, edit)

    async def _mark_started_sent(self, profile_id: str, session_ids: list[str]) -> None:
        await self._change(_STARTED, lambda led: ledger.mark_sent(led, profile_id, session_ids))

    async def _record_started_scopes(self, seen: dict[str, dict[str, int]], now_ms: int) -> None:
        def edit(led: ledger.Ledger) -> None:
            for profile_id, sightings in seen.items():
                ledger.record(led, profile_id, sightings, now_ms)

        await self._change(_STARTED, edit)

    async def _claim_started_scopes(
        self,
        profile_ids: list[str],
        owner: str,
        now_ms: int,
        until: int,
        limit: int | None,
        sent: list[tuple[str, str]],
    ) -> list[StartedEntry]:
        def edit(led: ledger.Ledger) -> list[StartedEntry]:
            return ledger.advance(led, profile_ids, owner, now_ms, until, limit, sent)

        return await self._change(_STARTED, edit)

    async def _started_ledger(self) -> list[StartedScope]:
        return ledger.scopes(await self._load(_STARTED))

    # ── deleted-session outbox ────────────────────────────────────────────────

    async def _enqueue_deleted(self, new: DeletedView, session_live: bool) -> DeletedView:
        return await self._change(_DELETED, lambda box: outbox.enqueue(box, new, session_live))

    async def _bind_deleted(self, profile: str, identity: str, scope: DeletedScope) -> int:
        return await self._change(_DELETED, lambda box: outbox.bind(box, profile, identity, scope))

    async def _pending_deleted(self) -> list[DeletedView]:
        return outbox.pending(await self._load(_DELETED))

    async def _ack_deleted(self, view_id: str, through: int) -> bool:
        return await self._change(_DELETED, lambda box: outbox.ack(box, view_id, through))

    # ── presence leases ───────────────────────────────────────────────────────

    async def _apply_presence(self, new: PresenceLease, fence_ms: int, max_tabs: int) -> bool:
        return await self._change(
            _PRESENCE, lambda tabs: presence.apply(tabs, new, fence_ms, max_tabs)
        )

    async def _presence_active(self, profile: str, now_ms: int) -> bool:
        return presence.active(await self._load(_PRESENCE), profile, now_ms)

    async def _presence_leases(self) -> list[PresenceLease]:
        return presence.newest_first(await self._load(_PRESENCE))

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
            await self._change(_STARTED, lambda led: ledger.merge(led, batch.started))
        if batch.deleted:
            await self._change(_DELETED, lambda box: outbox.merge(box, batch.deleted))
        if batch.presence:
            await self._change(_PRESENCE, lambda tabs: presence.merge(tabs, batch.presence))

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
