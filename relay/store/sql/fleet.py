"""The fleet on SQL: one upsert per service (with the prune of rows unseen for a day), a renewal
that rides on `keep_alive`'s transaction, the row that rides on `pass_write`'s batch, a read.

Only the columns this code knows are read or written: a newer release's extra columns are left
alone; below 0009 (`ring=False`) neither `clock_offset_ms` nor `passes`.
"""

from __future__ import annotations

import functools

from sqlalchemy import delete, select, update

from relay.errors import CorruptStateError, InvalidInputError
from relay.store.fleet import BEFORE_RING, FIELDS, FORGET_MS, FleetMember
from relay.store.sql import schema as t
from relay.store.sql.dialect import Dialect, bind
from relay.store.sql.drivers.runner import Runner, Tx

# The first revision whose `relay_fleet` has the clock offset and the passes.
RING_SINCE = "0009"


@functools.cache
class Statements:
    """With `ring`, on the columns 0009 added too."""

    def __init__(self, d: Dialect, ring: bool = True) -> None:
        f = t.fleet.c
        names = FIELDS if ring else BEFORE_RING
        insert = d.insert(t.fleet).values({name: bind(f[name]) for name in names})
        self.prune = d.compile(delete(t.fleet).where(f.seen_at < bind(f.seen_at, "cutoff")))
        self.upsert = d.compile(
            insert.on_conflict_do_update(
                index_elements=[f.owner],
                set_={name: insert.excluded[name] for name in names if name != "owner"},
            )
        )
        self.renew = d.compile(
            update(t.fleet)
            .where(f.owner == bind(f.owner))
            .values(seen_at=bind(f.seen_at, "now"), live_until=bind(f.live_until, "until"))
        )
        self.members = d.compile(select(*(f[name] for name in names)).order_by(f.owner))


def values(member: FleetMember, ring: bool = True) -> dict[str, object]:
    document = member.document()
    return {name: document[name] for name in (FIELDS if ring else BEFORE_RING)}


async def record_member(db: Runner, member: FleetMember, *, ring: bool = True) -> None:
    q = Statements(db.dialect, ring)

    async def body(tx: Tx) -> None:
        await tx.run(q.prune, {"cutoff": member.seen_at - FORGET_MS})
        await tx.run(q.upsert, values(member, ring))

    await db.write(body)


async def members(db: Runner, *, ring: bool = True) -> list[FleetMember]:
    """The stored rows; one that is no `FleetMember` is a `CorruptStateError` naming it. A row an
    older release wrote has no passes (NULL): none recorded."""
    q = Statements(db.dialect, ring).members
    found = []
    for row in await db.read(lambda tx: tx.rows(q)):
        fields = dict(zip(FIELDS, row, strict=False))
        if fields.get("passes", "") is None:
            fields["passes"] = ""
        try:
            found.append(FleetMember(**fields))
        except (InvalidInputError, TypeError) as error:
            raise CorruptStateError(f"fleet row {row[0]!r} is invalid: {error}") from None
    return found
