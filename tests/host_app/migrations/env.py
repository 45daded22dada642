"""The host application's Alembic environment, as a host embedding the relay writes it: its own
metadata, its own `alembic_version`, and the relay's helpers so autogenerate leaves the relay's
tables alone (`relay.store.hosting`).

The URL comes from `HOST_APP_DATABASE_URL` (`sqlite:///…`, or `postgresql+asyncpg://…`).
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from host_app.models import metadata
from sqlalchemy import Connection, create_engine, pool
from sqlalchemy.ext.asyncio import create_async_engine

from relay.store.hosting import include_name, include_object

URL = os.environ["HOST_APP_DATABASE_URL"]


def configure(**extra: object) -> None:
    context.configure(
        target_metadata=metadata,
        include_name=include_name,
        include_object=include_object,
        **extra,  # type: ignore[arg-type]
    )


def run(connection: Connection) -> None:
    configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


async def run_async() -> None:
    engine = create_async_engine(URL, poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(run)
        await connection.commit()
    await engine.dispose()


if context.is_offline_mode():
    configure(url=URL, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif "+asyncpg" in URL:
    asyncio.run(run_async())
else:
    engine = create_engine(URL, poolclass=pool.NullPool)
    with engine.connect() as connection:
        run(connection)
        connection.commit()
