"""The relay's own Alembic version table, and the move of a relay revision out of the host's.

From 0010 on the relay's migrations record their revision in `relay_alembic_version`, never in
the host application's `alembic_version`, where earlier ones wrote it; the next migration moves
it (migrations/env.py): the row only when it is the relay's, the table only when it held nothing
else. A revision in `alembic_version` is the relay's only if it is a `LEGACY` one and `MARKER` is
there too: anything else is someone else's, never "a relay schema ahead of this code".
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Column, Connection, MetaData, PrimaryKeyConstraint, String, Table, inspect

NAME = "relay_alembic_version"
# Alembic's default version table: the host's, which the relay wrote before 0010.
SHARED = "alembic_version"
# The relay revisions that recorded themselves in `SHARED`: 0001 to 0009.
LEGACY = tuple(f"{n:04d}" for n in range(1, 10))
# Created by 0001 and kept since: a legacy-looking revision without it is not the relay's.
MARKER = "relay_config"

# As Alembic makes a version table (`DefaultImpl.version_table_impl`): it takes ours as its own.
table = Table(
    NAME,
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name=f"{NAME}_pkc"),
)
shared = Table(SHARED, MetaData(), Column("version_num", String(32), nullable=False))


def pick(found: Iterable[str]) -> str | None:
    """The relay's revision among the rows of `alembic_version`: the newest legacy one, if any."""
    legacy = [revision for revision in found if revision in LEGACY]
    return max(legacy) if legacy else None


def legacy_revision(connection: Connection) -> str | None:
    """The relay's revision as `alembic_version` records it (a database not yet at 0010), when
    the relay has no version table of its own; None otherwise."""
    tables = inspect(connection)
    if tables.has_table(NAME) or not tables.has_table(SHARED) or not tables.has_table(MARKER):
        return None
    return pick(str(row[0]) for row in connection.execute(shared.select()))


def adopt(connection: Connection) -> None:
    """Move the relay's revision, if any, from `alembic_version` to its own table, in the caller's
    transaction."""
    revision = legacy_revision(connection)
    if revision is None:
        return
    table.create(connection)
    connection.execute(table.insert().values(version_num=revision))
    connection.execute(shared.delete().where(shared.c.version_num == revision))
    if connection.execute(shared.select().limit(1)).first() is None:
        shared.drop(connection)


def restore(connection: Connection, revision: str | None) -> None:
    """Steps that ended below 0010 (a downgrade, an upgrade to 0009 or older): the revision in
    `alembic_version`, where code of 0009 and older reads it, and no table of the relay's own
    (`revision` None: at base, neither)."""
    if not inspect(connection).has_table(NAME):
        return
    table.drop(connection)
    if revision is None:
        return
    shared.create(connection, checkfirst=True)
    connection.execute(shared.insert().values(version_num=revision))


def adopt_sql(revision: str, postgres: bool) -> list[str]:
    """`adopt` as statements for a DBA (`migrate --sql`) from a database at legacy `revision`."""
    statements = [
        f"CREATE TABLE {NAME} (version_num VARCHAR(32) NOT NULL, "
        f"CONSTRAINT {NAME}_pkc PRIMARY KEY (version_num))",
        f"INSERT INTO {NAME} (version_num) VALUES ('{revision}')",
        f"DELETE FROM {SHARED} WHERE version_num = '{revision}'",
    ]
    if postgres:
        statements.append(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM {SHARED}) THEN DROP TABLE {SHARED}; "
            "END IF; END $$"
        )
    return statements
