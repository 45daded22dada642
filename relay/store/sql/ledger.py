"""The session-started ledger on SQL: one row per session, so no operation reads a whole scope.

The prune and the claim each read a range of an index of their own (`schema.started`). Recording
sightings in several scopes is three statements whatever their number (each scope's cutoff is
read by the statements themselves), and a claim across scopes is one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from sqlalchemy import delete, false, literal, select, update

from relay.protocol import STARTED_WINDOW_MS
from relay.store.backend import Claim, Sightings, StartedClaim
from relay.store.records import StartedEntry, StartedScope
from relay.store.sql import schema as t
from relay.store.sql.claims import claim, claim_params
from relay.store.sql.dialect import Dialect, Params, Row, bind, closed_below
from relay.store.sql.drivers.runner import Call, Many, Runner, Step


@functools.cache
class Statements:
    def __init__(self, d: Dialect) -> None:
        s, scopes = t.started.c, t.started_scopes.c
        in_scope = s.profile_id == bind(s.profile_id)
        # Sessions before max(floor, now - 24 h) are never announced: the scope's cutoff.
        floor = (
            select(scopes.floor).where(scopes.profile_id == bind(s.profile_id)).scalar_subquery()
        )
        cutoff = d.greatest(floor, bind(s.started_at, "window"))
        listed, rank = d.listed("scopes")
        self.add_scope = d.compile(
            d.insert(t.started_scopes)
            .values(profile_id=bind(scopes.profile_id), floor=bind(scopes.floor))
            .on_conflict_do_nothing(index_elements=[scopes.profile_id])
        )
        self.prune = d.compile(
            delete(t.started).where(in_scope, closed_below(s.started_at), s.started_at < cutoff)
        )
        self.add_entry = d.compile(
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
        )
        # The listed scopes' entries, scope by scope in the order listed, each oldest first.
        self.claim_listed = d.compile(
            claim(
                t.started,
                (s.profile_id, s.session_id),
                s.sent == false(),
                order_by=(rank, s.started_at, s.session_id),
                joined=t.started.join(listed, listed.c.value == s.profile_id),
            ).returning(*t.started.c)
        )
        self.mark_sent = d.compile(
            update(t.started)
            .where(in_scope, s.session_id == bind(s.session_id))
            .values(sent=True, claimed_by=None, claimed_until=None)
        )
        self.ledger = d.compile(
            select(scopes.profile_id, scopes.floor, *t.started.c)
            .select_from(t.started_scopes.outerjoin(t.started, s.profile_id == scopes.profile_id))
            .order_by(scopes.profile_id, s.started_at, s.session_id)
        )


def entry(row: Row) -> StartedEntry:
    """A `relay_started` row (in table order) as a record."""
    profile_id, session_id, started_at, sent, claimed_by, claimed_until = row
    return StartedEntry(profile_id, session_id, started_at, bool(sent), claimed_by, claimed_until)


def record_steps(d: Dialect, seen: Mapping[str, Mapping[str, int]], now_ms: int) -> list[Step]:
    """Track each scope of `seen`, prune it and add its sightings: straight-line statements."""
    q = Statements(d)
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


def _one_or_many(rows: Sequence[Params]) -> Params | Sequence[Params]:
    # One parameter set runs as a plain statement: no executemany for a batch of one.
    return rows[0] if len(rows) == 1 else rows


async def track_started(db: Runner, profile_ids: tuple[str, ...], now_ms: int) -> None:
    q = Statements(db.dialect).add_scope
    scopes = [{"profile_id": p, "floor": now_ms} for p in profile_ids]
    await db.write(lambda tx: tx.many(q, scopes), single=True)


async def record_started(db: Runner, sightings: Sightings) -> None:
    await db.batch(record_steps(db.dialect, sightings.seen, sightings.now_ms))


def mark_step(d: Dialect, sent: Sequence[tuple[str, str]]) -> Many:
    """The marks of these (profile_id, session_id) entries as announced."""
    return Statements(d).mark_sent, [{"profile_id": p, "session_id": sid} for p, sid in sent]


def claim_step(d: Dialect, scopes: Sequence[str], lease: Claim) -> Call:
    """The claim of the unsent entries of `scopes`, scope by scope as listed, oldest first."""
    params = {"scopes": d.list_value(scopes), **claim_params(d, lease)}
    return Statements(d).claim_listed, params


async def claim_started(db: Runner, request: StartedClaim) -> list[StartedEntry]:
    """Mark `request.sent` announced, then claim the unsent entries of its scopes: one
    statement in autocommit, or both as one batch (on Postgres, one `relay_batch` round trip)."""
    d, scopes = db.dialect, request.scopes
    steps: list[Step] = []
    if request.sent:
        q, marks = mark_step(d, request.sent)
        steps.append((q, _one_or_many(marks)))
    if scopes:
        steps.append(claim_step(d, scopes, request.claim))
    q, params = steps[0]
    if len(steps) == 1 and isinstance(params, Mapping):
        found = await db.write(lambda tx: tx.rows(q, params), single=True)
    else:
        found = await db.batch(steps)
    rank = {p: n for n, p in enumerate(scopes)}
    claimed = [entry(row) for row in found] if scopes else []
    return sorted(claimed, key=lambda e: (rank[e.profile_id], e.started_at, e.session_id))


async def started_ledger(db: Runner) -> list[StartedScope]:
    q = Statements(db.dialect).ledger
    scopes: dict[str, tuple[int, list[StartedEntry]]] = {}
    for row in await db.read(lambda tx: tx.rows(q)):
        entries = scopes.setdefault(row[0], (row[1], []))[1]
        if row[3] is not None:
            entries.append(entry(row[2:]))
    return [StartedScope(p, floor, tuple(entries)) for p, (floor, entries) in scopes.items()]
