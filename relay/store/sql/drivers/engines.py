"""The engines behind the SQL store and its migrations, configured once for each dialect."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import URL, Engine, create_engine, event
from sqlalchemy.pool import StaticPool

from relay.store.sql.drivers.sqlite import BUSY_TIMEOUT_S, connect, create_private

if TYPE_CHECKING:  # its import costs a tenth of a second (it loads the ORM): only to migrate
    from sqlalchemy.ext.asyncio import AsyncEngine

# Execution option that makes the next transaction `BEGIN IMMEDIATE` on SQLite.
WRITE = "relay_write"


def sqlite_engine(path: Path) -> Engine:
    """A synchronous engine on one connection made as the store makes its own (`connect`: no
    implicit transactions, WAL, `synchronous=FULL`), to be used from one thread only; a write
    transaction starts with `BEGIN IMMEDIATE`, as the store's do (`sqlite`)."""
    create_private(path)
    engine = create_engine(
        URL.create("sqlite+pysqlite", database=str(path)),
        poolclass=StaticPool,
        creator=lambda: connect(path, busy_timeout_s=BUSY_TIMEOUT_S),
    )

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        write = connection.get_execution_options().get(WRITE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def postgres_engine(url: URL) -> AsyncEngine:
    """An asyncpg pool, connecting exactly as the store's runner does (one reading of the URL).

    SQLAlchemy would hand libpq parameters (`application_name`, `options`, `sslrootcert`, …) to
    `asyncpg.connect` as keywords it does not take; the runner's options pass them in a DSN.
    """
    from sqlalchemy.ext.asyncio import create_async_engine

    from relay.store.sql.drivers.postgres import connect_options

    options = connect_options(url)

    async def connect() -> Any:
        import asyncpg

        return await asyncpg.connect(**options)

    return create_async_engine(
        URL.create("postgresql+asyncpg"), async_creator=connect, pool_size=5, max_overflow=10
    )
