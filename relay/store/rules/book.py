"""`RulebookBackend`: the `Backend` of the memory and JSON stores, once, over their `Documents`.

Each hook is one session of the documents (one lock), in the order of `Backend`'s sections.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from relay.errors import CorruptStateError, InvalidInputError, StaleConfigError
from relay.store import records
from relay.store.backend import (
    Binding,
    Claim,
    Deletion,
    PresenceUpdate,
    Rekeyed,
    RunSync,
    Sightings,
    StartedClaim,
    ViewQuery,
    ViewReading,
)
from relay.store.fleet import FleetMember
from relay.store.rules import backlog as backlogs
from relay.store.rules import fleet, ledger, outbox, presence, revisions
from relay.store.rules import runs as run_rules
from relay.store.rules.documents import (
    CLAIMS,
    CONFIG,
    DELETED,
    FLEET,
    FLOOR,
    FORGOTTEN,
    IDENTITIES,
    KEYS,
    PRESENCE,
    RUNS,
    STARTED,
    Documents,
    Session,
    StoredRegistration,
    readable,
)

R = TypeVar("R")


class RulebookBackend:
    """The rules on documents kept in memory or in a JSON state dir."""

    def __init__(self, documents: Documents) -> None:
        self.documents = documents
        self.name = documents.name
        self.display_url = documents.display_url

    async def schema_revision(self) -> str | None:
        return None  # documents have no schema

    async def unwritable(self) -> str | None:
        return None  # no server to ask

    async def clock_ms(self) -> int | None:
        return None  # this host's clock is the documents'

    def bound_waits(self, seconds: float) -> None:
        """Nothing to bound: no server to wait for (a JSON lock's wait is its own)."""

    async def close(self) -> None:
        await self.documents.close()

    async def _edit(self, work: Callable[[Session], R], *, write: bool = True) -> R:
        """`work` in one session: what it changed is written, or nothing if it raises."""

        def locked() -> R:
            with self.documents.session(write=write) as session:
                return work(session)

        return await self.documents.run(locked)

    async def _read(self, work: Callable[[Session], R]) -> R:
        return await self._edit(work, write=False)

    async def load_config(self) -> records.RelayConfig | None:
        return await self._read(lambda s: s.get(CONFIG).read())

    async def save_config(
        self, config: records.RelayConfig, expected_generation: int | None
    ) -> None:
        def work(s: Session) -> None:
            if self.documents.key_named(config.key_ref) not in s.get(KEYS):
                raise InvalidInputError(f"publisher key {config.key_ref!r} is not saved")
            stored = s.get(CONFIG)
            if expected_generation is not None and _shown(stored) != expected_generation:
                raise StaleConfigError("the relay registration changed since it was read")
            # A layout may keep a generation of its own (a file's mtime), rising as this does.
            generation = stored.generation + 1
            s.put(CONFIG, StoredRegistration(replace(config, generation=generation), generation))

        await self._edit(work)

    async def forget_config(self, expected_generation: int | None) -> None:
        def work(s: Session) -> None:
            stored = s.get(CONFIG)
            if expected_generation is not None and _shown(stored) != expected_generation:
                raise StaleConfigError("the relay registration changed since it was read")
            if stored.config is not None or stored.problem is not None:
                # None stored, its generation kept: the next registration's rises past it.
                s.put(CONFIG, StoredRegistration(None, stored.generation))

        await self._edit(work)

    async def save_key(self, key_id: str, pem: str) -> str:
        # One reference per key id, as on SQL: saving a key id again replaces its key.
        ref = self.documents.key_ref(key_id)
        await self._edit(lambda s: s.get(KEYS).update({ref: pem}))
        return ref

    async def load_key(self, ref: str) -> str | None:
        def work(s: Session) -> str | None:
            name, keys = self.documents.key_named(ref), s.get(KEYS)
            return None if name is None or name not in keys else _text(ref, keys[name])

        return await self._read(work)

    async def delete_key(self, ref: str) -> bool:
        def work(s: Session) -> bool:
            name, keys = self.documents.key_named(ref), s.get(KEYS)
            # An unreadable registration names no key: it cannot keep one.
            named = s.get(CONFIG).config
            if name is None or name not in keys:
                return False
            if named is not None and self.documents.key_named(named.key_ref) == name:
                return False
            del keys[name]
            return True

        return await self._edit(work)

    async def rekey(self, rekeyed: Rekeyed) -> int:
        def work(s: Session) -> int:
            keys = s.get(KEYS)
            # Every key is rekeyed before any is stored: one that raises changes none.
            changed = {ref: rekeyed(ref, _text(ref, keys[ref])) for ref in sorted(keys)}
            keys.update(changed)
            return len(changed)

        return await self._edit(work)

    async def profile_identity(self, profile: str) -> str | None:
        return await self._read(lambda s: s.get(IDENTITIES).get(profile))

    async def mint_identity(self, profile: str, minted: str) -> str:
        def work(s: Session) -> str:
            identities = s.get(IDENTITIES)
            stored = identities.get(profile)
            if stored is None:
                identities.set(profile, minted)
            return stored or minted

        return await self._edit(work)

    async def forget_identity(self, profile: str) -> None:
        await self._edit(lambda s: s.get(IDENTITIES).forget(profile))

    async def identities(self) -> dict[str, str]:
        return await self._read(lambda s: readable(ids := s.get(IDENTITIES), ids.known()))

    async def allocate_revisions(self, count: int, now_ms: int) -> int | None:
        def work(s: Session) -> int | None:
            last = revisions.allocate(s.get(FLOOR), count, now_ms)
            if last is not None:
                s.put(FLOOR, last)
            return last

        return await self._edit(work)

    async def revision_floor(self) -> int:
        return await self._read(lambda s: s.get(FLOOR))

    async def track_started(self, profile_ids: tuple[str, ...], now_ms: int) -> None:
        await self._edit(lambda s: ledger.track(s.get(STARTED), profile_ids, now_ms))

    async def record_started(self, sightings: Sightings) -> None:
        def work(s: Session) -> None:
            started = s.get(STARTED)
            for profile_id, seen in sightings.seen.items():
                ledger.record(started, profile_id, dict(seen), sightings.now_ms)

        await self._edit(work)

    async def claim_started(self, request: StartedClaim) -> list[records.StartedEntry]:
        return await self._edit(lambda s: ledger.advance(s.get(STARTED), request))

    async def started_ledger(self) -> list[records.StartedScope]:
        return await self._read(lambda s: [scope for _, scope in sorted(s.get(STARTED).items())])

    async def enqueue_deleted(self, deletion: Deletion) -> records.DeletedView:
        return await self._edit(lambda s: outbox.enqueue(s.get(DELETED), deletion))

    async def bind_deleted(self, binding: Binding) -> int:
        return await self._edit(lambda s: outbox.bind(s.get(DELETED), binding))

    async def pending_deleted(self) -> list[records.DeletedView]:
        return await self._read(lambda s: outbox.pending(s.get(DELETED)))

    async def backlog(self) -> records.Backlog:
        return await self._read(lambda s: backlogs.count(s.get(STARTED), s.get(DELETED)))

    async def claim_deleted(self, claim: Claim) -> list[records.DeletedView]:
        return await self._edit(lambda s: outbox.claim(s.get(DELETED), s.get(CLAIMS), claim))

    async def ack_deleted(self, view_id: str, through: int) -> bool:
        return await self._edit(lambda s: outbox.ack(s.get(DELETED), view_id, through))

    async def apply_presence(self, update: PresenceUpdate) -> bool:
        return await self._edit(lambda s: presence.apply(s.get(PRESENCE), update))

    async def presence_active(self, profile: str, now_ms: int) -> bool:
        return await self._read(
            lambda s: profile in presence.active_profiles(s.get(PRESENCE), now_ms)
        )

    async def presence_leases(self) -> list[records.PresenceLease]:
        return await self._read(lambda s: presence.newest_first(s.get(PRESENCE)))

    async def keep_alive(self, claim: Claim) -> int | None:
        def work(s: Session) -> int | None:
            runs = s.get(RUNS)
            run_rules.renew(runs, claim.owner, claim.until)
            fleet.renew(s.get(FLEET), claim.owner, claim.now_ms, claim.until)
            unsent = ledger.unsent(s.get(STARTED))
            held = outbox.held(s.get(DELETED), s.get(CLAIMS))
            return run_rules.next_lease_end(claim.owner, claim.watched_since, runs, unsent, held)

        return await self._edit(work)

    async def release_runs(self, owner: str) -> None:
        await self._edit(lambda s: run_rules.release(s.get(RUNS), owner))

    async def retire_runs(self, owner: str, now_ms: int) -> None:
        def work(s: Session) -> None:
            runs = s.get(RUNS)
            run_rules.retire(runs, owner, now_ms)
            run_rules.release(runs, owner)

        await self._edit(work)

    async def run_states(self) -> list[records.RunState]:
        return await self._read(lambda s: [run for _, run in sorted(s.get(RUNS).items())])

    async def pass_view(self, query: ViewQuery) -> ViewReading:
        def work(s: Session) -> ViewReading:
            owner, now_ms, started = query.owner, query.now_ms, s.get(STARTED)
            reading = ViewReading(
                deleted=outbox.any_claimable(s.get(DELETED), s.get(CLAIMS), owner, now_ms),
                active=presence.active_profiles(s.get(PRESENCE), now_ms),
                unsent=ledger.with_claimable(started, owner, now_ms),
                tracked=set(started),
                generation=_shown(s.get(CONFIG)) or None,
            )
            # Unreadable, as if none were stored: the pass asks `profile_identity`, which says why.
            with contextlib.suppress(CorruptStateError):
                reading.identities = readable(s.get(IDENTITIES), query.profiles)
            return reading

        return await self._read(work)

    async def pass_write(self, sync: RunSync) -> tuple[list[records.RunState], int] | None:
        def work(s: Session) -> tuple[list[records.RunState], int] | None:
            runs, forgotten, floor = s.get(RUNS).copy(), s.get(FORGOTTEN).copy(), s.get(FLOOR)
            rows = run_rules.sync(runs, forgotten, sync)
            last = revisions.allocate(floor, len(rows), sync.now_ms) if rows else floor
            if last is None:
                return None  # past 2^53-1: the runs stay as they were
            s.put(RUNS, runs)
            s.put(FORGOTTEN, forgotten)
            s.put(FLOOR, last)
            if sync.member is not None:
                s.get(FLEET)[sync.owner] = sync.member.document()
            return rows, last

        return await self._edit(work)

    async def record_member(self, member: FleetMember) -> None:
        await self._edit(lambda s: fleet.record(s.get(FLEET), member))

    async def fleet(self) -> list[FleetMember]:
        return await self._read(lambda s: fleet.members(s.get(FLEET)))

    async def merge_state(self, batch: records.StateBatch) -> None:
        def work(s: Session) -> None:
            identities = s.get(IDENTITIES)
            for profile, identity in batch.identities.items():
                if identities.holds(profile) and identities.get(profile) is None:
                    identities.set(profile, identity)
            s.put(FLOOR, max(s.get(FLOOR), batch.revision_floor))
            # Only the documents the batch has something for: a strict one that cannot be read
            # (the outbox) fails only a merge that would write it.
            if batch.started:
                ledger.merge(s.get(STARTED), batch.started)
            if batch.deleted:
                outbox.merge(s.get(DELETED), batch.deleted)
            if batch.presence:
                presence.merge(s.get(PRESENCE), batch.presence)

        await self._edit(work)


def _text(ref: str, pem: str | None) -> str:
    if pem is None:
        raise CorruptStateError(f"Talaria publisher key {ref!r} is not text")
    return pem


def _shown(stored: StoredRegistration) -> int:
    """The generation `load_config` shows: 0 while no registration is stored."""
    return stored.generation if stored.config is not None or stored.problem is not None else 0
