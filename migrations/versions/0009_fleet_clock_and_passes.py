"""Each replica's clock offset and its last hour of passes in its fleet row.

`relay_fleet.clock_offset_ms` (the replica's wall clock minus the store's, ms) and
`relay_fleet.passes` (its passes over the last hour, a character a minute, at most 60:
`relay.store.fleet_passes`), so `status` and the operator page show them for every live replica,
not only the one asked.

Expand only: two nullable columns without a default (no table rewrite, a brief lock). Code of 0008
never reads them, and a store of this release opens a database at 0008 and writes its rows without
them (`relay.store.sql.fleet.RING_SINCE`).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand (compat's `kind`): the previous release's code runs on it unchanged.
kind = "expand"


def upgrade() -> None:
    op.add_column("relay_fleet", sa.Column("clock_offset_ms", sa.BigInteger(), nullable=True))
    op.add_column("relay_fleet", sa.Column("passes", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("relay_fleet", "passes")
    op.drop_column("relay_fleet", "clock_offset_ms")
