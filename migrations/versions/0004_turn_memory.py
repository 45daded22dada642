"""The newest turn of each session whose run row was pruned, so an older turn never comes back.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# 0003 code prunes run rows without remembering their newest turn, which 0004 relies on to
# never bring an older turn back.
kind = "contract"


def upgrade() -> None:
    # A new table only: nothing is rewritten or locked, so replicas may run while it is made.
    op.create_table(
        "relay_turns",
        sa.Column("session_id", sa.String(191), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("stream_id", sa.String(191), nullable=True),
        sa.Column("forgotten_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_relay_turns"),
    )
    op.create_index("ix_relay_turns_forgotten_at", "relay_turns", ["forgotten_at"])


def downgrade() -> None:
    op.drop_index("ix_relay_turns_forgotten_at", table_name="relay_turns")
    op.drop_table("relay_turns")
