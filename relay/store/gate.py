"""`StoreGate`: the one place where every store method checks what goes in and comes out.

A backend subclasses it and implements the `_hooks`, which receive checked arguments only. What a
hook reads back is checked on its way out: records check themselves when they are built, and a
record that fails there is stored state gone bad, a `CorruptStateError`, never a value past the
protocol's limits.
"""

from __future__ import annotations

import uuid
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from typing import TypeVar

from relay import metrics
from relay.errors import CorruptStateError, InvalidInputError
from relay.protocol import MAX_SAFE_INTEGER
from relay.store import checks
from relay.store.checks import read
from relay.store.contract import RelayStore
from relay.store.keys.gate import KeyGate
from relay.store.pass_gate import PAST_THE_CAP, PassGate
from relay.store.records import (
    OWNER_LIMIT,
    DeletedScope,
    DeletedView,
    PresenceLease,
    RelayConfig,
    StartedEntry,
    StartedScope,
    StateBatch,
)
from relay.store.run_gate import RunGate, lease_end

T = TypeVar("T")


@metrics.timed_methods(
    RelayStore, skip=("close", "display_url", "backend", "schema_revision", "unwritable")
)
class StoreGate(KeyGate, RunGate, PassGate, RelayStore):
    """Every public method of `RelayStore`: check, call the backend's hook, check its answer.

    Each one is timed into `relay.store.transaction.duration` (the decorator above).
    """

    async def schema_revision(self) -> str | None:
        return None  # a SQL store overrides it; the others have no schema

    async def unwritable(self) -> str | None:
        return None  # a SQL store asks its server; the others have none

    # ── registration ──────────────────────────────────────────────────────────

    async def load_config(self) -> RelayConfig | None:
        return await read("relay registration", self._load_config())

    async def save_config(
        self, config: RelayConfig, *, expected_generation: int | None = None
    ) -> None:
        checks.instance("config", config, RelayConfig)
        if expected_generation is not None:
            checks.int64("expected_generation", expected_generation)
        await self._save_config(config, expected_generation)

    async def profile_identity(self, profile: str) -> str:
        checks.text("profile", profile)
        stored = await self._profile_identity(profile)
        if stored is None:
            stored = await self._mint_identity(profile, f"pfi_{uuid.uuid4().hex}")
        if not checks.is_identity(stored):
            raise CorruptStateError(f"stored identity of profile {profile!r} is invalid")
        return stored

    async def forget_profile_identity(self, profile: str) -> None:
        await self._forget_identity(checks.text("profile", profile))

    async def identities(self) -> dict[str, str]:
        stored = await self._identities()
        return {p: i for p, i in stored.items() if checks.is_identity(i)}

    # ── revisions ─────────────────────────────────────────────────────────────

    async def allocate_revisions(self, count: int, now_ms: int) -> list[int]:
        checks.safe_int("count", count)
        if count > checks.MAX_BATCH:
            raise InvalidInputError(f"count may be at most {checks.MAX_BATCH}")
        checks.time_ms("now_ms", now_ms)
        if count == 0:
            return []
        last = await self._allocate_revisions(count, now_ms)
        if last is None:
            raise CorruptStateError(PAST_THE_CAP)
        if type(last) is not int or not count <= last <= MAX_SAFE_INTEGER:
            raise CorruptStateError(f"stored revision floor {last!r} is invalid")
        return list(range(last - count + 1, last + 1))

    async def revision_floor(self) -> int:
        floor = await self._revision_floor()
        if type(floor) is not int or floor > MAX_SAFE_INTEGER:
            raise CorruptStateError(f"stored revision floor {floor!r} is invalid")
        # Harmless: allocation starts from now. Past 2^53-1, no revision would be exact.
        return max(floor, 0)

    # ── started ledger ────────────────────────────────────────────────────────

    async def track_started(self, profile_ids: Iterable[str], now_ms: int) -> None:
        scopes = [checks.text("profile_id", p) for p in checks.items("profile_ids", profile_ids)]
        checks.time_ms("now_ms", now_ms)
        if scopes:
            await self._track_started(list(dict.fromkeys(scopes)), now_ms)

    async def record_started(
        self, profile_id: str, seen: Iterable[tuple[str, int]], now_ms: int
    ) -> None:
        checks.text("profile_id", profile_id)
        checks.time_ms("now_ms", now_ms)
        await self._record_started(profile_id, sightings(seen), now_ms)

    async def claim_started(
        self, profile_id: str, owner: str, now_ms: int, lease_ms: int, limit: int | None = None
    ) -> list[StartedEntry]:
        checks.text("profile_id", profile_id)
        until = claim(owner, now_ms, lease_ms, limit)
        return await read(
            "started entry", self._claim_started(profile_id, owner, now_ms, until, limit)
        )

    async def mark_started_sent(self, profile_id: str, *session_ids: str) -> None:
        checks.text("profile_id", profile_id)
        ids = [checks.text("session_id", s) for s in checks.items("session_ids", session_ids)]
        if ids:
            await self._mark_started_sent(profile_id, list(dict.fromkeys(ids)))

    async def record_started_scopes(
        self, seen: Mapping[str, Iterable[tuple[str, int]]], now_ms: int
    ) -> None:
        scopes = {
            checks.text("profile_id", p): sightings(s)
            for p, s in checks.mapping("seen", seen).items()
        }
        checks.time_ms("now_ms", now_ms)
        if scopes:
            await self._record_started_scopes(scopes, now_ms)

    async def claim_started_scopes(
        self,
        profile_ids: Iterable[str],
        owner: str,
        now_ms: int,
        lease_ms: int,
        limit: int | None = None,
        *,
        sent: Iterable[tuple[str, str]] = (),
    ) -> list[StartedEntry]:
        scopes = [checks.text("profile_id", p) for p in checks.items("profile_ids", profile_ids)]
        until = claim(owner, now_ms, lease_ms, limit)
        marks = [_scope_session(pair) for pair in checks.items("sent", sent)]
        if not scopes and not marks:
            return []
        claimed = self._claim_started_scopes(
            list(dict.fromkeys(scopes)), owner, now_ms, until, limit, list(dict.fromkeys(marks))
        )
        return await read("started entry", claimed)

    async def started_ledger(self) -> list[StartedScope]:
        return await read("started ledger", self._started_ledger())

    # ── deleted outbox ────────────────────────────────────────────────────────

    async def enqueue_deleted(
        self,
        session_id: str,
        profile: str,
        now_ms: int,
        *,
        session_live: bool,
        identity: str | None,
        scope: DeletedScope | None,
    ) -> DeletedView:
        checks.text("session_id", session_id)
        checks.text("profile", profile)
        checks.time_ms("now_ms", now_ms)
        checks.flag("session_live", session_live)
        checks.optional_text("identity", identity)
        if scope is not None:
            checks.instance("scope", scope, DeletedScope)
        return await read(
            "deleted view",
            self._enqueue_deleted(
                DeletedView(str(uuid.uuid4()), session_id, profile, now_ms, identity, scope),
                session_live,
            ),
        )

    async def bind_deleted(self, profile: str, identity: str, scope: DeletedScope) -> int:
        checks.text("profile", profile)
        checks.text("identity", identity)
        checks.instance("scope", scope, DeletedScope)
        return await self._bind_deleted(profile, identity, scope)

    async def pending_deleted(self) -> list[DeletedView]:
        return await read("deleted outbox", self._pending_deleted())

    async def claim_deleted(
        self, owner: str, now_ms: int, lease_ms: int, limit: int | None = None
    ) -> list[DeletedView]:
        until = claim(owner, now_ms, lease_ms, limit)
        return await read("deleted view", self._claim_deleted(owner, now_ms, until, limit))

    async def ack_deleted(self, view_id: str, through: int) -> bool:
        checks.text("view id", view_id)
        checks.time_ms("through", through)
        return await self._ack_deleted(view_id, through)

    # ── presence ──────────────────────────────────────────────────────────────

    async def apply_presence(
        self,
        profile: str,
        tab_id: str,
        seq: int,
        active: bool,
        now_ms: int,
        *,
        lease_ms: int,
        fence_ms: int,
        max_tabs: int,
    ) -> bool:
        lease = PresenceLease(
            profile,
            tab_id,
            seq,
            active,
            checks.until(
                "presence lease",
                checks.time_ms("now_ms", now_ms),
                checks.safe_int("lease_ms", lease_ms, 1),
            ),
            now_ms,
        )
        checks.until("presence fence", lease.expires_at, checks.time_ms("fence_ms", fence_ms))
        if not 1 <= checks.safe_int("max_tabs", max_tabs, 1) <= checks.MAX_BATCH:
            raise InvalidInputError(f"max_tabs must be an integer in 1..{checks.MAX_BATCH}")
        return await self._apply_presence(lease, fence_ms, max_tabs)

    async def presence_active(self, profile: str, now_ms: int) -> bool:
        checks.text("profile", profile)
        checks.time_ms("now_ms", now_ms)
        return await self._presence_active(profile, now_ms)

    async def presence_leases(self) -> list[PresenceLease]:
        return await read("presence lease", self._presence_leases())

    # ── transfer ──────────────────────────────────────────────────────────────

    async def merge_state(self, batch: StateBatch) -> None:
        await self._merge_state(checks.instance("batch", batch, StateBatch))

    # ── the hooks a backend implements; arguments arrive checked ─────────────

    @abstractmethod
    async def _load_config(self) -> RelayConfig | None: ...

    @abstractmethod
    async def _save_config(self, config: RelayConfig, expected_generation: int | None) -> None:
        """`InvalidInputError` if its key is not saved; `StaleConfigError` if raced."""

    @abstractmethod
    async def _profile_identity(self, profile: str) -> str | None:
        """The stored identity, minting none."""

    @abstractmethod
    async def _mint_identity(self, profile: str, minted: str) -> str:
        """Store `minted` unless the profile has an identity already; the stored one."""

    @abstractmethod
    async def _forget_identity(self, profile: str) -> None: ...

    @abstractmethod
    async def _identities(self) -> dict[str, str]: ...

    @abstractmethod
    async def _allocate_revisions(self, count: int, now_ms: int) -> int | None:
        """Raise the floor to max(floor + 1, now) + count - 1 and return it; None (and no change)
        when that would pass 2^53-1."""

    @abstractmethod
    async def _revision_floor(self) -> int: ...

    @abstractmethod
    async def _track_started(self, profile_ids: list[str], now_ms: int) -> None: ...

    @abstractmethod
    async def _record_started(self, profile_id: str, seen: dict[str, int], now_ms: int) -> None:
        """Prune; add each of `seen` (checked, first sighting wins) not before the cutoff."""

    @abstractmethod
    async def _claim_started(
        self, profile_id: str, owner: str, now_ms: int, until: int, limit: int | None
    ) -> list[StartedEntry]: ...

    @abstractmethod
    async def _mark_started_sent(self, profile_id: str, session_ids: list[str]) -> None: ...

    @abstractmethod
    async def _record_started_scopes(self, seen: dict[str, dict[str, int]], now_ms: int) -> None:
        """`_record_started` of each scope of `seen`, in one transaction."""

    @abstractmethod
    async def _claim_started_scopes(
        self,
        profile_ids: list[str],
        owner: str,
        now_ms: int,
        until: int,
        limit: int | None,
        sent: list[tuple[str, str]],
    ) -> list[StartedEntry]:
        """Mark `sent`, then claim in `profile_ids` (none: no claim), in one transaction."""

    @abstractmethod
    async def _started_ledger(self) -> list[StartedScope]: ...

    @abstractmethod
    async def _enqueue_deleted(self, new: DeletedView, session_live: bool) -> DeletedView:
        """Queue `new` (its id freshly minted), or update the entry already queued; the entry."""

    @abstractmethod
    async def _bind_deleted(self, profile: str, identity: str, scope: DeletedScope) -> int: ...

    @abstractmethod
    async def _pending_deleted(self) -> list[DeletedView]: ...

    @abstractmethod
    async def _claim_deleted(
        self, owner: str, now_ms: int, until: int, limit: int | None
    ) -> list[DeletedView]: ...

    @abstractmethod
    async def _ack_deleted(self, view_id: str, through: int) -> bool: ...

    @abstractmethod
    async def _apply_presence(self, lease: PresenceLease, fence_ms: int, max_tabs: int) -> bool:
        """Apply `lease` (expires_at and updated_at set) if its seq is above the stored one."""

    @abstractmethod
    async def _presence_active(self, profile: str, now_ms: int) -> bool: ...

    @abstractmethod
    async def _presence_leases(self) -> list[PresenceLease]: ...

    @abstractmethod
    async def _merge_state(self, batch: StateBatch) -> None: ...


