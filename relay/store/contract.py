"""The store's contract, one small Protocol per aggregate; `RelayStore` is their union.

Callers type against the narrowest one they use. Every method is atomic: one transaction, or one
locked file update. Arguments are checked before any backend code runs (`relay.store.store.Store`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from relay.store.fleet import FleetMember
from relay.store.keys.keyring import Passphrase
from relay.store.records import (
    Backlog,
    DeletedScope,
    DeletedView,
    PassRows,
    PassView,
    PresenceLease,
    RelayConfig,
    RunState,
    StartedEntry,
    StartedScope,
    StateBatch,
)


class Handle(Protocol):
    """What every store is: a named resource of one backend, to close."""

    @property
    def display_url(self) -> str:
        """The store's URL with any password hidden."""

    @property
    def backend_name(self) -> str:
        """`memory`, `json`, `sqlite` or `postgres`."""

    async def schema_revision(self) -> str | None:
        """The Alembic revision the database is at; None for a backend without a schema."""

    async def unwritable(self) -> str | None:
        """Why the store's server takes no writes now (read-only, a standby), else None."""

    async def clock_ms(self) -> int | None:
        """The store server's clock now, in Unix ms: the time base the replicas share (a lease
        is judged on it); None for a store on this host's clock (SQLite, files, memory)."""

    def bound_waits(self, seconds: float) -> None:
        """Wait `seconds` at most for the store's server (to connect, for a statement, a lock,
        a silent connection), never longer than its URL says; a store without a server has
        nothing to bound. A service bounds its store's waits to a share of its lease."""

    async def close(self) -> None:
        """Release connections and file handles."""


class Registration(Protocol):
    """The registration with one relay, the publisher's key and the profiles' identities."""

    async def load_config(self) -> RelayConfig | None:
        """The registration; None when absent or not version 2; `CorruptStateError` if invalid."""

    async def save_config(
        self, config: RelayConfig, *, expected_generation: int | None = None
    ) -> None:
        """Replace the registration and its whole profile map; its key must be saved already.
        With `expected_generation`, only if the stored registration is still that one (0: none
        is stored); otherwise `StaleConfigError`, and nothing changes."""

    async def forget_registration(self, *, expected_generation: int | None) -> None:
        """Forget the registration and its profile map, so the server can pair again: only if
        the stored one is still `expected_generation` (0: none is stored, and nothing changes;
        None: whatever is stored, an unreadable one too), otherwise `StaleConfigError` and
        nothing changes. Its key stays until `delete_key`; identities stay. A registration
        saved later never has a generation the forgotten one had."""

    async def save_key(self, key_id: str, pem: str) -> str:
        """Store the publisher's PKCS#8 PEM durably and return the reference a config names.
        Under this process's key passphrase it is stored encrypted; an encrypted PEM as it is."""

    async def delete_key(self, ref: str) -> bool:
        """Remove a key no registration names (a registration that lost a race); True if removed."""

    async def load_key(self, ref: str) -> str:
        """The unencrypted PEM saved under `ref`; `CorruptStateError` when it is missing or
        unreadable, `KeyPassphraseError` when it is encrypted under another passphrase, or none."""

    async def stored_key(self, ref: str) -> str:
        """The PEM saved under `ref` as it is stored (encrypted, if it was): what a copy carries."""

    async def rekey(self, passphrase: Passphrase | None) -> int:
        """Store every key anew under `passphrase` (None: unencrypted), all in one transaction;
        the number of keys. Keys are opened with this process's passphrase; if one does not open
        (and is not under `passphrase` already), `KeyPassphraseError` and nothing changes."""

    async def profile_identity(self, profile: str) -> str:
        """Get, or mint once for every caller anywhere, the profile's `pfi_<32 hex>` identity."""

    async def forget_profile_identity(self, profile: str) -> None:
        """Drop a deleted profile's identity, so a profile recreated under its name is new."""

    async def identities(self) -> dict[str, str]:
        """Every valid stored identity by profile, minting none. A JSON store that keeps
        identities in profile homes knows only the registration's."""


