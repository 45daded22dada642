"""Indexes for the hot statements that scanned a whole table: at 100,000 rows each reads a range.

The deleted outbox: its claim order `(through, id)`, its leases `(claimed_until)`, and a profile's
unbound entries (partial: only rows without a scope, so few). The runs: the age prune
`(updated_at)` and the release of sending marks `(sending_by)`. The started ledger: the lease
ends of unsent claims (partial: unsent rows only). tests/store/test_query_plans.py holds every
hot statement to an index; docs/query-plans.md says which statement uses which.

Expand only: indexes, nothing a store of the previous release reads differently, and a store of
this release runs without them (slower), so it opens at 0005 to 0007 too. Plain CREATE INDEX,
inside the migration's one transaction under the migrate lock (CONCURRENTLY cannot run in one):
it holds writes to each table for the build, about a second at 100,000 rows.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand (compat's `kind`): the previous release's code runs on it unchanged.
kind = "expand"

# (name, table, columns, partial index predicate on Postgres, on SQLite)
INDEXES: tuple[tuple[str, str, list[str], str | None, str | None], ...] = (
    ("ix_relay_deleted_through", "relay_deleted", ["through", "id"], None, None),
    ("ix_relay_deleted_claimed_until", "relay_deleted", ["claimed_until"], None, None),
    (
        "ix_relay_deleted_unbound",
        "relay_deleted",
        ["profile"],
        "scope_url IS NULL",
        "scope_url IS NULL",
    ),
    ("ix_relay_runs_updated_at", "relay_runs", ["updated_at"], None, None),
    ("ix_relay_runs_sending_by", "relay_runs", ["sending_by"], None, None),
    (
        "ix_relay_started_claimed_until",
        "relay_started",
        ["claimed_until"],
        "sent = false",
        "sent = 0",
    ),
)


def upgrade() -> None:
    for name, table, columns, on_postgres, on_sqlite in INDEXES:
        op.create_index(
            name,
            table,
            columns,
            postgresql_where=None if on_postgres is None else sa.text(on_postgres),
            sqlite_where=None if on_sqlite is None else sa.text(on_sqlite),
        )


def downgrade() -> None:
    for name, table, *_ in reversed(INDEXES):
        op.drop_index(name, table_name=table)
