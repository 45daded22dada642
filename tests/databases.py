"""Postgres administration for the tests, and fresh stores for tests that need one per example."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, make_url

from relay.store import resolve
from relay.store.sql.drivers.engines import postgres_engine, sqlite_engine
from relay.store.sql.migrate import upgrade
from relay.store.sql.schema import metadata


def _asyncpg_dsn(url: str, database: str | None = None) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


async def admin_execute(url: str, *statements: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(url), timeout=5)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def execute(url: str, *statements: str) -> None:
    """Run `statements` in one transaction on the SQLite file or Postgres database of `url`."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        with conn:
            for statement in statements:
                conn.execute(statement)
        conn.close()
    else:
        asyncio.run(admin_execute(url, *statements))


def own_database(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> str:
    """The URL of an empty database of the test's own on `backend` (never a shared clone)."""
    if backend == "postgres":
        url: str = request.getfixturevalue("pg_database")
        return url
    return f"sqlite:///{tmp_path / 'relay.db'}"


async def set_read_only(url: str, read_only: bool) -> None:
    """Make the database at `url` read-only for new connections, or take that back."""
    name = make_url(url).database
    setting = (
        "SET default_transaction_read_only = on"
        if read_only
        else "RESET default_transaction_read_only"
    )
    # The session that changes it writes whatever its database's default says.
    await admin_execute(
        url, "SET default_transaction_read_only = off", f'ALTER DATABASE "{name}" {setting}'
    )


async def sessions_ended(url: str, timeout_s: float) -> bool:
    """Whether every other session on the database at `url` ends within `timeout_s`.

    A COMMIT that a killed process sent just before it died still commits if the server read it:
    until its session ends, a read could see the database before that commit and after it both.
    """
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(url), timeout=5)
    try:
        for _ in range(int(timeout_s / 0.02)):
            others = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            if others == 0:
                return True
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    return False


def pg_store_url(admin_url: str, database: str) -> str:
    return (
        make_url(admin_url)
        .set(drivername="postgresql+asyncpg", database=database)
        .render_as_string(hide_password=False)
    )


# What a test may change besides rows: tables, columns, indexes, constraints, grants, functions,
# triggers, schemas, the migration revision and the database's own settings. A clone whose shape
# still matches a fresh one's only needs its rows emptied to be fresh again. Read from pg_catalog
# (its information_schema views cost a fresh session twice the time; one runs after every test).
SHAPE = """
SELECT md5(string_agg(part, '|' ORDER BY part)) FROM (
  SELECT format('r %s.%s %s %s', n.nspname, c.relname, c.relkind, c.relacl)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  UNION ALL SELECT format('c %s.%s %s %s %s %s', n.nspname, c.relname, a.attname,
      format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_attrdef d ON (d.adrelid, d.adnum) = (a.attrelid, a.attnum)
    WHERE a.attnum > 0 AND NOT a.attisdropped
      AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  UNION ALL SELECT format('k %s %s', conrelid::regclass, pg_get_constraintdef(oid))
    FROM pg_constraint WHERE connamespace <> 'pg_catalog'::regnamespace
  UNION ALL SELECT format('i %s', indexdef) FROM pg_indexes WHERE schemaname <> 'pg_catalog'
  UNION ALL SELECT format('t %s %s', tgrelid::regclass, tgname) FROM pg_trigger
    WHERE NOT tgisinternal
  UNION ALL SELECT format('f %s', oid::regprocedure) FROM pg_proc
    WHERE pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL SELECT format('n %s %s', nspname, nspacl) FROM pg_namespace
  UNION ALL SELECT format('e %s', extname) FROM pg_extension
  UNION ALL SELECT format('d %s %s %s', datallowconn, datconnlimit, datacl) FROM pg_database
    WHERE datname = current_database()
  UNION ALL SELECT format('s %s', setconfig) FROM pg_db_role_setting
    WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL SELECT format('v %s', version_num) FROM relay_alembic_version
) AS parts(part)
"""


# Every row gone, in one round trip. DELETE, not TRUNCATE: a test leaves a few rows, and TRUNCATE
# makes every table a new file (four times the time). No table has a sequence to restart.
EMPTY = ";".join(
    ["BEGIN", *(f'DELETE FROM "{t.name}"' for t in reversed(metadata.sorted_tables)), "COMMIT"]
)


