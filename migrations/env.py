"""Alembic environment (async template) for the relay tables.

The URL comes from `-x url=...`, else `config.attributes["url"]`, else `TALARIA_RELAY_STORE_URL`,
else the embedded SQLite default. Code that already holds a connection passes it in
`config.attributes["connection"]` and owns its transaction.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import Connection, text

from relay.store.sql import migrate
from relay.store.sql.migrate import ADVISORY_LOCK_KEY
from relay.store.sql.schema import metadata
from relay.store.url import StoreTarget, resolve

config = context.config


def _target() -> StoreTarget:
    raw = context.get_x_argument(as_dictionary=True).get("url") or config.attributes.get("url")
    return resolve(raw)


def _url() -> str:
    return _target().sqlalchemy_url.render_as_string(hide_password=False)


def _lock(dialect: str) -> None:
    # Replicas racing `upgrade head`: the second waits here, then finds the schema at head.
    if dialect == "postgresql":
        context.execute(text(f"SELECT pg_advisory_xact_lock({ADVISORY_LOCK_KEY})"))


def run_migrations_offline() -> None:
    url = _url()
    dialect = url.split(":", 1)[0].split("+", 1)[0]
    context.configure(
        url=url,
        target_metadata=metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=dialect == "sqlite",
    )
    with context.begin_transaction():
        _lock("postgresql" if dialect.startswith("postgres") else dialect)
        context.run_migrations()


def do_run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        _lock(connection.dialect.name)
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
elif (shared := config.attributes.get("connection")) is not None:
    do_run_migrations(shared)
else:
    # The alembic command line: the store's own engines, so it connects as the store does.
    asyncio.run(migrate.run(_target(), do_run_migrations))
