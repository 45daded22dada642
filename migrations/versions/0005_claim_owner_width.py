"""Every claim's owner in one column type: relay_started.claimed_by as relay_deleted's, 64 long.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Narrows relay_started.claimed_by to 64: 0004 code writes longer owners.
kind = "contract"


def upgrade() -> None:
    # A claim is a lease that ends within seconds: one held by an owner id past 64 characters
    # (the store no longer takes such an owner) is dropped, so its entry is claimed again.
    started = sa.table(
        "relay_started",
        sa.column("claimed_by", sa.Text()),
        sa.column("claimed_until", sa.BigInteger()),
    )
    op.execute(
        started.update()
        .where(sa.func.length(started.c.claimed_by) > 64)
        .values(claimed_by=None, claimed_until=None)
    )
    with op.batch_alter_table("relay_started", copy_from=_started(sa.Text())) as batch:
        batch.alter_column(
            "claimed_by", existing_type=sa.Text(), type_=sa.String(64), existing_nullable=True
        )


def downgrade() -> None:
    with op.batch_alter_table("relay_started", copy_from=_started(sa.String(64))) as batch:
        batch.alter_column(
            "claimed_by", existing_type=sa.String(64), type_=sa.Text(), existing_nullable=True
        )


def _started(claimed_by: sa.types.TypeEngine[str]) -> sa.Table:
    """relay_started as it stands before the change: SQLite's copy needs it without reflecting
    (so `migrate --sql` can print it); Postgres alters the column in place."""
    return sa.Table(
        "relay_started",
        sa.MetaData(),
        sa.Column("profile_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.String(length=191), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("sent", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("claimed_by", claimed_by, nullable=True),
        sa.Column("claimed_until", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("profile_id", "session_id", name="pk_relay_started"),
        sa.Index("ix_relay_started_unsent", "profile_id", "sent", "started_at", "session_id"),
        sa.Index("ix_relay_started_age", "profile_id", "started_at"),
    )