class Revisions(Protocol):
    """The one revision counter every replica draws from."""

    async def allocate_revisions(self, count: int, now_ms: int) -> list[int]:
        """`count` increasing revisions no other caller gets; the first is max(floor + 1, now)."""

    async def revision_floor(self) -> int:
        """The last revision handed out; 0 when none was."""


class StartedLedger(Protocol):
    """Sessions seen starting, per relay scope, and which of them were announced."""

    async def track_started(self, profile_ids: Iterable[str], now_ms: int) -> None:
        """Give each scope without a ledger a floor of now: earlier sessions are never announced."""

    async def record_started_scopes(
        self, seen: Mapping[str, Iterable[tuple[str, int]]], now_ms: int
    ) -> None:
        """For each scope of `seen` (profile_id -> (session_id, started_at) pairs), in one
        transaction: prune entries older than max(floor, now - 24 h), then add the unseen pairs
        not before that cutoff (the first of an id wins; an invalid pair is passed over)."""

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
        """Mark the `sent` (profile_id, session_id) pairs announced, then lease the unsent
        entries of the `profile_ids` scopes to `owner` until now + `lease_ms`: one transaction.
        Entries go scope by scope in the order listed, each scope's oldest first, and come back in
        that order; `limit` counts them all. An entry another owner holds is passed over until its
        lease ends; the owner's own are claimed again (a renewal). With no scope listed, nothing
        is claimed: the marks alone (a pair naming no entry is passed over)."""

    async def started_ledger(self) -> list[StartedScope]:
        """Every scope's floor and entries, ordered by scope and then oldest first."""


class DeletedOutbox(Protocol):
    """Deleted sessions whose acknowledgement the relay has not taken yet."""

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
        """Queue a deleted session's acknowledgement once per (session, profile). An entry
        already queued keeps its id, identity and scope; its `through` rises to now only while
        the session still has data (`session_live`)."""

    async def bind_deleted(self, profile: str, identity: str, scope: DeletedScope) -> int:
        """Bind the profile's unbound entries (no identity, or this one) to a relay scope, once."""

    async def pending_deleted(self) -> list[DeletedView]:
        """Every queued deletion, oldest `through` first."""

    async def claim_deleted(
        self, owner: str, now_ms: int, lease_ms: int, limit: int | None = None
    ) -> list[DeletedView]:
        """Lease queued deletions, oldest `through` first, to `owner` until now + `lease_ms`,
        as `StartedLedger.claim_started_scopes` leases entries."""

    async def ack_deleted(self, view_id: str, through: int) -> bool:
        """Remove the entry only if it is still the one acknowledged (same id and `through`)."""


class PresenceLeases(Protocol):
    """Browser tabs' presence leases, fenced by their sequence numbers."""

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
        recently updated one is evicted."""

    async def presence_active(self, profile: str, now_ms: int) -> bool:
        """Whether any tab of the profile holds an active, unexpired lease."""

    async def presence_leases(self) -> list[PresenceLease]:
        """Every stored entry, expired or not, most recently updated first."""


class RunStates(Protocol):
    """Each session's newest turn, shared so every replica publishes the same truth for it.

    The replica hosting a turn owns its row and keeps its lease; a row whose owner stops renewing
    is taken over by another replica, and a turn still live in it ends as `failed`. A session's
    row never goes back to an older turn: a pruned row's turn is remembered a day
    (`relay.store.requests.TURN_MEMORY_MS`), and only a newer turn is stored after it."""

    async def release_runs(self, owner: str) -> None:
        """`owner`'s snapshots are out: rows it was sending may now be sent by whoever owns them."""

    async def retire_runs(self, owner: str, now_ms: int) -> None:
        """`owner` is stopping: the leases of its finished turns' rows end at `now_ms`, and its
        sending marks go, so another replica takes them over at once. A live turn's row keeps
        its lease: its turn may still end where it runs."""

    async def run_states(self) -> list[RunState]:
        """Every stored run, by session."""


