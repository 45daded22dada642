"""Alembic environment (async template) for the relay tables.

The URL comes from `-x url=...`, else `config.attributes["url"]`, else `TALARIA_RELAY_STORE_URL`,
else the embedded SQLite default. Code that already holds a connection passes it in
`config.attributes["connection"]` and owns its transaction.

On Postgres every run holds the migration advisory lock, then waits at most
`config.attributes["lock_timeout_ms"]` (default `migrate.LOCK_TIMEOUT_MS`) for any table lock, so
a migration never queues behind a long transaction while every replica queues behind it. After
the last step, the compatibility record (`relay_compat`, from 0007 on) is written in the same
transaction: the oldest schema head whose code may still use the database.

The relay keeps its revision in its own table, `relay_alembic_version`, never in the host
application's `alembic_version` (`relay.store.sql.version_table`): before the steps, a relay
revision that an older release left in `alembic_version` moves there in the same transaction; after
a downgrade below 0010 it moves back. On Postgres the relay's schema (`?schema=` in the URL) is
created first when missing (`relay.store.sql.migrate.ensure_schema`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from typing import Any

from alembic import context
from alembic.migration import MigrationContext, MigrationInfo
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, text

from relay.store.sql import compat, migrate, version_table
from relay.store.sql.migrate import ADVISORY_LOCK_KEY, LOCK_TIMEOUT_MS
from relay.store.sql.schema import metadata
from relay.store.url import ENV_VAR, StoreTarget, resolve, schema_name

config = context.config


def _target() -> StoreTarget:
    raw = context.get_x_argument(as_dictionary=True).get("url") or config.attributes.get("url")
    return resolve(raw)


# The alembic commands that write the schema; the others (current, check, …) only read it.
_WRITERS = frozenset({"upgrade", "downgrade", "stamp"})


def _command() -> str:
    """The alembic command line's command (`current`, `upgrade`, …); "" when code runs this."""
    command = getattr(getattr(config, "cmd_opts", None), "cmd", None)
    return getattr(command[0], "__name__", "") if command else ""


def _read_only_on_nothing(target: StoreTarget) -> None:
    """`alembic current` (or `check`) on a SQLite file that is not there: say so and create
    nothing, rather than make an empty store (under the user's home, for the default)."""
    name = _command()
    if target.backend != "sqlite" or name in _WRITERS or target.path is None:
        return
    if not target.path.exists():
        raise CommandError(
            f"no SQLite store at {target.path}; nothing created (`alembic {name}` only reads: "
            f"name a store with -x url=URL or ${ENV_VAR}, or create this one with "
            "`alembic upgrade head`)"
        )


def _url() -> str:
    return _target().sqlalchemy_url.render_as_string(hide_password=False)


def _schema() -> str | None:
    if "schema" in config.attributes:  # set by relay.store.sql.migrate, with the connection
        found: str | None = config.attributes["schema"]
        return found
    target = _target()
    return schema_name(target.url) if target.url is not None else None


def _lock(dialect: str) -> None:
    # Replicas racing `upgrade head`: the second waits here, then finds the schema at head.
    if dialect == "postgresql":
        context.execute(text(f"SELECT pg_advisory_xact_lock({ADVISORY_LOCK_KEY})"))
        # After the advisory lock: a second migrator waits for the first as long as it takes.
        timeout_ms = int(config.attributes.get("lock_timeout_ms", LOCK_TIMEOUT_MS))
        context.execute(text(f"SET LOCAL lock_timeout = '{timeout_ms}ms'"))


# The database's revision after each step that ran (one head: our chain has no branches).
_reached: list[tuple[str | None, bool]] = []


def _applied(
    ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]
) -> None:
    _reached[:] = [(next(iter(heads), None), bool(step.is_upgrade))]


def _prepare(connection: Connection) -> None:
    """Before the steps: the relay's schema, and its revision in its own version table. Only
    for a command that migrates (upgrade, downgrade): `alembic current` or `check` writes
    nothing, as they read a database below 0010 where its code reads it."""
    if context.get_context().opts.get("destination_rev") is None:
        return
    migrate.ensure_schema(connection, _schema())
    version_table.adopt(connection)


def _prepare_sql(postgres: bool) -> None:
    """`_prepare` for a DBA (`migrate --sql`): from `starting_rev`, what the database holds."""
    name = _schema()
    if postgres and name is not None:
        context.execute(migrate.create_schema_sql(name))
    since = config.attributes.get("since")
    if since in version_table.LEGACY:
        for statement in version_table.adopt_sql(since, postgres):
            context.execute(statement)
        if not postgres:
            context.get_context().impl.static_output(
                f"-- then DROP TABLE {version_table.SHARED} if no row is left in it;"
            )


def _restore(connection: Connection) -> None:
    """Steps that end below 0010 (a rollback, `migrate --to 0009`): the revision where code of
    0009 and older reads it, as those releases left it."""
    if not _reached:
        return
    revision, upgraded = _reached[0]
    if revision in version_table.LEGACY or (revision is None and not upgraded):
        version_table.restore(connection, revision)


def _record() -> None:
    """Write the compatibility record for the revision the steps reached, if it has the table."""
    if not _reached:
        return
    revision, upgraded = _reached[0]
    if revision is None or compat.later(compat.COMPAT_SINCE, revision):
        return
    scripts = ScriptDirectory.from_config(config)
    for statement in compat.record(scripts, revision, upgraded=upgraded):
        context.execute(statement)


def run_migrations_offline() -> None:
    url = _url()
    dialect = url.split(":", 1)[0].split("+", 1)[0]
    context.configure(
        url=url,
        target_metadata=metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=dialect == "sqlite",
        on_version_apply=_applied,
        version_table=version_table.NAME,
    )
    postgres = dialect.startswith("postgres")
    with context.begin_transaction():
        _lock("postgresql" if postgres else dialect)
        _prepare_sql(postgres)
        context.run_migrations()
        _record()


def _version_table(connection: Connection) -> str:
    """Where the revision is read: the relay's own table; for `alembic current` on a database
    below 0010, which only a migration moves, `alembic_version` when it holds only the relay's
    revision (with the host's in it too, alembic could not name them, and says nothing)."""
    if _command() != "current" or version_table.legacy_revision(connection) is None:
        return version_table.NAME
    rows = {str(row[0]) for row in connection.execute(version_table.shared.select())}
    return version_table.SHARED if rows <= set(version_table.LEGACY) else version_table.NAME


def do_run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        on_version_apply=_applied,
        version_table=_version_table(connection),
    )
    with context.begin_transaction():
        _lock(connection.dialect.name)
        _prepare(connection)
        context.run_migrations()
        _restore(connection)
        _record()


if context.is_offline_mode():
    run_migrations_offline()
elif (shared := config.attributes.get("connection")) is not None:
    do_run_migrations(shared)
else:
    # The alembic command line: the store's own engines, so it connects as the store does.
    _read_only_on_nothing(_target())
    asyncio.run(migrate.run(_target(), do_run_migrations))
