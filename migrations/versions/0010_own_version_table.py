"""The relay's revision in its own version table, `relay_alembic_version`.

The relay lives in the application's own database, beside the application's Alembic chain: its
revision no longer goes in `alembic_version` (the application's), but in `relay_alembic_version`.
The move itself runs in migrations/env.py before this step, in the same transaction
(`relay.store.sql.version_table.adopt`): the relay's row leaves `alembic_version`, and the table
goes only when nothing else was in it. This step changes no table; its downgrade puts the revision
back in `alembic_version` (env.py, after the step: `version_table.restore`).

Contract: code of 0009 and older reads its revision in `alembic_version` only, and finds none
there after this step ("no relay schema"): roll every replica out to this release before it
(`migrate` refuses while the fleet has live older replicas).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Contract (compat's `kind`): the previous release's code no longer finds its revision.
kind = "contract"


def upgrade() -> None:
    """Nothing here: env.py moved the revision before Alembic read it."""


def downgrade() -> None:
    """Nothing here: env.py moves the revision back after the steps."""
