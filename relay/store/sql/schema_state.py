"""Where a database stands against the migrations, read on the raw driver."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import Column, MetaData, String, Table, func, select, text

from relay.store.forkgate import GATE as FORK_GATE
from relay.store.sql import migrate
from relay.store.sql.drivers.engines import WRITE, sqlite_engine
from relay.store.sql.drivers.runner import Runner, Tx, first, scalar

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


async def unwritable(runner: Runner) -> str | None:
    """Why a Postgres server would refuse the store's writes now: a standby (in recovery), or
    read-only by setting (`default_transaction_read_only`); None when it takes them (SQLite:
    its file's permissions show at the first write instead)."""
    d = runner.dialect
    if not d.postgres:
        return None
    q = d.compile(select(func.pg_is_in_recovery(), func.current_setting("transaction_read_only")))

    async def body(tx: Tx) -> str | None:
        row = await first(tx, q)
        assert row is not None
        if row[0]:
            return "the server is in recovery (a standby): it takes no writes"
        if row[1] == "on":
            return "the server is read-only (default_transaction_read_only): it takes no writes"
        return None

    return await runner.read(body)


async def ensure_sqlite_schema(path: Path) -> None:
    """Migrate an embedded SQLite file to head, once, whoever of several processes comes first."""
    await asyncio.to_thread(FORK_GATE.run, _migrate, path)


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
