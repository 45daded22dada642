"""`Backend`: what a storage engine does for `Store`, which checks every argument and every value
read back; a backend only stores and reads, each hook atomically. Hooks that take more than two
values take one request record. The rulebook on documents implements it (`relay.store.rules`:
memory and JSON files), and SQL (`relay.store.sql`: SQLite and Postgres).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from relay.store import records
from relay.store.checks import is_identity
from relay.store.fleet import FleetMember

# (ref, stored PEM) -> the PEM to store instead; raising leaves every key as it was.
Rekeyed = Callable[[str, str], str]


@dataclass(frozen=True, slots=True)
class Claim:
    """A leased claim: `owner` takes what is free at `now_ms` (or its own) until `until`."""

    owner: str
    now_ms: int
    until: int
    limit: int | None = None

    @property
    def watched_since(self) -> int:
        """One lease back: `keep_alive` still reports others' leases that ended after this."""
        return 2 * self.now_ms - self.until


@dataclass(frozen=True, slots=True)
class StartedClaim:
    """`StartedLedger.claim_started_scopes`'s request."""

    scopes: tuple[str, ...]
    claim: Claim
    sent: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Sightings:
    """`StartedLedger.record_started_scopes`'s request: profile_id -> session_id -> started_at."""

    seen: Mapping[str, Mapping[str, int]]
    now_ms: int


@dataclass(frozen=True, slots=True)
class Deletion:
    """`DeletedOutbox.enqueue_deleted`'s request: `new`, its id freshly minted."""

    new: records.DeletedView
    session_live: bool


@dataclass(frozen=True, slots=True)
class Binding:
    """`DeletedOutbox.bind_deleted`'s request."""

    profile: str
    identity: str
    scope: records.DeletedScope


@dataclass(frozen=True, slots=True)
class PresenceUpdate:
    """`PresenceLeases.apply_presence`'s request, `lease`'s expires_at and updated_at set."""

    lease: records.PresenceLease
    fence_ms: int
    max_tabs: int


@dataclass(frozen=True, slots=True)
class RunSync:
    """`Passes.pass_write`'s request: `live` in session order; finished rows that ended before
    `cutoff` are forgotten, their turns remembered until `forget_before`."""

    owner: str
    live: tuple[records.RunState, ...]
    now_ms: int
    until: int
    cutoff: int
    forget_before: int
    member: FleetMember | None = None  # the owner's fleet row, written whole


@dataclass(frozen=True, slots=True)
class ViewQuery:
    """`Passes.pass_view`'s request."""

    owner: str
    profiles: tuple[str, ...]
    scopes: tuple[str, ...]
    now_ms: int


@dataclass(slots=True)
class ViewReading:
    """What a backend reads for a pass's view, maybe more than was asked (every stored
    identity, every tracked scope); `Store` narrows it to what was asked."""

    generation: int | None = None
    identities: dict[str, str] = field(default_factory=dict)
    active: set[str] = field(default_factory=set)  # profiles with an active presence lease
    deleted: bool = False  # whether the owner would claim a queued deletion
    unsent: set[str] = field(default_factory=set)  # scopes with entries the owner would claim
    tracked: set[str] = field(default_factory=set)  # scopes with a ledger
    # The store's clock as the read ran, for the replicas' one time base (`PassView.store_ms`).
    store_ms: int | None = None

    def view(self, query: ViewQuery) -> records.PassView:
        """The view of what `query` asked; `InvalidInputError` if what was read is invalid."""
        # An invalid stored identity is no identity, as a pass reads it: the profile is not
        # published (`profile_identity` would raise for it).
        identities = {p: self.identities.get(p) for p in query.profiles}
        return records.PassView(
            self.generation,
            {p: i if is_identity(i) else None for p, i in identities.items()},
            {p: p in self.active for p in query.profiles},
            self.deleted,
            frozenset(s for s in query.scopes if s in self.unsent),
            frozenset(s for s in query.scopes if s not in self.tracked),
            self.store_ms,
        )


