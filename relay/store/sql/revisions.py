"""The revision counter on SQL: one row, raised by a single atomic upsert."""

from __future__ import annotations

import functools

from sqlalchemy import BigInteger, bindparam, select

from relay.protocol import MAX_SAFE_INTEGER
from relay.store.sql import schema as t
from relay.store.sql.dialect import Dialect
from relay.store.sql.drivers.runner import Call, Runner, scalar


@functools.cache
class Statements:
    def __init__(self, d: Dialect) -> None:
        floor = t.revision.c.floor
        now, count = bindparam("now", type_=BigInteger), bindparam("count", type_=BigInteger)
        raised = d.greatest(floor + 1, now) + count - 1
        insert = d.insert(t.revision).values(id=1, floor=bindparam("first", type_=BigInteger))
        self.allocate = d.compile(
            insert.on_conflict_do_update(
                index_elements=[t.revision.c.id],
                set_={"floor": raised},
                # Past 2^53-1 a revision is no longer exact on the wire: hand out none.
                where=raised <= MAX_SAFE_INTEGER,
            ).returning(floor)
        )
        self.floor = d.compile(select(floor))


def allocate_step(d: Dialect, count: int, now_ms: int) -> Call | None:
    """The allocation of `count` revisions at `now_ms`; None when it would pass 2^53-1."""
    first = max(1, now_ms) + count - 1
    if first > MAX_SAFE_INTEGER:
        return None
    return Statements(d).allocate, {"first": first, "now": now_ms, "count": count}


async def allocate_revisions(db: Runner, count: int, now_ms: int) -> int | None:
    step = allocate_step(db.dialect, count, now_ms)
    if step is None:
        return None
    return await db.write(lambda tx: scalar(tx, *step), single=True)


async def revision_floor(db: Runner) -> int:
    q = Statements(db.dialect).floor
    return (await db.read(lambda tx: scalar(tx, q))) or 0
