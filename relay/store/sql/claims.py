"""Leased claims on SQL, shared by the started ledger and the deleted outbox.

A row is free to claim (`free`) when it was never claimed, its lease has ended, or its claim is
already the caller's. The claim takes at most `:limit` free rows under `FOR UPDATE SKIP LOCKED`, so
concurrent claimers pass over each other's rows instead of queueing (a no-op on SQLite, whose
writers are serial anyway), and leases them to `:owner` until `:until`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    FromClause,
    Table,
    Update,
    bindparam,
    or_,
    select,
    tuple_,
    update,
)

from relay.store.backend import Claim
from relay.store.sql.dialect import Dialect, bind


def free(table: Table, owner: Any, now: Any) -> ColumnElement[bool]:
    c = table.c
    return or_(c.claimed_until.is_(None), c.claimed_until <= now, c.claimed_by == owner)


def claim(
    table: Table,
    key: Any,
    *where: ColumnElement[bool],
    order_by: Any,
    joined: FromClause | None = None,
) -> Update:
    """Claim the free rows of `table` matching `where`, first in `order_by`, by `key` (a column,
    or a tuple of columns); chosen from the rows of `joined` if given (only `table`'s locked)."""
    c = table.c
    keys = key if isinstance(key, tuple) else (key,)
    owner, now = bind(c.claimed_by, "owner"), bind(c.claimed_until, "now")
    claimable = (
        select(*keys)
        .select_from(table if joined is None else joined)
        .where(*where, free(table, owner, now))
        .order_by(*order_by)
        # Typed, so the statement can go into a Postgres batch (`Compiled.batched`).
        .limit(bindparam("limit", type_=BigInteger))
        .with_for_update(of=None if joined is None else table, skip_locked=True)
        # Chosen once: as a plain subquery Postgres may rescan it per row, past the limit.
        .cte("claimable")
        .prefix_with("MATERIALIZED")
    )
    chosen = select(*(claimable.c[k.key] for k in keys))
    return (
        update(table)
        .where(*where, keys[0].in_(chosen) if len(keys) == 1 else tuple_(*keys).in_(chosen))
        .values(claimed_by=owner, claimed_until=bind(c.claimed_until, "until"))
    )


def claim_params(d: Dialect, lease: Claim) -> dict[str, Any]:
    """A claim's parameters; no limit is NULL on Postgres and a negative one on SQLite."""
    limit = (None if d.postgres else -1) if lease.limit is None else lease.limit
    return {"owner": lease.owner, "now": lease.now_ms, "until": lease.until, "limit": limit}
