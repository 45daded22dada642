"""The fleet (every running service records itself) and the compatibility record.

`relay_fleet`: one row per running service (owner id, library version, schema head, host, pid,
started, last seen, last pass, backoff), so `status` lists the live fleet and `migrate` knows
whose code a contract migration would break. `relay_compat`: the oldest schema head whose code
may still use the database, written after every migration from this one on (migrations/env.py).
Two new tables: code of 0006 never reads them.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# New tables only: 0006 code keeps working, and from the code that reads relay_compat on.
kind = "expand"


def upgrade() -> None:
    op.create_table(
        "relay_compat",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("oldest_head", sa.String(32), nullable=False),
        sa.Column("migrated_by", sa.String(64), nullable=True),
        sa.CheckConstraint("id = 1", name=op.f("ck_relay_compat_singleton")),
        sa.PrimaryKeyConstraint("id", name="pk_relay_compat"),
    )
    op.create_table(
        "relay_fleet",
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("schema_head", sa.String(32), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.BigInteger(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("seen_at", sa.BigInteger(), nullable=False),
        sa.Column("live_until", sa.BigInteger(), nullable=False),
        sa.Column("pass_at", sa.BigInteger(), nullable=True),
        sa.Column("pass_outcome", sa.String(32), nullable=True),
        sa.Column("backoff_until", sa.BigInteger(), nullable=True),
        sa.Column("backoff_class", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("owner", name="pk_relay_fleet"),
    )
    op.create_index("ix_relay_fleet_seen_at", "relay_fleet", ["seen_at"])


def downgrade() -> None:
    op.drop_index("ix_relay_fleet_seen_at", table_name="relay_fleet")
    op.drop_table("relay_fleet")
    op.drop_table("relay_compat")
