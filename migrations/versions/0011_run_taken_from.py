"""Whom a takeover took a run row from: `relay_runs.taken_from`.

A replica cut off from the store (a silent network) keeps running its turns while another one
takes their rows over at the lease's end and publishes them `failed`. With the replica it took
them from recorded, that replica, back, corrects the row once with the turn's true phase while it
is still the session's newest turn (`relay.store.records.RunState.taken_back`).

Expand only: one nullable column without a default (no table rewrite, a brief lock). Code of
0010 never reads it (its takeovers leave it NULL: those rows stay failed, as before), and a store
of this release opens a database at 0009 or 0010 and writes its rows without it
(`relay.store.sql.runs.TAKEN_FROM_SINCE`).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand (compat's `kind`): the previous release's code runs on it unchanged.
kind = "expand"


def upgrade() -> None:
    op.add_column("relay_runs", sa.Column("taken_from", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("relay_runs", "taken_from")
