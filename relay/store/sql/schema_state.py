"""Where a database stands against the migrations, read on the raw driver."""

from __future__ import annotations

from sqlalchemy import func, select, text

from relay.store.sql import version_table
from relay.store.sql.compat import Standing, compat_table
from relay.store.sql.drivers.runner import Runner, Tx, first, scalar


async def schema_revision(runner: Runner) -> str | None:
    """The relay's Alembic revision; None when the store has no relay schema."""
    return (await schema_standing(runner)).current


async def schema_standing(runner: Runner) -> Standing:
    """Where the store stands against this code: its revision and its compatibility record.

    The revision is in `relay_alembic_version`, else (a database below 0010) in `alembic_version`
    when the relay's is there; never anyone else's revision (`relay.store.sql.version_table`)."""
    d = runner.dialect
    names = (version_table.NAME, version_table.SHARED, version_table.MARKER, compat_table.name)
    present = d.compile(
        select(*(func.to_regclass(name).is_not(None) for name in names))
        if d.postgres
        else select(
            *(text(f"(SELECT count(*) FROM sqlite_master WHERE name = '{name}')") for name in names)
        )
    )
    own = d.compile(select(version_table.table.c.version_num))
    shared = d.compile(select(version_table.shared.c.version_num))
    record = d.compile(
        select(compat_table.c.oldest_head, compat_table.c.migrated_by).where(compat_table.c.id == 1)
    )

    async def body(tx: Tx) -> Standing:
        tables = await first(tx, present)
        assert tables is not None
        has_own, has_shared, has_marker, has_compat = (bool(found) for found in tables)
        if has_own:
            revision = await scalar(tx, own)
        elif has_shared and has_marker:
            revision = version_table.pick(str(row[0]) for row in await tx.rows(shared))
        else:
            revision = None
        if revision is None:
            return Standing(None)
        row = await first(tx, record) if has_compat else None
        return Standing(revision) if row is None else Standing(revision, row[0], row[1])

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
