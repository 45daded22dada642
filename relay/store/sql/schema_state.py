"""Where a database stands against the migrations, read on the raw driver."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import Column, MetaData, String, Table, func, select, text

from relay.store import migrate
from relay.store.engines import WRITE, sqlite_engine
from relay.store.sql.runner import Runner, Tx, scalar

_version = Table("alembic_version", MetaData(), Column("version_num", String(32)))


async def schema_revision(runner: Runner) -> str | None:
    """The Alembic revision the store is at; None when it has no relay schema."""
    d = runner.dialect
    present = d.compile(
        select(func.to_regclass("alembic_version").is_not(None))
        if d.postgres
        else select(text("count(*) FROM sqlite_master WHERE name = 'alembic_version'"))
    )
    version = d.compile(select(_version.c.version_num))

    async def body(tx: Tx) -> str | None:
        if not await scalar(tx, present):
            return None
        return await scalar(tx, version)  # type: ignore[no-any-return]

    return await runner.read(body)


async def ensure_sqlite_schema(path: Path) -> None:
    """Migrate an embedded SQLite file to head, once, whoever of several processes comes first."""
    await asyncio.to_thread(_migrate, path)


def _migrate(path: Path) -> None:
    engine = sqlite_engine(path)
    try:
        with engine.connect() as conn:
            conn.execution_options(**{WRITE: True})
            # Inside BEGIN IMMEDIATE: processes opening one new file at once migrate it in turn.
            with conn.begin():
                if migrate.current_revision(conn) != migrate.head_revision():
                    migrate.upgrade_locked(conn)
    finally:
        engine.dispose()
