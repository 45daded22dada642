"""The deleted-session outbox on SQL: one row per (session, profile), acknowledged by id."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import delete, or_, select, update

from relay.store.backend import Binding, Claim, Deletion
from relay.store.records import DeletedScope, DeletedView
from relay.store.sql import schema as t
from relay.store.sql.claims import claim, claim_params
from relay.store.sql.dialect import Compiled, Dialect, Row, bind
from relay.store.sql.drivers.runner import Call, Runner

# What binds an entry to a registration (`bind_deleted`); an unbound entry's scope is NULL.
BINDING = ("identity", "scope_url", "scope_publisher_id", "scope_profile_id")
VIEW_COLUMNS = ("id", "session_id", "profile", "through", *BINDING)


@functools.cache
class Statements:
    def __init__(self, d: Dialect) -> None:
        c = t.deleted.c
        # The record's columns; the claim columns are the outbox's own bookkeeping.
        record = [c[name] for name in VIEW_COLUMNS]
        insert = d.insert(t.deleted).values({column: bind(column) for column in record})

        def enqueue(through: Any) -> Compiled:
            # A queued entry keeps its id and binding; only `through` may move.
            return d.compile(
                insert.on_conflict_do_update(
                    index_elements=[c.session_id, c.profile], set_={"through": through}
                ).returning(*record)
            )

        # A session that still has data pushes `through` forward, so the acknowledgement
        # covers runs that finished since.
        self.enqueue_live = enqueue(d.greatest(c.through, insert.excluded.through))
        self.enqueue_gone = enqueue(c.through)
        self.bind = d.compile(
            update(t.deleted)
            .where(
                c.profile == bind(c.profile),
                c.scope_url.is_(None),
                or_(c.identity.is_(None), c.identity == bind(c.identity)),
            )
            .values({name: bind(c[name]) for name in BINDING})
        )
        self.pending = d.compile(select(*record).order_by(c.through, c.id))
        self.claim = d.compile(
            claim(t.deleted, c.id, order_by=(c.through, c.id)).returning(*record)
        )
        self.ack = d.compile(
            delete(t.deleted).where(c.id == bind(c.id), c.through == bind(c.through))
        )


def view(row: Row) -> DeletedView:
    """A `relay_deleted` row (in table order) as a record."""
    view_id, session_id, profile, through, identity, url, publisher_id, profile_id = row
    scope = None if url is None else DeletedScope(url, publisher_id, profile_id)
    return DeletedView(view_id, session_id, profile, through, identity, scope)


def columns(entry: DeletedView) -> dict[str, Any]:
    head = {name: getattr(entry, name) for name in VIEW_COLUMNS[:4]}
    return head | bound(entry.identity, entry.scope)


def bound(identity: str | None, scope: DeletedScope | None) -> dict[str, Any]:
    """The `BINDING` column values of an entry for `identity` in `scope`."""
    found = (scope.url, scope.publisher_id, scope.profile_id) if scope else (None, None, None)
    return dict(zip(BINDING, (identity, *found), strict=True))


def enqueue_step(d: Dialect, deletion: Deletion) -> Call:
    """The upsert of a deletion; it returns the entry queued."""
    q = Statements(d)
    return q.enqueue_live if deletion.session_live else q.enqueue_gone, columns(deletion.new)


def ack_step(d: Dialect, view_id: str, through: int) -> Call:
    """The removal of entry `view_id`, if its `through` is still this one."""
    return Statements(d).ack, {"id": view_id, "through": through}


async def enqueue_deleted(db: Runner, deletion: Deletion) -> DeletedView:
    step = enqueue_step(db.dialect, deletion)
    return view((await db.write(lambda tx: tx.rows(*step), single=True))[0])


async def bind_deleted(db: Runner, binding: Binding) -> int:
    q = Statements(db.dialect).bind
    params = {"profile": binding.profile} | bound(binding.identity, binding.scope)
    return await db.write(lambda tx: tx.run(q, params), single=True)


async def pending_deleted(db: Runner) -> list[DeletedView]:
    q = Statements(db.dialect).pending
    return [view(row) for row in await db.read(lambda tx: tx.rows(q))]


async def claim_deleted(db: Runner, claim: Claim) -> list[DeletedView]:
    q, params = Statements(db.dialect).claim, claim_params(db.dialect, claim)
    claimed = [view(row) for row in await db.write(lambda tx: tx.rows(q, params), single=True)]
    return sorted(claimed, key=lambda v: (v.through, v.id))


async def ack_deleted(db: Runner, view_id: str, through: int) -> bool:
    step = ack_step(db.dialect, view_id, through)
    return bool(await db.write(lambda tx: tx.run(*step), single=True))