def sightings(seen: object) -> dict[str, int]:
    """The announceable sightings: trimmed ids of 1..191 chars at safe-integer times.

    As upstream, a sighting with another id or time is passed over, and the first of an id wins;
    what is not a list of (id, time) pairs is refused.
    """
    fresh: dict[str, int] = {}
    for pair in checks.items("seen", seen):
        if isinstance(pair, str | bytes) or not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InvalidInputError("seen must hold (session_id, started_at) pairs")
        raw_id, started_at = pair
        session_id = raw_id.strip() if type(raw_id) is str else ""
        if not session_id or session_id in fresh:
            continue
        try:
            checks.text("session_id", session_id, 191)
            checks.time_ms("started_at", started_at)
        except InvalidInputError:
            continue
        fresh[session_id] = started_at
    return fresh


def _scope_session(pair: object) -> tuple[str, str]:
    """A (profile_id, session_id) pair of texts."""
    if isinstance(pair, str | bytes) or not isinstance(pair, tuple | list) or len(pair) != 2:
        raise InvalidInputError("sent must hold (profile_id, session_id) pairs")
    return checks.text("profile_id", pair[0]), checks.text("session_id", pair[1])


def claim(owner: str, now_ms: int, lease_ms: int, limit: int | None) -> int:
    """The one rule for every leased claim's arguments; when the lease ends."""
    checks.text("owner", owner, OWNER_LIMIT)
    until = lease_end(now_ms, lease_ms)
    if limit is not None and not 1 <= checks.safe_int("limit", limit) <= checks.MAX_BATCH:
        raise InvalidInputError(f"limit must be an integer in 1..{checks.MAX_BATCH}")
    return until
