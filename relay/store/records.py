"""The records of relay state: frozen values, each checked when it is made.

A record that exists is valid: its constructor raises `InvalidInputError` naming the record and
the field. A backend that builds one from a stored row turns that into `CorruptStateError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from relay.errors import InvalidInputError
from relay.protocol import MAX_ID, MAX_SAFE_INTEGER, PHASES, TERMINAL_PHASES
from relay.store import checks

CONFIG_VERSION = 2
# A replica's owner id (a claim's holder) is short: a uuid's hex, or a name an operator gave.
OWNER_LIMIT = 64


Check = Callable[[Any], None]


def named(*key: str) -> Callable[[Check], Check]:
    """A record's `__post_init__` whose `InvalidInputError` names the record, and the values of
    its `key` fields: `RunState('s1'): title must be …`."""

    def decorate(check: Check) -> Check:
        def __post_init__(self: Any) -> None:
            try:
                check(self)
            except InvalidInputError as error:
                shown = ", ".join(repr(getattr(self, name)) for name in key)
                record = f"{type(self).__name__}({shown})" if key else type(self).__name__
                raise InvalidInputError(f"{record}: {error}") from None

        return __post_init__

    return decorate


@dataclass(frozen=True, slots=True)
class ProfileGrant:
    """One enrolled profile: the identity it was enrolled under and its relay scope."""

    identity: str
    profile_id: str

    @named()
    def __post_init__(self) -> None:
        checks.text("identity", self.identity)
        checks.text("profile_id", self.profile_id)


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """The server's registration with one relay (config version 2)."""

    url: str
    publisher_id: str
    key_id: str
    key_ref: str
    profiles: Mapping[str, ProfileGrant]
    # Changes on every save, so a replica can tell that another one re-registered.
    generation: int = field(default=0, compare=False)

    @named()
    def __post_init__(self) -> None:
        checks.origin("url", self.url)
        checks.origin("publisher_id", self.publisher_id)
        checks.text("key_id", self.key_id)
        checks.text("key_ref", self.key_ref)
        checks.int64("generation", self.generation)
        profiles = checks.mapping("profiles", self.profiles)
        if not profiles:
            raise InvalidInputError("profiles must name at least one profile")
        for name, grant in profiles.items():
            checks.text("profile name", name)
            checks.instance(f"grant of profile {name!r}", grant, ProfileGrant)
        object.__setattr__(self, "profiles", MappingProxyType(dict(sorted(profiles.items()))))


@dataclass(frozen=True, slots=True)
class StartedEntry:
    """A session seen starting in one relay scope, announced (`sent`) or not."""

    profile_id: str
    session_id: str
    started_at: int
    sent: bool = False
    claimed_by: str | None = None
    claimed_until: int | None = None

    @named("profile_id", "session_id")
    def __post_init__(self) -> None:
        checks.text("profile_id", self.profile_id)
        checks.text("session_id", self.session_id, MAX_ID)
        checks.time_ms("started_at", self.started_at)
        checks.flag("sent", self.sent)
        checks.optional_text("claimed_by", self.claimed_by)
        checks.optional_int("claimed_until", self.claimed_until)


@dataclass(frozen=True, slots=True)
class StartedScope:
    """The ledger of one relay scope: sessions older than `floor` are never announced."""

    profile_id: str
    floor: int
    entries: tuple[StartedEntry, ...] = ()

    @named("profile_id")
    def __post_init__(self) -> None:
        checks.text("profile_id", self.profile_id)
        checks.time_ms("floor", self.floor)
        entries = tuple(checks.items("entries", self.entries, None))
        for entry in entries:
            checks.instance("entry", entry, StartedEntry)
            if entry.profile_id != self.profile_id:
                raise InvalidInputError(f"entry {entry.session_id!r} is of another scope")
        object.__setattr__(self, "entries", entries)


@dataclass(frozen=True, slots=True)
class DeletedScope:
    """The relay scope a deleted session's acknowledgement is bound to."""

    url: str
    publisher_id: str
    profile_id: str

    @named()
    def __post_init__(self) -> None:
        checks.origin("url", self.url)
        checks.origin("publisher_id", self.publisher_id)
        checks.text("profile_id", self.profile_id)