class PgClones:
    """Copies of the migrated template, one a test, emptied and reused when the test left their
    shape alone.

    `CREATE DATABASE … TEMPLATE` and `DROP DATABASE … WITH (FORCE)` cost a checkpoint each;
    deleting the rows does not. A test that changed more than rows (a downgrade, a grant, a
    setting, a dropped table: anything in `SHAPE`) or left a database that cannot be emptied gets
    its clone dropped, and the next test a new one. Sessions a test left behind (a killed
    process's) are ended first, as `DROP … WITH (FORCE)` would.
    """

    def __init__(self, admin: str, template: str) -> None:
        self._admin = admin
        self._template = template
        self._free: list[str] = []
        self._fresh_shape: str | None = None

    def take(self) -> str:
        """The URL of an empty, migrated database no other test is using."""
        if self._free:
            return pg_store_url(self._admin, self._free.pop())
        name = f"relay_t_{uuid.uuid4().hex[:12]}"
        create = f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"'
        asyncio.run(admin_execute(self._admin, create))
        url = pg_store_url(self._admin, name)
        if self._fresh_shape is None:
            self._fresh_shape = asyncio.run(_shape(url))
        return url

    def give_back(self, url: str) -> None:
        """Empty the database for the next test, or drop it if its shape changed."""
        name = make_url(url).database
        assert name is not None
        try:
            emptied = asyncio.run(_empty_if_unchanged(url, self._fresh_shape))
        except Exception:  # unreachable, refusing connections, locked: not reusable
            emptied = False
        if emptied:
            self._free.append(name)
        else:
            _drop(self._admin, name)

    def close(self) -> None:
        while self._free:
            _drop(self._admin, self._free.pop())


def _drop(admin: str, name: str) -> None:
    asyncio.run(admin_execute(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _shape(url: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(url), timeout=5)
    try:
        return str(await conn.fetchval(SHAPE))
    finally:
        await conn.close()


async def _empty_if_unchanged(url: str, fresh_shape: str | None) -> bool:
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(url), timeout=5)
    try:
        if await conn.fetchval(SHAPE) != fresh_shape:
            return False
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        await conn.execute("SET lock_timeout = '5s'")
        await conn.execute(EMPTY)
        return True
    finally:
        await conn.close()


class FreshStores:
    """Fresh, migrated stores of one backend, one after another (a property test's examples).

    Each `url()` names an empty store, the previous one being done with: `memory://` (each open
    is a new store), a new JSON dir or SQLite file (a copy of one migrated once), or on Postgres
    one database, a copy of the template, emptied again for each example: dropping a database
    costs a checkpoint, emptying it does not.
    """

    def __init__(self, backend: str, tmp: Path, admin: str | None, template: str | None) -> None:
        self.backend = backend
        self._tmp = tmp
        self._admin = admin
        self._template = template
        self._made = 0
        self._database: str | None = None
        self._seed = tmp / "seed.db"
        if backend == "sqlite":
            asyncio.run(upgrade(resolve(f"sqlite:///{self._seed}")))

    def url(self) -> str:
        self._made += 1
        if self.backend == "memory":
            return "memory://"
        if self.backend == "json":
            return f"json://{self._tmp / f'state-{self._made}'}"
        if self.backend == "sqlite":
            path = self._tmp / f"relay-{self._made}.db"
            shutil.copyfile(self._seed, path)
            return f"sqlite:///{path}"
        assert self._admin is not None
        if self._database is None:
            self._database = f"relay_t_{uuid.uuid4().hex[:12]}"
            create = f'CREATE DATABASE "{self._database}" TEMPLATE "{self._template}"'
            asyncio.run(admin_execute(self._admin, create))
            return pg_store_url(self._admin, self._database)
        url = pg_store_url(self._admin, self._database)
        asyncio.run(admin_execute(url, EMPTY))
        return url

    def close(self) -> None:
        if self._admin is not None and self._database is not None:
            drop = f'DROP DATABASE IF EXISTS "{self._database}" WITH (FORCE)'
            asyncio.run(admin_execute(self._admin, drop))


async def behind_the_store(store_url: str, *statements: Any) -> list[Any]:
    """Run statements in one transaction on the store's own engine for its dialect, behind the
    store's back; each one's rows (or None)."""
    target = resolve(store_url)

    def run(conn: Connection) -> list[Any]:
        results = []
        for statement in statements:
            result = conn.execute(statement)
            results.append(result.all() if result.returns_rows else None)
        return results

    if target.backend == "sqlite":
        assert target.path is not None
        path = target.path

        def on_sqlite() -> list[Any]:
            engine = sqlite_engine(path)
            try:
                with engine.begin() as conn:
                    return run(conn)
            finally:
                engine.dispose()

        return await asyncio.to_thread(on_sqlite)
    engine = postgres_engine(target.sqlalchemy_url)
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(run)
    finally:
        await engine.dispose()
