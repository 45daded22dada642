"""Presence leases on SQL: a sequence-fenced upsert, then bounded eviction."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import BigInteger, and_, bindparam, delete, exists, func, not_, select, true, tuple_

from relay.store.backend import PresenceUpdate
from relay.store.records import PresenceLease
from relay.store.sql import schema as t
from relay.store.sql.dialect import Dialect, Row, bind
from relay.store.sql.drivers.runner import Runner, Tx, first, scalar


@functools.cache
class Statements:
    def __init__(self, d: Dialect) -> None:
        p = t.presence.c
        this_tab = and_(p.profile == bind(p.profile), p.tab_id == bind(p.tab_id))
        oldest = (
            select(p.profile, p.tab_id)
            .where(not_(this_tab))
            .order_by(p.updated_at, p.profile, p.tab_id)
            .limit(bindparam("excess", type_=BigInteger))
        )
        self.forget_expired = d.compile(
            delete(t.presence).where(p.expires_at + bindparam("fence_ms") <= bind(p.updated_at))
        )
        self.upsert = d.compile(upsert(d).returning(p.seq))
        self.count = d.compile(select(func.count()).select_from(t.presence))
        self.evict = d.compile(delete(t.presence).where(tuple_(p.profile, p.tab_id).in_(oldest)))
        self.active = d.compile(
            select(
                exists().where(
                    p.profile == bind(p.profile),
                    p.active == true(),
                    p.expires_at > bind(p.expires_at, "now"),
                )
            )
        )
        self.leases = d.compile(
            select(t.presence).order_by(p.updated_at.desc(), p.profile, p.tab_id)
        )


def upsert(d: Dialect) -> Any:
    """The upsert of a lease, fenced by its sequence: a stale or replayed one changes nothing."""
    p = t.presence.c
    insert = d.insert(t.presence).values({column.key: bind(column) for column in p})
    return insert.on_conflict_do_update(
        index_elements=[p.profile, p.tab_id],
        set_={k: insert.excluded[k] for k in ("seq", "active", "expires_at", "updated_at")},
        where=p.seq < insert.excluded.seq,
    )


def lease(row: Row) -> PresenceLease:
    profile, tab_id, seq, active, expires_at, updated_at = row
    return PresenceLease(profile, tab_id, seq, bool(active), expires_at, updated_at)


def lease_values(lease: PresenceLease) -> dict[str, Any]:
    """A lease as `relay_presence` column values (its fields are the columns)."""
    return {c.key: getattr(lease, c.key) for c in t.presence.c}


async def apply_presence(db: Runner, update: PresenceUpdate) -> bool:
    q, new, max_tabs = Statements(db.dialect), update.lease, update.max_tabs
    forget = {"fence_ms": update.fence_ms, "updated_at": new.updated_at}

    async def body(tx: Tx) -> bool:
        await tx.run(q.forget_expired, forget)
        if await first(tx, q.upsert, lease_values(new)) is None:
            return False
        total = await scalar(tx, q.count)
        if total > max_tabs:
            excess = {"profile": new.profile, "tab_id": new.tab_id, "excess": total - max_tabs}
            await tx.run(q.evict, excess)
        return True

    return await db.write(body)


async def presence_active(db: Runner, profile: str, now_ms: int) -> bool:
    q = Statements(db.dialect).active
    return bool(await db.read(lambda tx: scalar(tx, q, {"profile": profile, "now": now_ms})))


async def presence_leases(db: Runner) -> list[PresenceLease]:
    q = Statements(db.dialect).leases
    return [lease(row) for row in await db.read(lambda tx: tx.rows(q))]
