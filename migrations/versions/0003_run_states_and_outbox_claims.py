"""Run state shared by replicas, and claims on the deleted outbox.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Run states shared through relay_runs change what publishing means: 0002 code, which
# does not write them, would publish over the turns 0003 code owns.
kind = "contract"


def upgrade() -> None:
    op.create_table(
        "relay_runs",
        sa.Column("session_id", sa.String(191), nullable=False),
        sa.Column("stream_id", sa.String(191), nullable=True),
        sa.Column("profile", sa.Text(), nullable=True),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("lease_until", sa.BigInteger(), nullable=False),
        sa.Column("sending_by", sa.String(64), nullable=True),
        sa.Column("sending_until", sa.BigInteger(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("session_id", name="pk_relay_runs"),
    )
    op.create_index("ix_relay_runs_owner", "relay_runs", ["owner"])
    op.create_index("ix_relay_runs_lease_until", "relay_runs", ["lease_until"])
    # Adding nullable columns rewrites nothing and takes no long lock: safe while replicas run.
    with op.batch_alter_table("relay_deleted") as batch:
        batch.add_column(sa.Column("claimed_by", sa.String(64), nullable=True))
        batch.add_column(sa.Column("claimed_until", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("relay_deleted") as batch:
        batch.drop_column("claimed_until")
        batch.drop_column("claimed_by")
    op.drop_index("ix_relay_runs_lease_until", table_name="relay_runs")
    op.drop_index("ix_relay_runs_owner", table_name="relay_runs")
    op.drop_table("relay_runs")
