"""The host's notes table.

Revision ID: a1
Revises:
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "a1"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "host_notes",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("author", sa.String(64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
    )
    op.create_index("ix_host_notes_author", "host_notes", ["author"])


def downgrade() -> None:
    op.drop_index("ix_host_notes_author", table_name="host_notes")
    op.drop_table("host_notes")
