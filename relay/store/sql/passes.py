"""A publishing pass on SQL: its view in one SELECT, its write as one straight-line batch.

The view is a UNION ALL of tagged rows, each part bounded by the number of profiles, scopes or
tabs, never by the ledger or the runs (a scope's unsent entries are an index range): on
Postgres one round trip in autocommit.

The write (`pass_write`) is the run sync's statements (`runs`), then the revision allocation for
the rows the owner now has, then those rows with the counter: no statement waits on an earlier
one's answer, so a runner may send them all at once (`Runner.batch`). Past 2^53-1 the whole
transaction rolls back, as the contract says (`past_the_cap`).
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    Text,
    case,
    cast,
    extract,
    false,
    func,
    literal,
    literal_column,
    null,
    select,
    true,
    union_all,
)

from relay.errors import StoreError
from relay.protocol import MAX_SAFE_INTEGER
from relay.store.backend import RunSync, ViewQuery, ViewReading
from relay.store.records import CONFIG_VERSION, RunState
from relay.store.sql import fleet
from relay.store.sql import runs as run_sql
from relay.store.sql import schema as t
from relay.store.sql.claims import free
from relay.store.sql.dialect import Dialect, bind
from relay.store.sql.drivers.runner import Runner, Step


def _tagged(tag: str, name: Any = None, text: Any = None, number: Any = None) -> Any:
    """A row of the view: (tag, name, text, number), the unused ones typed NULLs."""
    return select(
        literal_column(f"'{tag}'", Text).label("tag"),
        (cast(null(), Text) if name is None else name).label("name"),
        (cast(null(), Text) if text is None else text).label("text"),
        (cast(null(), BigInteger) if number is None else number).label("number"),
    )


def _server_ms() -> Any:
    """Postgres: the server's clock in Unix ms, as the statement started (not `now()`, the
    transaction's start, nor `clock_timestamp()`, which moves during it): the replicas' one time
    base. SQLite lives on this host: its clock is this host's."""
    return cast(func.floor(extract("epoch", func.statement_timestamp()) * 1000), BigInteger)


async def clock_ms(db: Runner) -> int | None:
    """The store server's clock in Unix ms (a pass view's `store_ms`); None on SQLite."""
    if not db.dialect.postgres:
        return None
    q = db.dialect.compile(select(_server_ms()))
    return int((await db.read(lambda tx: tx.rows(q)))[0][0])


@functools.cache
class Statements:
    """With `taken`, the owned rows have `taken_from`."""

    def __init__(self, d: Dialect, taken: bool = True) -> None:
        c, i, p = t.config.c, t.identities.c, t.presence.c
        scopes, s, r = t.started_scopes.c, t.started.c, t.runs.c
        owner, now = bind(r.owner), bind(r.lease_until, "now")
        # "Is there a row" as a LIMIT 1 subquery, not EXISTS (docs/query-plans.md): it reads the
        # index range the claim itself would.
        unsent = (
            select(literal(1))
            .where(
                s.profile_id == scopes.profile_id, s.sent == false(), free(t.started, owner, now)
            )
            .limit(1)
            .scalar_subquery()
            .is_not(None)
        )
        deleted = (
            select(t.deleted.c.through)
            .where(free(t.deleted, owner, now))
            .order_by(t.deleted.c.through, t.deleted.c.id)
            .limit(1)
            .scalar_subquery()
            .is_not(None)
        )
        clock = _tagged("clock", number=_server_ms())
        view = union_all(
            _tagged("generation", number=c.generation).where(c.version == CONFIG_VERSION),
            _tagged("identity", i.profile, i.identity),
            _tagged("active", p.profile)
            .where(p.active == true(), p.expires_at > now)
            .group_by(p.profile),
            _tagged("scope", scopes.profile_id, number=case((unsent, 1), else_=0)),
            _tagged("deleted").where(deleted),
            *([clock] if d.postgres else []),
        )
        floor, cap = t.revision.c.floor, literal(MAX_SAFE_INTEGER, BigInteger)
        owned = select(func.count().label("n")).select_from(t.runs).where(r.owner == owner)
        n = owned.subquery("owned").c.n
        since = d.greatest(literal(1, BigInteger), now)
        first = since + n - 1
        insert = d.insert(t.revision).from_select(
            ["id", "floor"], select(literal(1, Integer), case((first <= cap, first))).where(n > 0)
        )
        # The proposed floor is since + n - 1: the update takes n from it, counted once. NULL past
        # the cap: the NOT NULL column refuses it, and the transaction rolls back.
        raised = d.greatest(floor + 1, now) + insert.excluded.floor - since
        allocate = insert.on_conflict_do_update(
            index_elements=[t.revision.c.id], set_={"floor": case((raised <= cap, raised))}
        )
        self.view = d.compile(view)
        self.allocate = d.compile(allocate)
        self.owned = d.compile(
            select(
                *(column for column in t.runs.c if taken or column.key != "taken_from"),
                select(floor).scalar_subquery(),
            )
            .where(r.owner == owner)
            .order_by(r.started_at, r.session_id)
        )


