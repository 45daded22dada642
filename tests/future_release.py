"""A release two migrations ahead of this code, for tests: `talaria-relay` on a copy of the
migrations plus a test-only expand migration (0098: a new nullable fleet column) and a contract
one on top (0099).

`tests/future_release.py SCRIPTS ARGS…`, run as a script, runs `talaria-relay ARGS…` as that
release would: its scripts are SCRIPTS (made by `scripts(dir)`) and its schema head their newest.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from relay.store.sql.migrate import head_revision, script_location

EXPAND, CONTRACT = "0098", "0099"

_MIGRATION = '''"""Test only: {what}.

Revision ID: {revision}
Revises: {down}
"""

import sqlalchemy as sa
from alembic import op

revision = "{revision}"
down_revision = "{down}"
branch_labels = None
depends_on = None
kind = "{kind}"


def upgrade() -> None:
    {up}


def downgrade() -> None:
    {down_op}
'''


def scripts(where: Path) -> Path:
    """A script directory: this code's migrations, then 0098 (expand) and 0099 (contract)."""
    target = where / "future-migrations"
    shutil.copytree(script_location(), target, ignore=shutil.ignore_patterns("__pycache__"))
    versions = target / "versions"
    (versions / f"{EXPAND}_future_expand.py").write_text(
        _MIGRATION.format(
            what="a nullable column older code never reads",
            revision=EXPAND,
            down=head_revision(),
            kind="expand",
            up='op.add_column("relay_fleet", sa.Column("zone", sa.String(64), nullable=True))',
            down_op='op.drop_column("relay_fleet", "zone")',
        )
    )
    (versions / f"{CONTRACT}_future_contract.py").write_text(
        _MIGRATION.format(
            what="a change of meaning older code would not follow",
            revision=CONTRACT,
            down=EXPAND,
            kind="contract",
            up='op.create_table("relay_future", sa.Column("id", sa.Integer(), primary_key=True))',
            down_op='op.drop_table("relay_future")',
        )
    )
    return target


def command(location: Path, *args: str) -> list[str]:
    """The script and arguments that run `talaria-relay ARGS` as the future release."""
    return [str(Path(__file__).resolve()), str(location), *args]


if __name__ == "__main__":
    from relay.cli.main import main
    from relay.store.sql import migrate

    location = Path(sys.argv[1])
    newest = sorted(path.name[:4] for path in (location / "versions").glob("[0-9]*.py"))[-1]
    migrate.script_location = lambda: location
    migrate.head_revision = lambda: newest
    sys.exit(main(sys.argv[2:]))
