"""Alembic migrations from code: `upgrade(url)`, `downgrade(url, rev)`, `head_revision()`.

The same scripts serve `alembic upgrade head` in a checkout (root `migrations/`) and
`talaria-relay migrate` from a wheel (shipped as `relay/_migrations`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from relay.errors import InvalidInputError, SchemaError, StoreUnavailableError
from relay.store.forkgate import GATE as FORK_GATE
from relay.store.sql.drivers.engines import WRITE, postgres_engine, sqlite_engine
from relay.store.sql.drivers.sqlite import connect_read_only
from relay.store.sql.schema import HEAD_REVISION, TABLES_REVISION
from relay.store.url import StoreTarget, driver_error, resolve

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic is imported only where a migration runs: reading a revision, `status` and `check` on
# SQLite, and the embedded store at head, never load it.

# Held (per transaction) by every Postgres migration, so replicas racing `upgrade head` take turns.
ADVISORY_LOCK_KEY = 0x74616C61726961  # "talaria"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Revision:
    """One migration script: its id (`0006`) and the first line of its docstring."""

    id: str
    doc: str


def script_location() -> Path:
    package = Path(__file__).resolve().parents[2]
    shipped = package / "_migrations"
    return shipped if shipped.is_dir() else package.parent / "migrations"


def alembic_config(url: str | None = None, connection: Connection | None = None) -> Config:
    """An Alembic config for our scripts, on `url` or on a connection the caller holds."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location()))
    if url is not None:
        config.attributes["url"] = url
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The revision the scripts end at: the one `schema.py` describes (a test holds them equal)."""
    return HEAD_REVISION


def runnable(current: str | None) -> bool:
    """Whether a store runs on a database at `current`: head, or a revision with head's tables
    (below head `check` still says so, and `migrate` brings it there)."""
    return current in (HEAD_REVISION, TABLES_REVISION)


def current_revision(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def schema_error(current: str | None) -> SchemaError:
    state = "has no relay schema" if current is None else f"is at revision {current}"
    return SchemaError(
        f"the relay database {state}, not at head {head_revision()}: "
        "run `talaria-relay migrate` (or `alembic upgrade head`) first"
    )


def revisions(after: str | None = None) -> list[Revision]:
    """The scripts' revisions above `after` (None: every one), oldest first; none above a
    revision the scripts do not know."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    found = [
        Revision(str(s.revision), (s.doc or "").strip().splitlines()[0] if s.doc else "")
        for s in script.walk_revisions("base", "heads")
    ]
    found.reverse()  # walked from the head down
    if after is None:
        return found
    ids = [revision.id for revision in found]
    return found[ids.index(after) + 1 :] if after in ids else []


def upgrade_locked(connection: Connection, revision: str = "head") -> None:
    """Upgrade on a connection whose open transaction already excludes other migrators."""
    from alembic import command

    command.upgrade(alembic_config(connection=connection), revision)


async def upgrade(target: StoreTarget, revision: str = "head") -> list[Revision]:
    """Migrate the store `target` names (`resolve(url)`) to `revision`; the revisions this call
    applied, oldest first (none when another migrator, or an earlier run, got there first)."""

    def step(connection: Connection) -> str | None:
        # The revision is read under the migrators' lock (SQLite: BEGIN IMMEDIATE), so what we
        # list is what this transaction applied, not what a racing replica did.
        if connection.dialect.name == "postgresql":
            connection.execute(text(f"SELECT pg_advisory_xact_lock({ADVISORY_LOCK_KEY})"))
        before = current_revision(connection)
        upgrade_locked(connection, revision)
        return before

    before = await run(target, step)
    applied = revisions(before)
    if revision != "head":
        ids = [r.id for r in applied]
        applied = applied[: ids.index(revision) + 1] if revision in ids else []
    return applied


async def current(target: StoreTarget) -> str | None:
    """The revision the store is at; None for an empty (or missing SQLite) database."""
    if target.url is None:
        raise InvalidInputError(f"a {target.name} store has no schema revision")
    if target.backend == "sqlite":
        assert target.path is not None
        path = target.path
        if not path.exists():
            return None

        def on_sqlite() -> str | None:
            # Read-only: asking the revision must work on a file this process may not write.
            conn = connect_read_only(path)
            try:
                tables = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
                ).fetchall()
                if not tables:
                    return None
                row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
                return None if row is None else str(row[0])
            finally:
                conn.close()

        try:
            return await asyncio.to_thread(FORK_GATE.run, on_sqlite)
        except sqlite3.Error as exc:
            raise file_error(exc, target) from exc
    engine = postgres_engine(target.sqlalchemy_url)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(current_revision)
    except (DBAPIError, OSError, TimeoutError) as exc:
        raise driver_error(exc, target) from exc
    finally:
        await engine.dispose()


def offline_sql(target: StoreTarget, since: str | None = None) -> None:
    """Print the DDL of an upgrade to head for the store, from revision `since` (None: from an
    empty database), without connecting to it."""
    from alembic import command

    address = target.sqlalchemy_url.render_as_string(hide_password=False)
    command.upgrade(alembic_config(address), "head" if since is None else f"{since}:head", sql=True)


async def downgrade(target: StoreTarget, revision: str) -> None:
    from alembic import command

    await run(
        target,
        lambda connection: command.downgrade(alembic_config(connection=connection), revision),
    )


async def run(target: StoreTarget, step: Callable[[Connection], T]) -> T:
    """Run a migration `step` on a connection to the store, in one write transaction, with the
    store's own engine (SQLite: `BEGIN IMMEDIATE` on sqlite3; Postgres: asyncpg); its answer."""
    if target.url is None:
        raise InvalidInputError(f"a {target.name} store has no schema to migrate")
    if target.backend == "postgres":
        engine = postgres_engine(target.sqlalchemy_url)
        try:
            async with engine.connect() as connection:
                answer = await connection.run_sync(step)
                await connection.commit()
        except (DBAPIError, OSError, TimeoutError) as exc:
            raise driver_error(exc, target) from exc
        finally:
            await engine.dispose()
        return answer
    assert target.path is not None
    path = target.path

    def on_sqlite() -> T:
        engine = sqlite_engine(path)
        try:
            with engine.connect() as connection:
                connection.execution_options(**{WRITE: True})
                with connection.begin():
                    return step(connection)
        finally:
            engine.dispose()

    try:
        return await asyncio.to_thread(FORK_GATE.run, on_sqlite)
    except (OSError, sqlite3.Error, DBAPIError) as exc:
        raise file_error(exc, target) from exc


def file_error(exc: BaseException, target: StoreTarget) -> StoreUnavailableError:
    """A SQLite file that cannot be opened or written (read-only, not a file): one line."""
    text = getattr(exc, "strerror", None) or str(getattr(exc, "orig", None) or exc)
    return StoreUnavailableError(f"relay store {target.display} is unavailable: {text}")


if __name__ == "__main__":
    # `python -m relay.store.sql.migrate [URL]`: upgrade the store (default: the SQLite file).
    import sys

    _target = resolve(sys.argv[1] if len(sys.argv) > 1 else None)
    asyncio.run(upgrade(_target))
    print(f"{_target.display} is at revision {head_revision()}")
