"""Ledger indexes for the prune and the claim, so neither reads a whole scope.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Indexes only: code of 0001 reads and writes the same columns.
kind = "expand"


def upgrade() -> None:
    op.drop_index("ix_relay_started_unsent", table_name="relay_started")
    op.create_index(
        "ix_relay_started_unsent",
        "relay_started",
        ["profile_id", "sent", "started_at", "session_id"],
    )
    op.create_index("ix_relay_started_age", "relay_started", ["profile_id", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_relay_started_age", table_name="relay_started")
    op.drop_index("ix_relay_started_unsent", table_name="relay_started")
    op.create_index(
        "ix_relay_started_unsent", "relay_started", ["profile_id", "sent", "started_at"]
    )
