"""Merging copied state on SQL: every rule of `StateTransfer.merge_state` in one transaction."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import and_, bindparam, or_, select, update

from relay.store.records import StartedEntry, StartedScope, StateBatch
from relay.store.sql import presence
from relay.store.sql import schema as t
from relay.store.sql.dialect import Dialect, bind
from relay.store.sql.drivers.runner import Call, Many, Runner, Tx, first
from relay.store.sql.outbox import BINDING, VIEW_COLUMNS, columns

ENTRY_COLUMNS = ("profile_id", "session_id", "started_at", "sent")


def _values(table: Any, *keys: str) -> dict[str, Any]:
    return {key: bind(table.c[key]) for key in keys}


@functools.cache
class Statements:
    def __init__(self, d: Dialect) -> None:
        s, r, sc, dl = t.started.c, t.revision.c, t.started_scopes.c, t.deleted.c
        floor = d.insert(t.revision).values(id=1, **_values(t.revision, "floor"))
        scope = d.insert(t.started_scopes).values(_values(t.started_scopes, "profile_id", "floor"))
        entry = d.insert(t.started).values(_values(t.started, *ENTRY_COLUMNS))
        same = and_(dl.session_id == bindparam("session_id"), dl.profile == bindparam("profile"))
        changes = ("through", *BINDING)
        self.identity = d.compile(
            d.insert(t.identities)
            .values(_values(t.identities, "profile", "identity"))
            .on_conflict_do_nothing(index_elements=[t.identities.c.profile])
        )
        self.floor = d.compile(
            floor.on_conflict_do_update(
                index_elements=[r.id], set_={"floor": d.greatest(r.floor, floor.excluded.floor)}
            )
        )
        self.scope = d.compile(
            scope.on_conflict_do_update(
                index_elements=[sc.profile_id],
                set_={"floor": d.least(sc.floor, scope.excluded.floor)},
            )
        )
        self.entry = d.compile(
            entry.on_conflict_do_update(
                index_elements=[s.profile_id, s.session_id],
                set_={"sent": or_(s.sent, entry.excluded.sent)},
            )
        )
        self.deleted = d.compile(select(*(dl[k] for k in changes)).where(same))
        self.insert_deleted = d.compile(
            t.deleted.insert().values(_values(t.deleted, *VIEW_COLUMNS))
        )
        self.update_deleted = d.compile(
            update(t.deleted).where(same).values(_values(t.deleted, *changes))
        )
        self.lease = d.compile(presence.upsert(d))


def entry_values(entry: StartedEntry) -> dict[str, Any]:
    """A started entry's columns as a merge inserts it (its claim is not copied)."""
    return {column: getattr(entry, column) for column in ENTRY_COLUMNS}


def ledger_steps(d: Dialect, scope: StartedScope) -> tuple[Call, Many]:
    """A scope's ledger merged in: its floor, then its entries."""
    q = Statements(d)
    floor = {"profile_id": scope.profile_id, "floor": scope.floor}
    return (q.scope, floor), (q.entry, [entry_values(e) for e in scope.entries])


async def merge_state(db: Runner, batch: StateBatch) -> None:
    q = Statements(db.dialect)
    identities = [{"profile": k, "identity": v} for k, v in batch.identities.items()]
    scopes = [{"profile_id": x.profile_id, "floor": x.floor} for x in batch.started]
    entries = [entry_values(e) for scope in batch.started for e in scope.entries]
    leases = [presence.lease_values(x) for x in batch.presence]

    async def body(tx: Tx) -> None:
        if identities:
            await tx.many(q.identity, identities)
        await tx.run(q.floor, {"floor": batch.revision_floor})
        if scopes:
            await tx.many(q.scope, scopes)
        if entries:
            await tx.many(q.entry, entries)
        for entry in batch.deleted:
            incoming = columns(entry)
            existing = await first(tx, q.deleted, incoming)
            if existing is None:
                await tx.run(q.insert_deleted, incoming)
                continue
            changes = {**incoming, "through": max(existing[0], incoming["through"])}
            # The entry already queued for this session keeps its id and any binding it has.
            if existing[2] is not None or incoming["scope_url"] is None:
                changes |= dict(zip(BINDING, existing[1:], strict=True))
            await tx.run(q.update_deleted, changes)
        if leases:
            await tx.many(q.lease, leases)

    await db.write(body)
