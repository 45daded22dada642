"""`Store`: the one class that implements `RelayStore`, holding a `Backend` that stores.

It checks every value on its way in (before any backend code runs) and on its way out: a record
read back that fails its checks is stored state gone bad, a `CorruptStateError`. Keys are sealed
under this process's passphrase on their way in and opened on their way out, so every backend
behaves the same. Each public method is timed into `relay.store.transaction.duration`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace

from relay import metrics
from relay.errors import CorruptStateError, InvalidInputError
from relay.protocol import MAX_SAFE_INTEGER
from relay.store import checks, records
from relay.store.backend import (
    Backend,
    Binding,
    Deletion,
    PresenceUpdate,
    RunSync,
    Sightings,
    StartedClaim,
    ViewQuery,
)
from relay.store.checks import read
from relay.store.contract import RelayStore
from relay.store.fleet import FleetMember
from relay.store.keys import pkcs8
from relay.store.keys.keyring import Keyring, Passphrase, configured_passphrase
from relay.store.keys.pem import checked_pem, stored_pem
from relay.store.records import OWNER_LIMIT, DeletedScope, DeletedView, PassRows, RunState
from relay.store.requests import claim, names, run_sync, scope_session, sightings

PAST_THE_CAP = "the revision counter would pass 2^53-1; nothing was handed out"


@metrics.timed_methods(
    RelayStore, skip=("close", "display_url", "backend_name", "schema_revision", "unwritable")
)
class Store:
    """Relay state on one `Backend` (`relay.store.open_store` makes one from a URL): a
    `RelayStore` structurally (checked below), its MRO its own and `object`."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend  # for what only one kind offers (a SQL store's `stats`)
        # The process's passphrase, read when this store first handles a key.
        self._keys: Keyring | None = None

    @property
    def display_url(self) -> str:
        return self.backend.display_url

    @property
    def backend_name(self) -> str:
        return self.backend.name

    async def schema_revision(self) -> str | None:
        return await self.backend.schema_revision()

    async def unwritable(self) -> str | None:
        return await self.backend.unwritable()

    async def clock_ms(self) -> int | None:
        return await self.backend.clock_ms()

    def bound_waits(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
            raise InvalidInputError("seconds must be a positive number: bound_waits(6.0)")
        self.backend.bound_waits(float(seconds))

    async def close(self) -> None:
        await self.backend.close()

    async def load_config(self) -> records.RelayConfig | None:
        return await read("relay registration", self.backend.load_config())

    async def save_config(
        self, config: records.RelayConfig, *, expected_generation: int | None = None
    ) -> None:
        checks.instance("config", config, records.RelayConfig)
        if expected_generation is not None:
            checks.int64("expected_generation", expected_generation)
        await self.backend.save_config(config, expected_generation)

    async def forget_registration(self, *, expected_generation: int | None) -> None:
        if expected_generation is not None:
            checks.int64("expected_generation", expected_generation)
        await self.backend.forget_config(expected_generation)

    async def profile_identity(self, profile: str) -> str:
        checks.text("profile", profile)
        stored = await self.backend.profile_identity(profile)
        if stored is None:
            stored = await self.backend.mint_identity(profile, f"pfi_{uuid.uuid4().hex}")
        if not checks.is_identity(stored):
            raise CorruptStateError(f"stored identity of profile {profile!r} is invalid")
        return stored

    async def forget_profile_identity(self, profile: str) -> None:
        await self.backend.forget_identity(checks.text("profile", profile))

    async def identities(self) -> dict[str, str]:
        stored = await self.backend.identities()
        return {p: i for p, i in stored.items() if checks.is_identity(i)}

    def _keyring(self) -> Keyring:
        if self._keys is None:
            self._keys = Keyring(configured_passphrase())
        return self._keys

    async def save_key(self, key_id: str, pem: str) -> str:
        checks.text("key_id", key_id)
        keyring, pem = self._keyring(), checked_pem(pem)
        if keyring.passphrase is not None:
            # Off the event loop: scrypt takes a good part of a second, on purpose.
            pem = await asyncio.to_thread(keyring.seal, pem)
        return await self.backend.save_key(key_id, pem)

    async def delete_key(self, ref: str) -> bool:
        return await self.backend.delete_key(checks.text("key reference", ref))

    async def stored_key(self, ref: str) -> str:
        return await self._checked_key(checks.text("key reference", ref))

    async def load_key(self, ref: str) -> str:
        # Not through `stored_key`: each public method is timed once (`relay.metrics`).
        stored = await self._checked_key(checks.text("key reference", ref))
        keyring = self._keyring()
        if not pkcs8.is_encrypted(stored):
            return keyring.open(stored, ref)  # nothing to derive: no thread
        return await asyncio.to_thread(keyring.open, stored, ref)

    async def rekey(self, passphrase: Passphrase | None) -> int:
        if passphrase is not None and not isinstance(passphrase, Passphrase):
            raise InvalidInputError("passphrase must be a Passphrase or None")
        target = Keyring(passphrase)
        # Keys are derived inside the transaction (about a second a key): rekey is a rare
        # operator's command, and all or nothing matters more than a short lock.
        count = await self.backend.rekey(self._keyring().resealer(target))
        self._keys = target  # this handle now reads the keys as they are stored
        return count

    async def _checked_key(self, ref: str) -> str:
        pem = await self.backend.load_key(ref)
        if pem is None:
            raise CorruptStateError(f"Talaria publisher key {ref!r} is missing")
        return stored_pem(ref, pem)

    async def allocate_revisions(self, count: int, now_ms: int) -> list[int]:
        checks.safe_int("count", count)
        if count > checks.MAX_BATCH:
            raise InvalidInputError(f"count may be at most {checks.MAX_BATCH}")
        checks.time_ms("now_ms", now_ms)
        if count == 0:
            return []
        last = await self.backend.allocate_revisions(count, now_ms)
        if last is None:
            raise CorruptStateError(PAST_THE_CAP)
        return list(_revisions(count, last))

    async def revision_floor(self) -> int:
        floor = await self.backend.revision_floor()
        if type(floor) is not int or floor > MAX_SAFE_INTEGER:
            raise CorruptStateError(f"stored revision floor {floor!r} is invalid")
        # A negative floor reads as 0 rather than failing the pass: allocation starts at
        # max(floor + 1, now), so it cannot repeat a revision. One past 2^53-1 is refused above:
        # no revision after it would be exact in the viewer's JavaScript.
        return max(floor, 0)

    async def track_started(self, profile_ids: Iterable[str], now_ms: int) -> None:
        scopes = names("profile_id", profile_ids, "profile_ids")
        checks.time_ms("now_ms", now_ms)
        if scopes:
            await self.backend.track_started(scopes, now_ms)

    async def record_started_scopes(
        self, seen: Mapping[str, Iterable[tuple[str, int]]], now_ms: int
    ) -> None:
        scopes = {
            checks.text("profile_id", p): sightings(s)
            for p, s in checks.mapping("seen", seen).items()
        }
        checks.time_ms("now_ms", now_ms)
        if scopes:
            await self.backend.record_started(Sightings(scopes, now_ms))

    async def claim_started_scopes(
        self,
        profile_ids: Iterable[str],
        owner: str,
        now_ms: int,
        lease_ms: int,
        limit: int | None = None,
        *,
        sent: Iterable[tuple[str, str]] = (),
    ) -> list[records.StartedEntry]:
        scopes = names("profile_id", profile_ids, "profile_ids")
        lease = claim(owner, now_ms, lease_ms, limit)
        marks = tuple(dict.fromkeys(scope_session(pair) for pair in checks.items("sent", sent)))
        if not scopes and not marks:
            return []
        request = StartedClaim(scopes, lease, marks)
        return await read("started entry", self.backend.claim_started(request))

    async def started_ledger(self) -> list[records.StartedScope]:
        return await read("started ledger", self.backend.started_ledger())

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
        new = DeletedView(str(uuid.uuid4()), session_id, profile, now_ms, identity, scope)
        return await read("deleted view", self.backend.enqueue_deleted(Deletion(new, session_live)))

    async def bind_deleted(self, profile: str, identity: str, scope: DeletedScope) -> int:
        checks.text("profile", profile)
        checks.text("identity", identity)
        checks.instance("scope", scope, DeletedScope)
        return await self.backend.bind_deleted(Binding(profile, identity, scope))

    async def pending_deleted(self) -> list[DeletedView]:
        return await read("deleted outbox", self.backend.pending_deleted())

    async def backlog(self) -> records.Backlog:
        return await read("backlog", self.backend.backlog())

    async def claim_deleted(
        self, owner: str, now_ms: int, lease_ms: int, limit: int | None = None
    ) -> list[DeletedView]:
        lease = claim(owner, now_ms, lease_ms, limit)
        return await read("deleted view", self.backend.claim_deleted(lease))

    async def ack_deleted(self, view_id: str, through: int) -> bool:
        checks.text("view id", view_id)
        checks.time_ms("through", through)
        return await self.backend.ack_deleted(view_id, through)

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
        now_ms = checks.time_ms("now_ms", now_ms)
        until = checks.until("presence lease", now_ms, checks.safe_int("lease_ms", lease_ms, 1))
        lease = records.PresenceLease(profile, tab_id, seq, active, until, now_ms)
        checks.until("presence fence", lease.expires_at, checks.time_ms("fence_ms", fence_ms))
        if not 1 <= checks.safe_int("max_tabs", max_tabs, 1) <= checks.MAX_BATCH:
            raise InvalidInputError(f"max_tabs must be an integer in 1..{checks.MAX_BATCH}")
        return await self.backend.apply_presence(PresenceUpdate(lease, fence_ms, max_tabs))

    async def presence_active(self, profile: str, now_ms: int) -> bool:
        checks.text("profile", profile)
        checks.time_ms("now_ms", now_ms)
        return await self.backend.presence_active(profile, now_ms)

    async def presence_leases(self) -> list[records.PresenceLease]:
        return await read("presence lease", self.backend.presence_leases())

    async def keep_alive(self, owner: str, now_ms: int, lease_ms: int) -> int | None:
        expiry = await self.backend.keep_alive(claim(owner, now_ms, lease_ms, None))
        return None if expiry is None else await read("lease", _checked_end(expiry))

    async def release_runs(self, owner: str) -> None:
        await self.backend.release_runs(checks.text("owner", owner, OWNER_LIMIT))

    async def retire_runs(self, owner: str, now_ms: int) -> None:
        checks.text("owner", owner, OWNER_LIMIT)
        await self.backend.retire_runs(owner, checks.time_ms("now_ms", now_ms))

    async def run_states(self) -> list[RunState]:
        return await read("run", self.backend.run_states())

    async def pass_view(
        self, owner: str, profiles: Iterable[str], scopes: Iterable[str], now_ms: int
    ) -> records.PassView:
        checks.text("owner", owner, OWNER_LIMIT)
        query = ViewQuery(owner, names("profile", profiles), names("profile_id", scopes), now_ms)
        checks.time_ms("now_ms", now_ms)
        return await read("pass view", self._view(query))

    async def _view(self, query: ViewQuery) -> records.PassView:
        return (await self.backend.pass_view(query)).view(query)

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
        sync = run_sync(owner, live, now_ms, lease_ms, retention_ms)
        if member is not None:
            checks.instance("member", member, FleetMember)
            if member.owner != owner:
                raise InvalidInputError(f"the fleet row of {member.owner!r} is not {owner!r}'s")
            sync = replace(sync, member=member)
        return await read("run", self._write(sync))

    async def _write(self, sync: RunSync) -> PassRows:
        written = await self.backend.pass_write(sync)
        if written is None:
            raise CorruptStateError(PAST_THE_CAP)
        rows, last = written
        if not rows:
            return PassRows((), range(0))
        return PassRows(tuple(rows), _revisions(len(rows), last))

    async def record_member(self, member: FleetMember) -> None:
        await self.backend.record_member(checks.instance("member", member, FleetMember))

    async def fleet(self) -> list[FleetMember]:
        found = await read("fleet row", self.backend.fleet())
        return sorted(found, key=lambda member: member.owner)  # one order, whatever the collation

    async def merge_state(self, batch: records.StateBatch) -> None:
        await self.backend.merge_state(checks.instance("batch", batch, records.StateBatch))


def _revisions(count: int, last: object) -> range:
    """The `count` revisions ending at the stored floor `last`, checked."""
    if type(last) is not int or not count <= last <= MAX_SAFE_INTEGER:
        raise CorruptStateError(f"stored revision floor {last!r} is invalid")
    return range(last - count + 1, last + 1)


async def _checked_end(expiry: object) -> int:
    return checks.time_ms("lease end", expiry)


# mypy proves here that `Store` is a `RelayStore`, method by method.
_CONFORMS: type[RelayStore] = Store
