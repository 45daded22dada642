"""Presence leases on SQL: a sequence-fenced upsert, then bounded eviction."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sqlalchemy import BigInteger, and_, bindparam, delete, exists, func, not_, select, true, tuple_

from relay.store.backend import PresenceUpdate
from relay.store.records import PresenceLease
from relay.store.sql import schema as t
from relay.store.sql.dialect import Compiled, Dialect, Row, bind
from relay.store.sql.drivers.runner import Runner, Tx, first, scalar


@dataclass(frozen=True, slots=True)
class Statements:
    forget_expired: Compiled
    upsert: Compiled
    count: Compiled
    evict: Compiled
    active: Compiled
    leases: Compiled


@functools.cache
def statements(d: Dialect) -> Statements:
    """This aggregate's statements, compiled once for `d` (the bench's raw side runs them too)."""
    p = t.presence.c
    values = {column.key: bind(column) for column in t.presence.c}
    insert = d.insert(t.presence).values(values)
    this_tab = and_(p.profile == bind(p.profile), p.tab_id == bind(p.tab_id))
    oldest = (
        select(p.profile, p.tab_id)
        .where(not_(this_tab))
        .order_by(p.updated_at, p.profile, p.tab_id)
        .limit(bindparam("excess", type_=BigInteger))
    )
    return Statements(
        forget_expired=d.compile(
            delete(t.presence).where(p.expires_at + bindparam("fence_ms") <= bind(p.updated_at))
        ),
        upsert=d.compile(
            insert.on_conflict_do_update(
                index_elements=[p.profile, p.tab_id],
                set_={k: insert.excluded[k] for k in ("seq", "active", "expires_at", "updated_at")},
                # The sequence fence: a stale or replayed update changes nothing.
                where=p.seq < insert.excluded.seq,
            ).returning(p.seq)
        ),
        count=d.compile(select(func.count()).select_from(t.presence)),
        evict=d.compile(delete(t.presence).where(tuple_(p.profile, p.tab_id).in_(oldest))),
        active=d.compile(
            select(
                exists().where(
                    p.profile == bind(p.profile),
                    p.active == true(),
                    p.expires_at > bind(p.expires_at, "now"),
                )
            )
        ),
        leases=d.compile(select(t.presence).order_by(p.updated_at.desc(), p.profile, p.tab_id)),
    )


def lease(row: Row) -> PresenceLease:
    profile, tab_id, seq, active, expires_at, updated_at = row
    return PresenceLease(profile, tab_id, seq, bool(active), expires_at, updated_at)


async def apply_presence(db: Runner, update: PresenceUpdate) -> bool:
    q, new, fence_ms, max_tabs = (
        statements(db.dialect),
        update.lease,
        update.fence_ms,
        update.max_tabs,
    )
    values = {
        "profile": new.profile,
        "tab_id": new.tab_id,
        "seq": new.seq,
        "active": new.active,
        "expires_at": new.expires_at,
        "updated_at": new.updated_at,
    }

    async def body(tx: Tx) -> bool:
        await tx.run(q.forget_expired, {"fence_ms": fence_ms, "updated_at": new.updated_at})
        if await first(tx, q.upsert, values) is None:
            return False
        total = await scalar(tx, q.count)
        if total > max_tabs:
            excess = {"profile": new.profile, "tab_id": new.tab_id, "excess": total - max_tabs}
            await tx.run(q.evict, excess)
        return True

    return await db.write(body)


async def presence_active(db: Runner, profile: str, now_ms: int) -> bool:
    q = statements(db.dialect).active

    async def body(tx: Tx) -> bool:
        return bool(await scalar(tx, q, {"profile": profile, "now": now_ms}))

    return await db.read(body)


async def presence_leases(db: Runner) -> list[PresenceLease]:
    q = statements(db.dialect).leases

    async def body(tx: Tx) -> list[PresenceLease]:
        return [lease(row) for row in await tx.rows(q)]

    return await db.read(body)