def past_the_cap(error: StoreError) -> bool:
    """Whether a pass's write failed on the NULL its allocation sets past 2^53-1."""
    cause = error.__cause__
    if getattr(cause, "sqlstate", None) == "23502":  # Postgres: not_null_violation
        found = (getattr(cause, "table_name", None), getattr(cause, "column_name", None))
        return found == (t.revision.name, "floor")
    return f"NOT NULL constraint failed: {t.revision.name}.floor" in str(cause)


async def pass_view(db: Runner, query: ViewQuery) -> ViewReading:
    q, params = Statements(db.dialect).view, {"owner": query.owner, "now": query.now_ms}
    reading = ViewReading()
    for tag, name, text, number in await db.read(lambda tx: tx.rows(q, params)):
        if tag == "generation":
            reading.generation = number
        elif tag == "identity":
            reading.identities[name] = text
        elif tag == "active":
            reading.active.add(name)
        elif tag == "scope":
            reading.tracked.add(name)
            if number:
                reading.unsent.add(name)
        elif tag == "deleted":
            reading.deleted = True
        elif tag == "clock":
            reading.store_ms = number
    return reading


async def pass_write(
    db: Runner, sync: RunSync, *, ring: bool = True, taken: bool = True
) -> tuple[list[RunState], int] | None:
    d = db.dialect
    q, p = run_sql.Statements(d, taken), Statements(d, taken)
    owner, now_ms, until = sync.owner, sync.now_ms, sync.until
    mine = {"owner": owner, "now": now_ms, "until": until}
    steps: list[Step] = [] if q.lock is None else [(q.lock, {})]
    steps.append((q.unconfirm, {"owner": owner}))
    if sync.live:
        steps.append((q.save, [run_sql.columns(run, owner, until, taken) for run in sync.live]))
    steps += [
        (q.end_unconfirmed, mine),
        (q.renew, mine),
        (q.take_over, mine),
        (q.remember, {"now": now_ms, "cutoff": sync.cutoff}),
        (q.prune, {"cutoff": sync.cutoff}),
        (q.forget, {"forget_before": sync.forget_before}),
        (q.mark_sending, mine),
    ]
    if sync.member is not None:
        steps.append((fleet.Statements(d, ring).upsert, fleet.values(sync.member, ring)))
    steps += [(p.allocate, {"owner": owner, "now": now_ms}), (p.owned, {"owner": owner})]
    try:
        rows = await db.batch(steps)
    except StoreError as error:
        if past_the_cap(error):
            return None
        raise
    runs = [RunState(*row[:-1]) for row in rows]  # the run's row, then the counter
    return runs, (rows[-1][-1] if rows else 0)
