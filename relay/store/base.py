"""The `RelayStore` contract: every piece of relay state, one atomic method at a time."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Protocol, TypeGuard

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from relay.errors import InvalidInputError, RelayError
from relay.protocol import MAX_ID, MAX_SAFE_INTEGER, STARTED_WINDOW_MS, validated_origin
from relay.store.records import (  # noqa: F401 - the old FileStore imports them from here
    CONFIG_VERSION,
    DeletedScope,
    DeletedView,
    PresenceLease,
    ProfileGrant,
    RelayConfig,
    StartedEntry,
    StartedScope,
    StateBatch,
)

IDENTITY_PATTERN = re.compile(r"pfi_[0-9a-f]{32}")


class RelayStore(Protocol):
    """All relay state. Each method is atomic: one transaction, or one locked file update."""

    @property
    def display_url(self) -> str:
        """The store's URL with any password hidden."""
        ...

    async def load_config(self) -> RelayConfig | None:
        """The registration; None when absent or not version 2; `CorruptStateError` if invalid."""
        ...

    async def save_config(
        self, config: RelayConfig, *, expected_generation: int | None = None
    ) -> None:
        """Replace the registration and its whole profile map; its key must be saved already.

        With `expected_generation`, only if the stored registration is still that one (0: none
        is stored); otherwise `StaleConfigError`, and nothing changes.
        """
        ...

    async def save_key(self, key_id: str, pem: str) -> str:
        """Store the publisher's PKCS#8 PEM durably and return the reference a config names."""
        ...

    async def load_key(self, ref: str) -> str:
        """The PEM saved under `ref`; `CorruptStateError` when it is missing."""
        ...

    async def profile_identity(self, profile: str) -> str:
        """Get, or mint once for every caller anywhere, the profile's `pfi_<32 hex>` identity."""
        ...

    async def forget_profile_identity(self, profile: str) -> None:
        """Drop a deleted profile's identity, so a profile recreated under its name is new."""
        ...

    async def allocate_revisions(self, count: int, now_ms: int) -> list[int]:
        """`count` increasing revisions no other caller gets; the first is max(floor + 1, now)."""
        ...

    async def revision_floor(self) -> int:
        """The last revision handed out; 0 when none was or the stored value is unreadable."""
        ...

    async def track_started(self, profile_ids: Iterable[str], now_ms: int) -> None:
        """Give each scope without a ledger a floor of now: earlier sessions are never announced."""
        ...

    async def record_started(
        self, profile_id: str, seen: Iterable[tuple[str, int]], now_ms: int
    ) -> None:
        """Prune entries older than max(floor, now - 24 h); add unseen (session, start) pairs."""
        ...

    async def claim_started(
        self, profile_id: str, owner: str, now_ms: int, lease_ms: int, limit: int | None = None
    ) -> list[StartedEntry]:
        """Lease the scope's unsent entries, oldest first, to `owner` until now + `lease_ms`."""
        ...

    async def mark_started_sent(self, profile_id: str, session_id: str) -> None:
        """Record that a session's start was announced (or permanently refused)."""
        ...

    async def started_ledger(self) -> list[StartedScope]:
        """Every scope's floor and entries, ordered by scope and then oldest first."""
        ...

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
        """Queue a deleted session's acknowledgement once per (session, profile).

        An entry already queued keeps its id, identity and scope; its `through` rises to now only
        while the session still has data (`session_live`).
        """
        ...

    async def bind_deleted(self, profile: str, identity: str, scope: DeletedScope) -> int:
        """Bind the profile's unbound entries (no identity, or this one) to a relay scope, once."""
        ...

    async def pending_deleted(self) -> list[DeletedView]:
        """Every queued deletion, oldest `through` first."""
        ...

    async def ack_deleted(self, view_id: str, through: int) -> bool:
        """Remove the entry only if it is still the one acknowledged (same id and `through`)."""
        ...

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
        """Renew or revoke a tab's lease unless `seq` is not above the stored one; True if applied.

        Entries are forgotten `fence_ms` after their lease ends; past `max_tabs` entries the least
        recently updated one is evicted.
        """
        ...

    async def presence_active(self, profile: str, now_ms: int) -> bool:
        """Whether any tab of the profile holds an active, unexpired lease."""
        ...

    async def presence_leases(self) -> list[PresenceLease]:
        """Every stored entry, expired or not, most recently updated first."""
        ...

    async def identities(self) -> dict[str, str]:
        """Every valid stored identity by profile, minting none.

        A JSON store that keeps identities in profile homes knows only the registration's.
        """
        ...

    async def merge_state(self, batch: StateBatch) -> None:
        """Fold in state copied from another store; merging the same batch again changes nothing.

        Identities are added where the profile has none; the revision floor becomes the larger;
        a scope keeps the lower floor and an entry stays sent once either side sent it; a deletion
        keeps its id, the later `through` and whichever binding it has; a lease takes the higher
        sequence. Claims are not copied.
        """
        ...

    async def close(self) -> None:
        """Release connections and file handles."""
        ...


# ── validation shared by the backends ─────────────────────────────────────────


def config_problem(
    url: object, publisher_id: object, key_id: object, key_ref: object, profiles: object
) -> str | None:
    """Why these registration fields are invalid, or None."""
    for name, value in (("url", url), ("publisher_id", publisher_id)):
        try:
            if not isinstance(value, str):
                return f"relay {name} is not a string"
            validated_origin(value)
        except RelayError:
            return f"relay {name} is not an HTTP(S) origin"
    if not isinstance(key_id, str) or not key_id:
        return "relay key_id is empty"
    if not isinstance(key_ref, str) or not key_ref:
        return "relay key reference is empty"
    if not isinstance(profiles, Mapping) or not profiles:
        return "relay profiles are invalid"
    for name, grant in profiles.items():
        if not isinstance(name, str) or not name or not isinstance(grant, ProfileGrant):
            return "relay profiles are invalid"
        if not isinstance(grant.identity, str) or not grant.identity:
            return "relay profiles are invalid"
        if not isinstance(grant.profile_id, str) or not grant.profile_id:
            return "relay profiles are invalid"
    return None


