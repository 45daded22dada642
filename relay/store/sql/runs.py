"""Run state on SQL: one row per session, its newest turn, owned by the replica hosting it, and
`relay_turns`, the pruned sessions' newest turns (`schema.py` says what each column is for).

On Postgres every write of this aggregate takes one transaction-scoped advisory lock first: a
pass's sync locks many rows in an order no index gives, and two replicas taking over each
other's rows would otherwise deadlock. Syncs are short and rare, so queueing them costs nothing.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import (
    and_,
    case,
    delete,
    exists,
    false,
    func,
    literal,
    not_,
    or_,
    select,
    union_all,
    update,
)

from relay.protocol import TERMINAL_PHASES
from relay.store.backend import Claim
from relay.store.records import RunState
from relay.store.sql import fleet as fleet_sql
from relay.store.sql import schema as t
from relay.store.sql.dialect import Dialect, bind, closed_below
from relay.store.sql.drivers.runner import Runner, Step, Tx

# Any constant will do: it names this aggregate's lock among the database's advisory locks.
_RUNS_LOCK = 0x7A1A_2D0C
# What a replica offers of a turn (the rest of a row is its lease and its send).
TURN = ("session_id", "stream_id", "profile", "title", "phase", "started_at", "updated_at")
# The first revision whose `relay_runs` has `taken_from`.
TAKEN_FROM_SINCE = "0011"


def _not_older(started_at: Any, stream_id: Any, than_at: Any, than_stream: Any) -> Any:
    """Whether the turn `(started_at, stream_id)` is that of `than_*` or newer (no stream first)."""
    same_start = and_(
        started_at == than_at, func.coalesce(stream_id, "") >= func.coalesce(than_stream, "")
    )
    return or_(started_at > than_at, same_start)


@functools.cache
class Statements:
    """With `taken`, on the column 0011 added too."""

    def __init__(self, d: Dialect, taken: bool = True) -> None:
        r = t.runs.c
        # Spelled out: a compiled-once statement cannot expand an IN list per call.
        terminal = or_(*(r.phase == phase for phase in sorted(TERMINAL_PHASES)))
        owner, now, until = bind(r.owner), bind(r.lease_until, "now"), bind(r.lease_until, "until")
        table_columns = [c for c in t.runs.c if taken or c.key != "taken_from"]
        turn_columns = [c for c in table_columns if c.key not in ("sending_by", "sending_until")]
        f = t.turns.c
        offered = {column.key: bind(column) for column in turn_columns}
        # A session whose row was pruned takes only a turn newer than the one it had.
        newer_forgotten = select(literal(1)).where(
            f.session_id == offered["session_id"],
            _not_older(f.started_at, f.stream_id, offered["started_at"], offered["stream_id"]),
        )
        insert = d.insert(t.runs).from_select(
            [c.key for c in turn_columns],
            select(*(offered[c.key] for c in turn_columns)).where(~exists(newer_forgotten)),
        )
        new = insert.excluded
        stream, new_stream = func.coalesce(r.stream_id, ""), func.coalesce(new.stream_id, "")
        newer_turn = or_(
            new.started_at > r.started_at,
            and_(new.started_at == r.started_at, new_stream > stream),
        )
        same_turn = and_(new.started_at == r.started_at, new_stream == stream)
        # The true phase from the replica a takeover ended the live turn for
        # (`RunState.taken_back`); the save clears `taken_from`, so it corrects the row once.
        taken_back = (
            [and_(same_turn, r.taken_from == new.owner, r.phase != new.phase)] if taken else []
        )
        # A newer turn replaces the row wherever it runs; a turn that ended stays ended. Whoever is
        # sending the row goes on sending it: that is not part of the turn.
        save = insert.on_conflict_do_update(
            index_elements=[r.session_id],
            set_={c.key: new[c.key] for c in turn_columns if c.key != "session_id"},
            where=or_(newer_turn, and_(same_turn, not_(terminal)), *taken_back),
        )
        cutoff = bind(r.updated_at, "cutoff")
        pruned = and_(terminal, closed_below(r.updated_at), r.updated_at < cutoff)
        remember = d.insert(t.turns).from_select(
            ["session_id", "started_at", "stream_id", "forgotten_at"],
            select(r.session_id, r.started_at, r.stream_id, now).where(pruned),
        )
        kept = remember.excluded
        remember = remember.on_conflict_do_update(
            index_elements=[f.session_id],
            set_={"started_at": kept.started_at, "stream_id": kept.stream_id, "forgotten_at": now},
            where=_not_older(kept.started_at, kept.stream_id, f.started_at, f.stream_id),
        )
        # Leases that ended within the last lease count too (`LeaseWatch.keep_alive`).
        since = bind(r.lease_until, "since")
        e, o = t.started.c, t.deleted.c
        expiries = union_all(
            select(func.min(r.lease_until)).where(r.owner != owner, r.lease_until > since),
            select(func.min(e.claimed_until)).where(
                e.sent == false(), e.claimed_by != owner, e.claimed_until > since
            ),
            select(func.min(o.claimed_until)).where(o.claimed_by != owner, o.claimed_until > since),
        ).subquery()
        lock = select(func.pg_advisory_xact_lock(_RUNS_LOCK)) if d.postgres else None
        locked = [] if lock is None else [lock.scalar_subquery().is_not(None)]
        self.lock = None if lock is None else d.compile(lock)
        self.save = d.compile(save)
        # The owner's live rows wait to be confirmed by what it hosts now (a save sets a lease);
        # a row none confirmed is a newest turn its host dropped without an outcome: it ended,
        # as failed, and stays the session's row.
        self.unconfirm = d.compile(
            update(t.runs).where(r.owner == owner, not_(terminal)).values(lease_until=0)
        )
        self.end_unconfirmed = d.compile(
            update(t.runs)
            .where(r.owner == owner, not_(terminal), r.lease_until == 0)
            .values(phase=literal("failed"), updated_at=now, lease_until=until)
        )
        self.renew = d.compile(
            update(t.runs).where(r.owner == owner, r.lease_until < until).values(lease_until=until)
        )
        self.take_over = d.compile(
            update(t.runs)
            .where(r.owner != owner, closed_below(r.lease_until), r.lease_until <= now)
            .values(
                owner=owner,
                lease_until=until,
                # A turn its replica never finished ends as failed, at the moment it is found,
                # remembering whose it was.
                phase=case((terminal, r.phase), else_=literal("failed")),
                updated_at=case((terminal, r.updated_at), else_=now),
                **({"taken_from": case((terminal, r.taken_from), else_=r.owner)} if taken else {}),
            )
        )
        self.remember = d.compile(remember)
        self.prune = d.compile(delete(t.runs).where(pruned))
        self.forget = d.compile(
            delete(t.turns).where(f.forgotten_at < bind(f.forgotten_at, "forget_before"))
        )
        self.mark_sending = d.compile(
            update(t.runs)
            .where(
                r.owner == owner,
                or_(r.sending_by.is_(None), r.sending_by == owner, r.sending_until <= now),
            )
            .values(sending_by=owner, sending_until=until)
        )
        # One statement, in autocommit: on Postgres it takes the aggregate's lock itself, in a
        # condition evaluated once before the scan (an InitPlan), so before any row lock.
        self.release = d.compile(
            update(t.runs)
            .where(r.sending_by == owner, *locked)
            .values(sending_by=None, sending_until=0)
        )
        # A stopping replica's finished rows: their leases end now (a live one's does not).
        self.retire = d.compile(
            update(t.runs)
            .where(r.owner == owner, terminal, r.lease_until > now, *locked)
            .values(lease_until=now)
        )
        self.next_expiry = d.compile(select(func.min(expiries.c[0])))
        self.all = d.compile(select(*table_columns).order_by(r.session_id))


def columns(run: RunState, owner: str, until: int, taken: bool = True) -> dict[str, Any]:
    """The turn's columns of `run`, held by `owner` until `until` (with `taken`, `taken_from`
    too: a saved turn was taken from no one)."""
    turn = {name: getattr(run, name) for name in TURN}
    return turn | {"owner": owner, "lease_until": until} | ({"taken_from": None} if taken else {})


async def keep_alive(db: Runner, claim: Claim, *, fleet: bool = False) -> int | None:
    """Renew the owner's runs (and with `fleet` its fleet row) and read the next lease end, as
    one batch: one round trip on Postgres (`relay_batch`), one transaction everywhere."""
    q = Statements(db.dialect)
    mine = {"owner": claim.owner, "now": claim.now_ms, "until": claim.until}
    steps: list[Step] = [] if q.lock is None else [(q.lock, {})]
    steps.append((q.renew, mine))
    if fleet:
        steps.append((fleet_sql.Statements(db.dialect).renew, mine))
    steps.append((q.next_expiry, {**mine, "since": claim.watched_since}))
    rows = await db.batch(steps)
    expiry: int | None = rows[0][0] if rows else None
    return expiry


async def release_runs(db: Runner, owner: str) -> None:
    q = Statements(db.dialect).release
    # Not durable: a release lost to a power cut leaves the rows marked until the marks'
    # lease ends, which only makes another replica wait that long to publish them.
    await db.write(lambda tx: tx.run(q, {"owner": owner}), single=True, durable=False)


async def retire_runs(db: Runner, owner: str, now_ms: int) -> None:
    q = Statements(db.dialect)

    async def body(tx: Tx) -> None:
        await tx.run(q.retire, {"owner": owner, "now": now_ms})
        await tx.run(q.release, {"owner": owner})

    await db.write(body)


async def run_states(db: Runner, *, taken: bool = True) -> list[RunState]:
    q = Statements(db.dialect, taken).all
    # A row, in table order, is a record's fields.
    return [RunState(*row) for row in await db.read(lambda tx: tx.rows(q))]
