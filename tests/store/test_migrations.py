"""The migrations are the schema: they build exactly `schema.py`, round-trip, and race safely."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sqlite3
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import forked
import mp_workers
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from processes import run_processes
from sqlalchemy import Connection, inspect

from relay.store.sql import migrate, version_table
from relay.store.sql.drivers.engines import postgres_engine, sqlite_engine
from relay.store.sql.schema import metadata
from relay.store.url import resolve

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty, unmigrated database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        yield request.getfixturevalue("pg_database")


async def _inspect(url: str, look: Any) -> Any:
    target = resolve(url)
    if target.backend == "sqlite":
        assert target.path is not None
        engine = sqlite_engine(target.path)
        try:
            with engine.connect() as conn:
                return look(conn)
        finally:
            engine.dispose()
    pool = postgres_engine(target.sqlalchemy_url)
    try:
        async with pool.connect() as conn:
            return await conn.run_sync(look)
    finally:
        await pool.dispose()


def _differences(conn: Connection) -> list[Any]:
    # The relay's own version table is Alembic's to keep, as `alembic_version` would be.
    context = MigrationContext.configure(conn, opts={"version_table": version_table.NAME})
    return list(compare_metadata(context, metadata))


def _relay_tables(conn: Connection) -> set[str]:
    return {name for name in inspect(conn).get_table_names() if name.startswith("relay_")}


async def _alembic(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    """`python -m alembic ARGS` in the checkout, forked from the fork server (`forked.py`)."""
    return await forked.run(
        "alembic", "-x", f"url={url}", *args, module=True, env=os.environ, cwd=ROOT, within_s=120
    )


def test_migrations_have_one_head() -> None:
    """The migration graph has exactly one head, the one the store expects."""
    heads = ScriptDirectory.from_config(migrate.alembic_config()).get_heads()
    assert heads == [migrate.head_revision()]


async def test_upgrade_head_builds_exactly_the_schema(empty_url: str) -> None:
    """`upgrade head` on an empty database leaves nothing for autogenerate to find."""
    await migrate.upgrade(resolve(empty_url))
    assert await _inspect(empty_url, _differences) == []
    assert await _inspect(empty_url, migrate.current_revision) == migrate.head_revision()


async def test_downgrade_base_then_upgrade_round_trips(empty_url: str) -> None:
    """Downgrading to base drops every relay table; upgrading again rebuilds the same schema."""
    await migrate.upgrade(resolve(empty_url))
    await migrate.downgrade(resolve(empty_url), "base")
    assert await _inspect(empty_url, _relay_tables) == set()
    await migrate.upgrade(resolve(empty_url))
    assert await _inspect(empty_url, _differences) == []


async def test_alembic_command_line_upgrades_and_checks(empty_url: str) -> None:
    """The `alembic` CLI (async env.py, URL from -x) upgrades; `alembic check` finds no drift."""
    upgraded = await _alembic("upgrade", "head", url=empty_url)
    assert upgraded.returncode == 0, upgraded.stderr
    checked = await _alembic("check", url=empty_url)
    assert checked.returncode == 0, checked.stderr
    assert "No new upgrade operations detected" in checked.stdout + checked.stderr


async def test_alembic_commands_that_read_leave_a_0009_database_as_it_is(empty_url: str) -> None:
    """On a database at 0009 (its revision in `alembic_version`), `alembic current` and `check`
    move nothing; `alembic upgrade head` moves the revision to the relay's own table."""
    await migrate.upgrade(resolve(empty_url), "0009")
    assert (await _alembic("current", url=empty_url)).returncode == 0
    assert (await _alembic("check", url=empty_url)).returncode != 0  # not up to date
    assert await _inspect(empty_url, version_table.legacy_revision) == "0009"
    assert (await _alembic("upgrade", "head", url=empty_url)).returncode == 0
    assert await _inspect(empty_url, version_table.legacy_revision) is None
    assert await _inspect(empty_url, migrate.current_revision) == migrate.head_revision()


async def test_concurrent_upgrades_all_succeed(empty_url: str) -> None:
    """Four processes running `upgrade head` at once all succeed and leave one schema at head."""
    run_processes(mp_workers.migrate, 4, empty_url)
    assert await _inspect(empty_url, migrate.current_revision) == migrate.head_revision()
    assert await _inspect(empty_url, _differences) == []


@pytest.mark.sqlite
async def test_a_new_sqlite_file_another_connection_writes_is_waited_for(tmp_path: Path) -> None:
    """A new file another connection is writing in rollback mode (a second process creating it,
    or a host's own writer): `upgrade` waits for its commit, within the busy timeout, and turns
    the file to WAL then (SQLite answers the switch busy at once, without its busy handler)."""
    path = tmp_path / "shared.db"
    host = sqlite3.connect(path, isolation_level=None)
    host.execute("BEGIN IMMEDIATE")
    host.execute("CREATE TABLE host_table (id INTEGER PRIMARY KEY)")
    asyncio.get_running_loop().call_later(0.5, host.execute, "COMMIT")
    await migrate.upgrade(resolve(f"sqlite:///{path}"))
    host.close()
    assert await _inspect(f"sqlite:///{path}", migrate.current_revision) == migrate.head_revision()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_offline_sql_takes_the_replica_lock() -> None:
    """`alembic upgrade head --sql` prints the DDL, advisory lock first, without a server."""
    result = await _alembic("upgrade", "head", "--sql", url="postgresql://nobody@127.0.0.1:1/none")
    assert result.returncode == 0, result.stderr
    assert result.stdout.index("pg_advisory_xact_lock") < result.stdout.index("CREATE TABLE")


async def test_offline_sql_of_0006_creates_the_batch_function_on_postgres_only(
    tmp_path: Path,
) -> None:
    """0006 prints `CREATE FUNCTION relay_batch` for Postgres (and its downgrade drops it);
    for SQLite it prints only the revision's bump."""
    pg = "postgresql://nobody@127.0.0.1:1/none"
    upgraded = await _alembic("upgrade", "0005:0006", "--sql", url=pg)
    assert upgraded.returncode == 0, upgraded.stderr
    assert "CREATE FUNCTION relay_batch(" in upgraded.stdout
    assert "SECURITY INVOKER" in upgraded.stdout
    downgraded = await _alembic("downgrade", "0006:0005", "--sql", url=pg)
    assert downgraded.returncode == 0, downgraded.stderr
    assert "DROP FUNCTION IF EXISTS relay_batch(text[]" in downgraded.stdout
    lite = await _alembic("upgrade", "0005:0006", "--sql", url=f"sqlite:///{tmp_path / 'r.db'}")
    assert lite.returncode == 0, lite.stderr
    assert "FUNCTION" not in lite.stdout
    assert "0006" in lite.stdout


def test_wheel_ships_the_migrations(tmp_path: Path) -> None:
    """The wheel carries the migrations, so `upgrade()` works from a plain `pip install`."""
    # The test extra installs the build backend: no isolated environment to fetch and set up.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("hatchling") else []
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            *isolation,
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("talaria_relay-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "relay/_migrations/env.py" in names
    assert "relay/_migrations/versions/0001_initial_relay_tables.py" in names
