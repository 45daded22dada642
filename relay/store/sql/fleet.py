"""The fleet on SQL: one upsert per service (with the prune of rows unseen for a day), a renewal
that rides on `keep_alive`'s transaction, the row that rides on `pass_write`'s batch, a read.

Only the columns this code knows are read or written: a newer release's extra columns are left
alone. A database below 0007 has no `relay_fleet`: the backend then records nothing
(`has_fleet`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sqlalchemy import delete, select, update

from relay.errors import CorruptStateError, InvalidInputError
from relay.store.fleet import FIELDS, FORGET_MS, FleetMember
from relay.store.sql import schema as t
from relay.store.sql.compat import COMPAT_SINCE, later
from relay.store.sql.dialect import Compiled, Dialect, Row, bind
from relay.store.sql.drivers.runner import Runner, Tx


@dataclass(frozen=True, slots=True)
class Statements:
    prune: Compiled
    upsert: Compiled
    renew: Compiled
    members: Compiled


@functools.cache
def statements(d: Dialect) -> Statements:
    """The fleet's statements, compiled once for `d`."""
    f = t.fleet.c
    insert = d.insert(t.fleet).values({name: bind(f[name]) for name in FIELDS})
    return Statements(
        prune=d.compile(delete(t.fleet).where(f.seen_at < bind(f.seen_at, "cutoff"))),
        upsert=d.compile(
            insert.on_conflict_do_update(
                index_elements=[f.owner],
                set_={name: insert.excluded[name] for name in FIELDS if name != "owner"},
            )
        ),
        renew=d.compile(
            update(t.fleet)
            .where(f.owner == bind(f.owner))
            .values(seen_at=bind(f.seen_at, "now"), live_until=bind(f.live_until, "until"))
        ),
        members=d.compile(select(*(f[name] for name in FIELDS)).order_by(f.owner)),
    )


def has_fleet(revision: str | None) -> bool:
    """Whether a database at `revision` has `relay_fleet` (0007 on)."""
    return revision is not None and not later(COMPAT_SINCE, revision)


async def upsert(tx: Tx, d: Dialect, member: FleetMember) -> None:
    """Write `member`'s row inside a transaction the caller holds."""
    await tx.run(statements(d).upsert, member.document())


async def renew(tx: Tx, d: Dialect, owner: str, now_ms: int, until: int) -> None:
    """Move `owner`'s row to seen now, live until `until`, inside the caller's transaction."""
    await tx.run(statements(d).renew, {"owner": owner, "now": now_ms, "until": until})


async def record_member(db: Runner, member: FleetMember) -> None:
    q = statements(db.dialect)

    async def body(tx: Tx) -> None:
        await tx.run(q.prune, {"cutoff": member.seen_at - FORGET_MS})
        await tx.run(q.upsert, member.document())

    await db.write(body)


async def members(db: Runner) -> list[FleetMember]:
    q = statements(db.dialect).members

    return [member(row) for row in await db.read(lambda tx: tx.rows(q))]


def member(row: Row) -> FleetMember:
    """A stored row as a `FleetMember`; one that is not a `CorruptStateError` naming it."""
    try:
        return FleetMember(*row)
    except (InvalidInputError, TypeError) as error:
        raise CorruptStateError(f"fleet row {row[0]!r} is invalid: {error}") from None