def checked_config(config: RelayConfig) -> RelayConfig:
    """`config` if it can be saved; `InvalidInputError` otherwise."""
    problem = config_problem(
        config.url, config.publisher_id, config.key_id, config.key_ref, config.profiles
    )
    if problem:
        raise InvalidInputError(problem)
    return config


def checked_key(pem: object) -> str:
    """`pem` if it is an unencrypted PKCS#8 Ed25519 private key, the only kind the relay takes."""
    try:
        if not isinstance(pem, str):
            raise TypeError(pem)
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (TypeError, ValueError):
        raise InvalidInputError("publisher key must be an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidInputError("publisher key must be an Ed25519 private key")
    return pem


def is_identity(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and IDENTITY_PATTERN.fullmatch(value) is not None


def is_safe_integer(value: object) -> TypeGuard[int]:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    )


def checked_name(kind: str, value: object, limit: int = 4096) -> str:
    """A non-empty string argument of at most `limit` characters."""
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidInputError(f"{kind} must be a non-empty string of at most {limit} characters")
    return value


def checked_time(kind: str, value: object) -> int:
    """A safe-integer millisecond argument."""
    if not is_safe_integer(value) or value < 0:
        raise InvalidInputError(f"{kind} must be a non-negative safe integer")
    return value


def started_cutoff(floor: int, now_ms: int) -> int:
    """Entries that started before this are pruned and never announced."""
    return max(floor, now_ms - STARTED_WINDOW_MS)


def new_sightings(seen: Iterable[tuple[str, int]], cutoff: int) -> dict[str, int]:
    """The announceable sightings: trimmed ids of 1..191 chars, safe-integer times >= cutoff.

    The first sighting of an id wins, as upstream.
    """
    fresh: dict[str, int] = {}
    for raw_id, started_at in seen:
        session_id = raw_id.strip() if isinstance(raw_id, str) else ""
        if (
            not session_id
            or len(session_id) > MAX_ID
            or not is_safe_integer(started_at)
            or started_at < cutoff
            or session_id in fresh
        ):
            continue
        fresh[session_id] = started_at
    return fresh


def checked_presence(
    seq: object, active: object, lease_ms: int, fence_ms: int, max_tabs: int
) -> None:
    if not is_safe_integer(seq) or seq < 0:
        raise InvalidInputError("presence seq must be an integer in 0..2^53")
    if not isinstance(active, bool):
        raise InvalidInputError("presence active must be a boolean")
    if lease_ms <= 0 or fence_ms < 0 or max_tabs < 1:
        raise InvalidInputError("presence limits must be positive")


def checked_claim(
    profile_id: str, owner: str, now_ms: int, lease_ms: int, limit: int | None
) -> None:
    checked_name("profile_id", profile_id)
    checked_name("owner", owner)
    checked_time("now_ms", now_ms)
    checked_time("lease_ms", lease_ms)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidInputError("limit must be a positive integer")


def checked_scope(scope: object) -> DeletedScope:
    if not isinstance(scope, DeletedScope):
        raise InvalidInputError("scope must be a DeletedScope")
    return scope


def checked_deletion(
    session_id: str, profile: str, now_ms: int, identity: str | None, scope: DeletedScope | None
) -> None:
    checked_name("session_id", session_id)
    checked_name("profile", profile)
    checked_time("now_ms", now_ms)
    if identity is not None:
        checked_name("identity", identity)
    if scope is not None:
        checked_scope(scope)


def checked_lease(
    profile: str,
    tab_id: str,
    seq: int,
    active: bool,
    now_ms: int,
    lease_ms: int,
    fence_ms: int,
    max_tabs: int,
) -> None:
    checked_name("profile", profile)
    checked_name("tab_id", tab_id, 64)
    checked_time("now_ms", now_ms)
    checked_presence(seq, active, lease_ms, fence_ms, max_tabs)


def checked_batch(batch: StateBatch) -> StateBatch:
    """`batch` if every record in it could have come from a store; `InvalidInputError` if not."""
    for profile, identity in batch.identities.items():
        checked_name("profile", profile)
        if not is_identity(identity):
            raise InvalidInputError(f"identity of profile {profile!r} is invalid")
    checked_time("revision floor", batch.revision_floor)
    for scope in batch.started:
        checked_name("profile_id", scope.profile_id)
        checked_time("ledger floor", scope.floor)
        for entry in scope.entries:
            if entry.profile_id != scope.profile_id or not isinstance(entry.sent, bool):
                raise InvalidInputError(f"ledger entry {entry.session_id!r} is invalid")
            checked_name("session_id", entry.session_id, MAX_ID)
            checked_time("started_at", entry.started_at)
    for view in batch.deleted:
        for kind, value in (("id", view.id), ("session_id", view.session_id)):
            checked_name(kind, value)
        checked_name("profile", view.profile)
        checked_time("through", view.through)
        if view.identity is not None:
            checked_name("identity", view.identity)
        if view.scope is not None:
            checked_scope(view.scope)
    for lease in batch.presence:
        checked_name("profile", lease.profile)
        checked_name("tab_id", lease.tab_id, 64)
        checked_presence(lease.seq, lease.active, 1, 0, 1)
        checked_time("expires_at", lease.expires_at)
        checked_time("updated_at", lease.updated_at)
    return batch
