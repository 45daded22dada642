"""Initial relay tables.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The first schema: no code before it.
kind = "contract"


def upgrade() -> None:
    op.create_table(
        "relay_config",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("publisher_id", sa.Text(), nullable=False),
        sa.Column("key_id", sa.Text(), nullable=False),
        sa.Column("key_ref", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_relay_config_singleton")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_relay_config")),
    )
    op.create_table(
        "relay_profiles",
        sa.Column("profile", sa.Text(), nullable=False),
        sa.Column("identity", sa.Text(), nullable=False),
        sa.Column("profile_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("profile", name=op.f("pk_relay_profiles")),
    )
    op.create_table(
        "relay_keys",
        sa.Column("ref", sa.String(length=64), nullable=False),
        sa.Column("pem", sa.Text(), nullable=False),
        sa.Column("encrypted", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("ref", name=op.f("pk_relay_keys")),
    )
    op.create_table(
        "relay_identities",
        sa.Column("profile", sa.Text(), nullable=False),
        sa.Column("identity", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("profile", name=op.f("pk_relay_identities")),
    )
    op.create_table(
        "relay_revision",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("floor", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_relay_revision_singleton")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_relay_revision")),
    )
    op.create_table(
        "relay_started_scopes",
        sa.Column("profile_id", sa.Text(), nullable=False),
        sa.Column("floor", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("profile_id", name=op.f("pk_relay_started_scopes")),
    )
    op.create_table(
        "relay_started",
        sa.Column("profile_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.String(length=191), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("sent", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("claimed_by", sa.Text(), nullable=True),
        sa.Column("claimed_until", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("profile_id", "session_id", name=op.f("pk_relay_started")),
    )
    op.create_index(
        "ix_relay_started_unsent", "relay_started", ["profile_id", "sent", "started_at"]
    )
    op.create_table(
        "relay_deleted",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("profile", sa.Text(), nullable=False),
        sa.Column("through", sa.BigInteger(), nullable=False),
        sa.Column("identity", sa.Text(), nullable=True),
        sa.Column("scope_url", sa.Text(), nullable=True),
        sa.Column("scope_publisher_id", sa.Text(), nullable=True),
        sa.Column("scope_profile_id", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "(scope_url IS NULL) = (scope_publisher_id IS NULL)"
            " AND (scope_url IS NULL) = (scope_profile_id IS NULL)",
            name=op.f("ck_relay_deleted_scope_complete"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_relay_deleted")),
        sa.UniqueConstraint("session_id", "profile", name="uq_relay_deleted_session_profile"),
    )
    op.create_table(
        "relay_presence",
        sa.Column("profile", sa.Text(), nullable=False),
        sa.Column("tab_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("profile", "tab_id", name=op.f("pk_relay_presence")),
    )


def downgrade() -> None:
    op.drop_table("relay_presence")
    op.drop_table("relay_deleted")
    op.drop_index("ix_relay_started_unsent", table_name="relay_started")
    op.drop_table("relay_started")
    op.drop_table("relay_started_scopes")
    op.drop_table("relay_revision")
    op.drop_table("relay_identities")
    op.drop_table("relay_keys")
    op.drop_table("relay_profiles")
    op.drop_table("relay_config")