class Backend(Protocol):
    """The hooks `Store` calls, arguments checked; what they return, `Store` checks."""

    @property
    def name(self) -> str: ...  # `Handle.backend_name`

    @property
    def display_url(self) -> str: ...

    async def schema_revision(self) -> str | None: ...

    async def unwritable(self) -> str | None: ...

    async def clock_ms(self) -> int | None: ...

    def bound_waits(self, seconds: float) -> None: ...

    async def close(self) -> None: ...

    async def load_config(self) -> records.RelayConfig | None: ...

    async def save_config(
        self, config: records.RelayConfig, expected_generation: int | None
    ) -> None:
        """`InvalidInputError` if its key is not saved; `StaleConfigError` if raced."""

    async def forget_config(self, expected_generation: int | None) -> None:
        """`Registration.forget_registration`."""

    async def save_key(self, key_id: str, pem: str) -> str:
        """Store the PEM as given (sealed already, or not); the reference a config names."""

    async def load_key(self, ref: str) -> str | None:
        """The stored PEM, None when `ref` names none in this store."""

    async def delete_key(self, ref: str) -> bool:
        """Remove the key unless the registration names it; whether it was removed."""

    async def rekey(self, rekeyed: Rekeyed) -> int:
        """Replace every stored key's PEM by `rekeyed(ref, pem)`, all or nothing; the count."""

    async def profile_identity(self, profile: str) -> str | None:
        """The stored identity, minting none."""

    async def mint_identity(self, profile: str, minted: str) -> str:
        """Store `minted` unless the profile has an identity already; the stored one."""

    async def forget_identity(self, profile: str) -> None: ...

    async def identities(self) -> dict[str, str]: ...

    async def allocate_revisions(self, count: int, now_ms: int) -> int | None:
        """Raise the floor to max(floor + 1, now) + count - 1 and return it; None (and no change)
        when that would pass 2^53-1."""

    async def revision_floor(self) -> int: ...

    async def track_started(self, profile_ids: tuple[str, ...], now_ms: int) -> None: ...

    async def record_started(self, sightings: Sightings) -> None: ...

    async def claim_started(self, request: StartedClaim) -> list[records.StartedEntry]: ...

    async def started_ledger(self) -> list[records.StartedScope]: ...

    async def enqueue_deleted(self, deletion: Deletion) -> records.DeletedView: ...

    async def bind_deleted(self, binding: Binding) -> int: ...

    async def pending_deleted(self) -> list[records.DeletedView]: ...

    async def backlog(self) -> records.Backlog: ...  # by aggregate reads

    async def claim_deleted(self, claim: Claim) -> list[records.DeletedView]: ...

    async def ack_deleted(self, view_id: str, through: int) -> bool: ...

    async def apply_presence(self, update: PresenceUpdate) -> bool: ...

    async def presence_active(self, profile: str, now_ms: int) -> bool: ...

    async def presence_leases(self) -> list[records.PresenceLease]: ...

    async def keep_alive(self, claim: Claim) -> int | None:
        """`LeaseWatch.keep_alive`, leases renewed until `claim.until`."""

    async def release_runs(self, owner: str) -> None: ...

    async def retire_runs(self, owner: str, now_ms: int) -> None: ...

    async def run_states(self) -> list[records.RunState]: ...

    async def pass_view(self, query: ViewQuery) -> ViewReading: ...

    async def pass_write(self, sync: RunSync) -> tuple[list[records.RunState], int] | None:
        """The sync, then raise the revision floor as `allocate_revisions(len(rows))` would (not
        at all for no rows): (the owned rows, the floor after). None when that would pass
        2^53-1, and then nothing changes."""

    async def record_member(self, member: FleetMember) -> None: ...

    async def fleet(self) -> list[FleetMember]: ...

    async def merge_state(self, batch: records.StateBatch) -> None: ...