@dataclass(frozen=True, slots=True)
class DeletedView:
    """A deleted session whose finished runs still have to be acknowledged on the relay."""

    id: str
    session_id: str
    profile: str
    through: int
    identity: str | None = None
    scope: DeletedScope | None = None

    @named("id")
    def __post_init__(self) -> None:
        checks.text("id", self.id, 64)
        checks.text("session_id", self.session_id)
        checks.text("profile", self.profile)
        checks.time_ms("through", self.through)
        checks.optional_text("identity", self.identity)
        if self.scope is not None:
            checks.instance("scope", self.scope, DeletedScope)


@dataclass(frozen=True, slots=True)
class RunState:
    """A session's newest turn, as the replica hosting it (`owner`, its claim-owner id) last
    described it. `started_at` orders a session's turns: a newer turn replaces an older one
    wherever it runs. `updated_at` is when a finished turn ended; a live one is published as of
    now."""

    session_id: str
    stream_id: str | None
    profile: str | None
    title: str
    phase: str
    started_at: int
    updated_at: int
    owner: str
    lease_until: int = 0
    sending_by: str | None = None
    sending_until: int = 0
    # The replica this row was taken over from when the takeover ended its live turn as
    # `failed`: that replica's true phase of the same turn may correct it once (`taken_back`).
    taken_from: str | None = None

    @named("session_id")
    def __post_init__(self) -> None:
        checks.text("session_id", self.session_id, MAX_ID)
        checks.optional_text("stream_id", self.stream_id, MAX_ID)
        checks.optional_text("profile", self.profile)
        checks.text("title", self.title)
        if self.phase not in PHASES:
            raise InvalidInputError(f"phase must be one of {', '.join(sorted(PHASES))}")
        checks.time_ms("started_at", self.started_at)
        checks.time_ms("updated_at", self.updated_at)
        checks.text("owner", self.owner, OWNER_LIMIT)
        checks.time_ms("lease_until", self.lease_until)
        checks.optional_text("sending_by", self.sending_by, OWNER_LIMIT)
        checks.time_ms("sending_until", self.sending_until)
        checks.optional_text("taken_from", self.taken_from, OWNER_LIMIT)

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    def sent_elsewhere(self, owner: str, now_ms: int) -> bool:
        """Whether another replica may still be sending a snapshot that holds this row."""
        return self.sending_by not in (None, owner) and self.sending_until > now_ms

    def taken_back(self, offered: RunState) -> bool:
        """Whether `offered`, the same turn as this row, corrects it: this row is the `failed` a
        takeover gave the turn, and `offered` is the true phase from the replica it was taken
        from (the same incarnation, back after a silent network: a restart is a new owner, so a
        turn that died with its replica stays failed)."""
        return (
            self.taken_from is not None
            and self.taken_from == offered.owner
            and self.phase != offered.phase
        )


@dataclass(frozen=True, slots=True)
class PassView:
    """What a publishing pass reads before it starts, in one read (`Passes.pass_view`): every
    profile asked about (an identity None when none is stored, or it is invalid), and subsets
    of the scopes asked about."""

    # The stored registration's generation; None when there is none (absent, or not version 2).
    generation: int | None
    identities: Mapping[str, str | None]
    presence: Mapping[str, bool]
    # Whether the deleted outbox holds entries the owner may claim.
    deleted: bool
    # Scopes holding unsent announcements the owner may claim.
    unsent: frozenset[str]
    # Scopes without a ledger yet.
    untracked: frozenset[str]
    # The store's clock when it read this, in Unix ms; None for a store on this host's clock.
    # A reading of a clock, not what the store holds: views compare equal without it.
    store_ms: int | None = field(default=None, compare=False)

    @named()
    def __post_init__(self) -> None:
        if self.generation is not None:
            checks.int64("generation", self.generation)
        if self.store_ms is not None:
            checks.time_ms("store_ms", self.store_ms)
        identities = dict(checks.mapping("identities", self.identities))
        for name, identity in identities.items():
            checks.text("profile", name)
            if identity is not None:
                checks.identity(f"identity of profile {name!r}", identity)
        presence = dict(checks.mapping("presence", self.presence))
        for name, active in presence.items():
            checks.text("profile", name)
            checks.flag(f"presence of profile {name!r}", active)
        checks.flag("deleted", self.deleted)
        for kind, scopes in (("unsent", self.unsent), ("untracked", self.untracked)):
            checks.instance(kind, scopes, frozenset)
            for scope in scopes:
                checks.text(f"{kind} scope", scope)
        object.__setattr__(self, "identities", MappingProxyType(identities))
        object.__setattr__(self, "presence", MappingProxyType(presence))


