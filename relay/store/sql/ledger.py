"""The session-started ledger on SQL: one row per session, so no operation reads a whole scope.

The prune filters on `(profile_id, started_at)` and the claim on unsent entries oldest first; each
has an index of its own, so both cost the same at ten entries or a hundred thousand. Recording
sightings in several scopes is three statements whatever their number (each scope's cutoff is
read by the statements themselves), and a claim across scopes is one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, false, literal, select, update

from relay.protocol import STARTED_WINDOW_MS
from relay.store.records import StartedEntry, StartedScope
from relay.store.sql import schema as t
from relay.store.sql.claims import claim, claim_params
from relay.store.sql.dialect import Compiled, Dialect, Row, bind, closed_below
from relay.store.sql.part import SqlPart
from relay.store.sql.runner import Step, Tx


@dataclass(frozen=True, slots=True)
class Statements:
    add_scope: Compiled
    prune: Compiled
    add_entry: Compiled
    claim: Compiled
    claim_listed: Compiled
    mark_sent: Compiled
    ledger: Compiled


@functools.cache
def statements(d: Dialect) -> Statements:
    """This aggregate's statements, compiled once for `d` (the bench's raw side runs them too)."""
    s, scopes = t.started.c, t.started_scopes.c
    in_scope = s.profile_id == bind(s.profile_id)
    unsent_first = (s.started_at, s.session_id)
    # Sessions before max(floor, now - 24 h) are never announced: the scope's cutoff.
    floor = select(scopes.floor).where(scopes.profile_id == bind(s.profile_id)).scalar_subquery()
    cutoff = d.greatest(floor, bind(s.started_at, "window"))
    listed = d.listed("scopes")
    return Statements(
        add_scope=d.compile(
            d.insert(t.started_scopes)
            .values(profile_id=bind(scopes.profile_id), floor=bind(scopes.floor))
            .on_conflict_do_nothing(index_elements=[scopes.profile_id])
        ),
        prune=d.compile(
            delete(t.started).where(in_scope, closed_below(s.started_at), s.started_at < cutoff)
        ),
        add_entry=d.compile(
            d.insert(t.started)
            .from_select(
                [s.profile_id, s.session_id, s.started_at, s.sent],
                # A row per sighting not before its scope's cutoff (the scope was just tracked).
                select(
                    bind(s.profile_id), bind(s.session_id), bind(s.started_at), literal(False)
                ).where(
                    scopes.profile_id == bind(s.profile_id),
                    bind(s.started_at) >= d.greatest(scopes.floor, bind(s.started_at, "window")),
                ),
            )
            .on_conflict_do_nothing(index_elements=[s.profile_id, s.session_id])
        ),
        claim=d.compile(
            claim(
                t.started, s.session_id, in_scope, s.sent == false(), order_by=unsent_first
            ).returning(*t.started.c)
        ),
        # The listed scopes' entries, scope by scope in the order listed, each oldest first.
        claim_listed=d.compile(
            claim(
                t.started,
                (s.profile_id, s.session_id),
                s.sent == false(),
                order_by=(d.rank(listed), *unsent_first),
                joined=t.started.join(listed, listed.c.value == s.profile_id),
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


def record_steps(d: Dialect, seen: Mapping[str, Mapping[str, int]], now_ms: int) -> list[Step]:
    """Track each scope of `seen`, prune it and add its sightings: straight-line statements."""
    q = statements(d)
    window = now_ms - STARTED_WINDOW_MS
    scopes = [{"profile_id": p, "floor": now_ms} for p in seen]
    prunes = [{"profile_id": p, "window": window} for p in seen]
    rows = [
        {"profile_id": p, "session_id": sid, "started_at": at, "window": window}
        for p, sightings in seen.items()
        for sid, at in sightings.items()
    ]
    steps: list[Step] = [(q.add_scope, _one_or_many(scopes)), (q.prune, _one_or_many(prunes))]
    if rows:
        steps.append((q.add_entry, _one_or_many(rows)))
    return steps


def _one_or_many(rows: list[dict[str, Any]]) -> Mapping[str, Any] | Sequence[Mapping[str, Any]]:
    # One parameter set runs as a plain statement: no executemany for a batch of one.
    return rows[0] if len(rows) == 1 else rows


class LedgerSql(SqlPart):
    """The started-ledger hooks of `StoreGate`."""

    async def _track_started(self, profile_ids: list[str], now_ms: int) -> None:
        q = statements(self._db.dialect).add_scope

        async def body(tx: Tx) -> None:
            await tx.many(q, [{"profile_id": p, "floor": now_ms} for p in profile_ids])

        await self._db.write(body, single=True)

    async def _record_started(self, profile_id: str, seen: dict[str, int], now_ms: int) -> None:
        await self._record_started_scopes({profile_id: seen}, now_ms)

    async def _record_started_scopes(self, seen: dict[str, dict[str, int]], now_ms: int) -> None:
        await self._db.batch(record_steps(self._db.dialect, seen, now_ms))

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

    async def _claim_started_scopes(
        self,
        profile_ids: list[str],
        owner: str,
        now_ms: int,
        until: int,
        limit: int | None,
        sent: list[tuple[str, str]],
    ) -> list[StartedEntry]:
        d = self._db.dialect
        q = statements(d)
        marks = [{"profile_id": p, "session_id": sid} for p, sid in sent]
        params = {
            "scopes": d.list_value(profile_ids),
            **claim_params(d, owner, now_ms, until, limit),
        }

        async def body(tx: Tx) -> list[StartedEntry]:
            if marks:
                await tx.many(q.mark_sent, marks)
            if not profile_ids:
                return []
            return [entry(row) for row in await tx.rows(q.claim_listed, params)]

        single = not marks or (not profile_ids and len(marks) == 1)
        claimed = await self._db.write(body, single=single)
        rank = {p: n for n, p in enumerate(profile_ids)}
        return sorted(claimed, key=lambda e: (rank[e.profile_id], e.started_at, e.session_id))

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