class LeaseWatch(Protocol):
    """An idle replica's view of every aggregate's leases: its own renewed, others' next end."""

    async def keep_alive(self, owner: str, now_ms: int, lease_ms: int) -> int | None:
        """Renew `owner`'s run leases; when the first lease another owner holds ends, if any.
        Leases counted: runs, and claims on unsent announcements and queued deletions, that end
        after `now_ms - lease_ms`: one that ended within the last lease is still reported (due
        now), as a replica whose clock runs a little behind the taker's may have found it not
        yet ended at its end. The owner's fleet row is renewed too (seen now, live until the
        leases' end)."""


class Passes(Protocol):
    """A publishing pass's store work: one read before it, one write transaction, whatever the
    number of profiles. Each is what the methods it stands for would answer, read or do."""

    async def pass_view(
        self, owner: str, profiles: Iterable[str], scopes: Iterable[str], now_ms: int
    ) -> PassView:
        """In one read: the registration's generation; each of `profiles`' identity (minting
        none) and presence; whether `owner` would claim anything from the deleted outbox now;
        which of `scopes` hold unsent announcements `owner` would claim now, and which have no
        ledger yet. Nothing changes."""

    async def pass_write(
        self,
        owner: str,
        live: Iterable[RunState],
        now_ms: int,
        *,
        lease_ms: int,
        retention_ms: int,
        member: FleetMember | None = None,
    ) -> PassRows:
        """One publishing pass's write of the runs, and a revision for each row it returns, in
        one transaction: `rows` are the rows `owner` publishes, oldest first.

        Saves `live` (its hosted turns), each unless the session has a newer turn or this turn has
        ended (a session whose row was pruned takes only a turn newer than the pruned one); a live
        row of the owner's that `live` does not confirm (a newest turn its host dropped without an
        outcome) ends as `failed`, as of now; renews the owner's leases; takes over rows whose
        lease ended; forgets finished turns that ended more than `retention_ms` ago, remembering
        each one's turn; marks the owned rows as being sent by `owner` for a lease, except one
        another replica is still sending (`RunState.sent_elsewhere`), which the owner publishes
        once that send is done.

        The revisions are what `allocate_revisions(len(rows), now_ms)` would hand out; none when
        no row is returned. When they would pass 2^53-1, `CorruptStateError`, and nothing
        changes (not the runs either). `member`: the owner's fleet row, written in the same
        transaction (`Fleet.record_member` without the prune)."""


class Backlogs(Protocol):
    """The work waiting, counted in the store: bounded reads for the operator page."""

    async def backlog(self) -> Backlog:
        """Unsent announcements per scope, unacknowledged deletions per profile and claims per
        owner, each with its oldest; aggregate reads whose answer does not grow with the ledger."""


class Fleet(Protocol):
    """Every running service as it recorded itself (`relay.store.fleet`)."""

    async def record_member(self, member: FleetMember) -> None:
        """Write `member`'s row (its owner's, replacing the one it had), and delete the rows last
        seen more than a day (`FORGET_MS`) before it. `keep_alive` renews the row's `seen_at`
        and `live_until` with the leases; `pass_write` writes it whole."""

    async def fleet(self) -> list[FleetMember]:
        """Every recorded service, live or not (`FleetMember.live`), by owner. A row a newer
        release wrote is read without the fields this code does not know; a row that is not a
        member is a `CorruptStateError` naming it. A SQL database below 0007 has none."""


class StateTransfer(Protocol):
    """Folding in state copied from another store."""

    async def merge_state(self, batch: StateBatch) -> None:
        """Fold in state copied from another store; merging the same batch again changes nothing.
        Identities are added where the profile has none; the revision floor becomes the larger;
        a scope keeps the lower floor and an entry stays sent once either side sent it; a deletion
        keeps its id, the later `through` and whichever binding it has; a lease takes the higher
        sequence. Claims are not copied."""


class RelayStore(
    Handle,
    Registration,
    Revisions,
    StartedLedger,
    DeletedOutbox,
    PresenceLeases,
    RunStates,
    LeaseWatch,
    Passes,
    Fleet,
    StateTransfer,
    Backlogs,
    Protocol,
):
    """All relay state."""
