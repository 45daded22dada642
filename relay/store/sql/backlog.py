"""The work waiting, counted on SQL: one read of three aggregate statements.

Each count walks only the rows it counts, off an index: a scope's unsent announcements are a
range of `ix_relay_started_unsent` (profile_id, sent, …), reached scope by scope from the small
scopes table, so 100,000 announced entries cost nothing; the outbox is small by design.
"""

from __future__ import annotations

import functools

from sqlalchemy import and_, false, func, select

from relay.store.records import Backlog, Waiting
from relay.store.sql import schema as t
from relay.store.sql.dialect import Dialect
from relay.store.sql.drivers.runner import Runner, Tx


@functools.cache
class Statements:
    def __init__(self, d: Dialect) -> None:
        s, e, o = t.started_scopes, t.started, t.deleted
        unsent_of_scope = and_(e.c.profile_id == s.c.profile_id, e.c.sent == false())
        self.unsent = d.compile(
            select(s.c.profile_id, func.count(), func.min(e.c.started_at))
            .select_from(s.join(e, unsent_of_scope))
            .group_by(s.c.profile_id)
        )
        self.claims = d.compile(
            select(e.c.claimed_by, func.count(), func.max(e.c.claimed_until))
            .select_from(s.join(e, unsent_of_scope))
            .where(e.c.claimed_by.is_not(None), e.c.claimed_until.is_not(None))
            .group_by(e.c.claimed_by)
        )
        self.deleted = d.compile(
            select(o.c.profile, func.count(), func.min(o.c.through)).group_by(o.c.profile)
        )


async def backlog(db: Runner) -> Backlog:
    q = Statements(db.dialect)

    async def body(tx: Tx) -> list[dict[str, Waiting]]:
        # In `Backlog`'s order: each group's key, count and oldest.
        found = [await tx.rows(counts) for counts in (q.unsent, q.deleted, q.claims)]
        return [{row[0]: Waiting(row[1], row[2]) for row in rows} for rows in found]

    return Backlog(*await db.read(body))
