"""Leased claims on SQL, shared by the started ledger and the deleted outbox.

A row is free to claim when it was never claimed, its lease has ended, or its claim is already
the caller's. The claim takes at most `:limit` free rows under `FOR UPDATE SKIP LOCKED`, so
concurrent claimers pass over each other's rows instead of queueing (a no-op on SQLite, whose
writers are serial anyway), and leases them to `:owner` until `:until`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Table, Update, bindparam, or_, select, update

from relay.store.sql.dialect import Dialect, bind


def free(table: Table, owner: Any, now: Any) -> ColumnElement[bool]:
    """Whether a row of `table` is free for `owner` to claim at `now`."""
    c = table.c
    return or_(c.claimed_until.is_(None), c.claimed_until <= now, c.claimed_by == owner)


def claim(table: Table, key: Any, *where: ColumnElement[bool], order_by: Any) -> Update:
    """Claim the free rows of `table` matching `where`, first in `order_by`, by `key`."""
    c = table.c
    owner, now = bind(c.claimed_by, "owner"), bind(c.claimed_until, "now")
    claimable = (
        select(key)
        .where(*where, free(table, owner, now))
        .order_by(*order_by)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
        # Chosen once: as a plain subquery Postgres may rescan it per row, past the limit.
        .cte("claimable")
        .prefix_with("MATERIALIZED")
    )
    return (
        update(table)
        .where(*where, key.in_(select(claimable.c[key.key])))
        .values(claimed_by=owner, claimed_until=bind(c.claimed_until, "until"))
    )


def claim_params(
    d: Dialect, owner: str, now_ms: int, until: int, limit: int | None
) -> dict[str, Any]:
    """A claim's parameters; no limit is NULL on Postgres and a negative one on SQLite."""
    unlimited = None if d.postgres else -1
    return {
        "owner": owner,
        "now": now_ms,
        "until": until,
        "limit": unlimited if limit is None else limit,
    }
