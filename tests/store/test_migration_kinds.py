"""Every migration says whether older code survives it, and none waits long for a table lock."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import pytest
from alembic.script import ScriptDirectory
from cli_support import run

from relay.errors import StoreUnavailableError
from relay.store.sql import compat, migrate
from relay.store.url import resolve


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(migrate.alembic_config())


def test_every_migration_declares_its_kind() -> None:
    """Each migration module sets `kind` to expand or contract (a new one without it fails here)."""
    kinds = {script.revision: compat.kind(script) for script in _scripts().walk_revisions()}
    assert kinds["0005"] == compat.CONTRACT  # narrowed a column older code wrote wider
    assert kinds["0006"] == compat.EXPAND
    assert set(kinds.values()) <= {compat.EXPAND, compat.CONTRACT}


def test_oldest_head_is_the_newest_contract_at_or_below() -> None:
    """The record a database at each revision gets: the newest contract migration up to it."""
    scripts = _scripts()
    assert compat.oldest_head(scripts, "0007") == "0005"
    assert compat.oldest_head(scripts, "0006") == "0005"
    assert compat.oldest_head(scripts, "0005") == "0005"
    assert compat.oldest_head(scripts, "0002") == "0001"


def test_offline_sql_sets_the_lock_timeout(tmp_path: Path) -> None:
    """`migrate --sql` sets lock_timeout right after the migration lock, in milliseconds."""
    result = run(
        tmp_path,
        "migrate",
        "--sql",
        "--from-empty",
        "--lock-timeout",
        "2.5",
        "--store",
        "postgresql://u@localhost/db",
    )
    assert result.code == 0, result.describe()
    lock = result.stdout.index("pg_advisory_xact_lock")
    assert result.stdout.index("SET LOCAL lock_timeout = '2500ms'") > lock


@pytest.mark.postgres
async def test_migration_gives_up_on_a_held_table_lock(pg_database: str) -> None:
    """A migration that needs a table a long transaction holds gives up after --lock-timeout,
    changes nothing, and says how to go on; without the holder it then succeeds."""
    target = resolve(pg_database)
    await migrate.upgrade(target, "0004")
    holder = await asyncpg.connect(pg_database.replace("+asyncpg", ""))
    try:
        await holder.execute("BEGIN; SELECT count(*) FROM relay_started")
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError) as raised:
            await migrate.upgrade(target, lock_timeout_ms=300)
        waited = time.monotonic() - started
    finally:
        await holder.close()
    assert "waited past its lock timeout" in str(raised.value)
    assert "--lock-timeout" in str(raised.value)
    assert waited < 10
    assert await migrate.current(target) == "0004"
    await asyncio.wait_for(migrate.upgrade(target, lock_timeout_ms=300), 30)
    assert await migrate.current(target) == migrate.head_revision()


@pytest.mark.sqlite
async def test_migrate_to_a_revision_goes_down_and_up(tmp_path: Path) -> None:
    """`migrate --to REV` rolls back below head and forward again; an unknown REV is bad input."""
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    home = tmp_path / "xdg"
    home.mkdir()
    assert run(home, "migrate", "--store", url).code == 0
    down = run(home, "migrate", "--to", "0004", "--store", url)
    assert (down.code, "is at 0004, not at head" in down.stdout) == (0, True), down.describe()
    up = run(home, "migrate", "--store", url)
    assert (up.code, f"is at head {migrate.head_revision()}" in up.stdout) == (0, True)
    unknown = run(home, "migrate", "--to", "0042", "--store", url)
    assert (unknown.code, "no revision '0042'" in unknown.stderr) == (2, True), unknown.describe()


@pytest.mark.sqlite
async def test_migrations_write_the_compatibility_record(tmp_path: Path) -> None:
    """At head the record names the newest contract migration and this release; below 0007 the
    record is gone with its table, and back at head it is written again."""
    from relay import __version__

    target = resolve(f"sqlite:///{tmp_path / 'relay.db'}")
    await migrate.upgrade(target)
    found = await migrate.standing(target)
    assert (found.current, found.oldest_head, found.migrated_by) == (
        migrate.head_revision(),
        "0010",
        __version__,
    )
    await migrate.downgrade(target, "0006")
    assert (await migrate.standing(target)).oldest_head is None
    await migrate.upgrade(target)
    assert (await migrate.standing(target)).oldest_head == "0010"