@dataclass(frozen=True, slots=True)
class PassRows:
    """A publishing pass's write (`Passes.pass_write`): its rows, and a revision for each."""

    runs: tuple[RunState, ...]
    revisions: range

    @named()
    def __post_init__(self) -> None:
        runs = checks.members("runs", self.runs, "run", RunState)
        checks.instance("revisions", self.revisions, range)
        if self.revisions.step != 1 or len(self.revisions) != len(runs):
            raise InvalidInputError("revisions must be one increasing run, one per row")
        if runs and not 1 <= self.revisions[0] <= self.revisions[-1] <= MAX_SAFE_INTEGER:
            raise InvalidInputError("revisions must lie in 1..2^53-1")
        object.__setattr__(self, "runs", runs)


@dataclass(frozen=True, slots=True)
class Waiting:
    """How much work of one kind waits: how many, and the oldest's time (ms)."""

    count: int
    oldest: int

    @named()
    def __post_init__(self) -> None:
        checks.safe_int("count", self.count, 1)
        checks.time_ms("oldest", self.oldest)


@dataclass(frozen=True, slots=True)
class Backlog:
    """The work waiting in the store, counted where it is stored (the operator page).

    `unsent`: per scope (profile_id), announcements not yet sent, the oldest by `started_at`;
    `deleted`: per profile, deletions not yet acknowledged, the oldest by `through`; `claims`:
    per owner, unsent announcements it holds a claim on, `oldest` being its latest
    `claimed_until`. Only non-empty groups appear."""

    unsent: Mapping[str, Waiting] = field(default_factory=dict)
    deleted: Mapping[str, Waiting] = field(default_factory=dict)
    claims: Mapping[str, Waiting] = field(default_factory=dict)

    @named()
    def __post_init__(self) -> None:
        for kind in ("unsent", "deleted", "claims"):
            found = checks.mapping(kind, getattr(self, kind), None)
            for key, waiting in found.items():
                checks.text(f"{kind} key", key)
                checks.instance(f"{kind} of {key!r}", waiting, Waiting)
            object.__setattr__(self, kind, MappingProxyType(dict(found)))


@dataclass(frozen=True, slots=True)
class PresenceLease:
    """A browser tab's presence: `active` and unexpired mutes alerts for its profile."""

    profile: str
    tab_id: str
    seq: int
    active: bool
    expires_at: int
    updated_at: int

    @named("profile", "tab_id")
    def __post_init__(self) -> None:
        checks.text("profile", self.profile)
        checks.text("tab_id", self.tab_id, 64)
        checks.safe_int("seq", self.seq)
        checks.flag("active", self.active)
        checks.time_ms("expires_at", self.expires_at)
        checks.time_ms("updated_at", self.updated_at)


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Relay state copied from another store; `merge_state` folds it in."""

    identities: Mapping[str, str] = field(default_factory=dict)
    revision_floor: int = 0
    started: tuple[StartedScope, ...] = ()
    deleted: tuple[DeletedView, ...] = ()
    presence: tuple[PresenceLease, ...] = ()

    @named()
    def __post_init__(self) -> None:
        identities = dict(checks.mapping("identities", self.identities, None))
        for profile, identity in identities.items():
            checks.text("profile", profile)
            checks.identity(f"identity of profile {profile!r}", identity)
        checks.time_ms("revision_floor", self.revision_floor)
        object.__setattr__(self, "identities", MappingProxyType(identities))
        for kind, each, cls in (
            ("started", "started scope", StartedScope),
            ("deleted", "deleted view", DeletedView),
            ("presence", "presence lease", PresenceLease),
        ):
            object.__setattr__(self, kind, checks.members(kind, getattr(self, kind), each, cls))
