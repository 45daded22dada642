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
    with op.batch_alter_table("relay_started") as batch:
        batch.alter_column(
            "claimed_by", existing_type=sa.Text(), type_=sa.String(64), existing_nullable=True
        )


def downgrade() -> None:
    with op.batch_alter_table("relay_started") as batch:
        batch.alter_column(
            "claimed_by", existing_type=sa.String(64), type_=sa.Text(), existing_nullable=True
        )
