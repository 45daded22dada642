"""The session-started ledger on SQL: one row per session, so no operation reads a whole scope.

The prune filters on `(profile_id, started_at)` and the claim on unsent entries oldest first; each
has an index of its own, so both cost the same at ten entries or a hundred thousand.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sqlalchemy import delete, false, select, update

from relay.protocol import STARTED_WINDOW_MS
from relay.store.records import StartedEntry, StartedScope
from relay.store.sql import schema as t
from relay.store.sql.claims import claim, claim_params
from relay.store.sql.dialect import Compiled, Dialect, Row, bind
from relay.store.sql.part import SqlPart
from relay.store.sql.runner import Tx, scalar


@dataclass(frozen=True, slots=True)
class Statements:
    add_scope: Compiled
    scope_floor: Compiled
    prune: Compiled
    add_entry: Compiled
    claim: Compiled
    mark_sent: Compiled
    ledger: Compiled


@functools.cache
def statements(d: Dialect) -> Statements:
    """This aggregate's statements, compiled once for `d` (the bench's raw side runs them too)."""
    s, scopes = t.started.c, t.started_scopes.c
    in_scope = s.profile_id == bind(s.profile_id)
    unsent_first = (s.started_at, s.session_id)
    return Statements(
        add_scope=d.compile(
            d.insert(t.started_scopes)
            .values(profile_id=bind(scopes.profile_id), floor=bind(scopes.floor))
            .on_conflict_do_nothing(index_elements=[scopes.profile_id])
        ),
        scope_floor=d.compile(
            select(scopes.floor).where(scopes.profile_id == bind(scopes.profile_id))
        ),
        prune=d.compile(
            delete(t.started).where(in_scope, s.started_at < bind(s.started_at, "cutoff"))
        ),
        add_entry=d.compile(
            d.insert(t.started)
            .values(
                profile_id=bind(s.profile_id),
                session_id=bind(s.session_id),
                started_at=bind(s.started_at),
                sent=False,
            )
            .on_conflict_do_nothing(index_elements=[s.profile_id, s.session_id])
        ),
        claim=d.compile(
            claim(
                t.started, s.session_id, in_scope, s.sent == false(), order_by=unsent_first
            ).returning(*t.started.c)
        ),
        mark_sent=d.compile(
            update(t.started)
            .where(in_scope, s.session_id == bind(s.session_id))
            .values(sent=True, claimed_by=None, claimed_until=None)
        ),
        ledger=d.compile(
            select(scopes.profile_id, scopes.floor, *t.started.c)
            .select_from(t.started_scopes.outerjoin(t.started, s.profile_id == scopes.profile_id))
            .order_by(scopes.profile_id, s.started_at, s.session_id)
        ),
    )


def entry(row: Row) -> StartedEntry:
    """A `relay_started` row (in table order) as a record."""
    profile_id, session_id, started_at, sent, claimed_by, claimed_until = row
    return StartedEntry(profile_id, session_id, started_at, bool(sent), claimed_by, claimed_until)


class LedgerSql(SqlPart):
    """The started-ledger hooks of `StoreGate`."""

    async def _track_started(self, profile_ids: list[str], now_ms: int) -> None:
        q = statements(self._db.dialect).add_scope

        async def body(tx: Tx) -> None:
            await tx.many(q, [{"profile_id": p, "floor": now_ms} for p in profile_ids])

        await self._db.write(body, single=True)

    async def _record_started(self, profile_id: str, seen: dict[str, int], now_ms: int) -> None:
        q = statements(self._db.dialect)
        scope = {"profile_id": profile_id}

        async def body(tx: Tx) -> None:
            floor = await scalar(tx, q.scope_floor, scope)
            if floor is None:
                await tx.run(q.add_scope, {**scope, "floor": now_ms})
                floor = await scalar(tx, q.scope_floor, scope)
            cutoff = max(floor, now_ms - STARTED_WINDOW_MS)
            await tx.run(q.prune, {**scope, "cutoff": cutoff})
            rows = [
                {**scope, "session_id": sid, "started_at": at}
                for sid, at in seen.items()
                if at >= cutoff
            ]
            if rows:
                await tx.many(q.add_entry, rows)

        await self._db.write(body)

    async def _claim_started(
        self, profile_id: str, owner: str, now_ms: int, until: int, limit: int | None
    ) -> list[StartedEntry]:
        q = statements(self._db.dialect).claim
        params = {
            "profile_id": profile_id,
            **claim_params(self._db.dialect, owner, now_ms, until, limit),
        }

        async def body(tx: Tx) -> list[StartedEntry]:
            return [entry(row) for row in await tx.rows(q, params)]

        claimed = await self._db.write(body, single=True)
        return sorted(claimed, key=lambda e: (e.started_at, e.session_id))

    async def _mark_started_sent(self, profile_id: str, session_ids: list[str]) -> None:
        q = statements(self._db.dialect).mark_sent
        rows = [{"profile_id": profile_id, "session_id": sid} for sid in session_ids]

        async def body(tx: Tx) -> None:
            await tx.many(q, rows)

        await self._db.write(body, single=len(rows) == 1)

    async def _started_ledger(self) -> list[StartedScope]:
        q = statements(self._db.dialect).ledger

        async def body(tx: Tx) -> list[Row]:
            return await tx.rows(q)

        floors: dict[str, int] = {}
        entries: dict[str, list[StartedEntry]] = {}
        for row in await self._db.read(body):
            floors[row[0]] = row[1]
            if row[3] is not None:
                entries.setdefault(row[0], []).append(entry(row[2:]))
        return [StartedScope(p, floor, tuple(entries.get(p, ()))) for p, floor in floors.items()]
