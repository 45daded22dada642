"""Alembic migrations from code: `upgrade(url)`, `downgrade(url, rev)`, `head_revision()`.

The same scripts serve `alembic upgrade head` in a checkout (root `migrations/`) and
`talaria-relay migrate` from a wheel (shipped as `relay/_migrations`).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Connection, inspect, select, text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from relay.errors import InvalidInputError, SchemaError, StoreError, StoreUnavailableError
from relay.store.forkgate import GATE as FORK_GATE
from relay.store.sql import compat, schema, version_table
from relay.store.sql.compat import Standing, later, schema_standing
from relay.store.sql.drivers import sqlstate
from relay.store.sql.drivers.engines import WRITE, postgres_engine, sqlite_engine
from relay.store.sql.drivers.runner import Runner
from relay.store.sql.drivers.sqlite import SqliteRunner, create_private
from relay.store.sql.drivers.sqlstate import store_error
from relay.store.sql.schema import HEAD_REVISION
from relay.store.url import StoreTarget, schema_name
from relay.store.url import command as cli_command

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

# Alembic is imported only where a migration runs: reading a revision, `status` and `check` on
# SQLite, and the embedded store at head, never load it.

# Held (per transaction) by every Postgres migration, so replicas racing `upgrade head` take turns.
ADVISORY_LOCK_KEY = 0x74616C61726961  # "talaria"
# How long a migration waits for a table lock before it gives up, changing nothing: past it, the
# replicas queued behind the migration's own lock request would stall (`migrate --lock-timeout`).
LOCK_TIMEOUT_MS = 5000
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


def alembic_config(
    url: str | None = None,
    connection: Connection | None = None,
    *,
    lock_timeout_ms: int = LOCK_TIMEOUT_MS,
    schema: str | None = None,
) -> Config:
    """An Alembic config for our scripts, on `url` or on a connection the caller holds (whose
    Postgres schema, if any, is `schema`)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location()))
    if url is not None:
        config.attributes["url"] = url
    if connection is not None:
        config.attributes["connection"] = connection
        config.attributes["schema"] = schema
    config.attributes["lock_timeout_ms"] = lock_timeout_ms
    return config


def head_revision() -> str:
    """The revision the scripts end at: the one `schema.py` describes (a test holds them equal)."""
    return HEAD_REVISION


def current_revision(connection: Connection) -> str | None:
    """The relay's revision (found as `version_table` says), on a SQLAlchemy connection."""
    from alembic.runtime.migration import MigrationContext

    opts = {"version_table": version_table.NAME}
    found = MigrationContext.configure(connection, opts=opts).get_current_revision()
    return found if found is not None else version_table.legacy_revision(connection)


def revisions(after: str | None = None) -> list[Revision]:
    """The scripts' revisions above `after` (None: every one), oldest first; none above a
    revision the scripts do not know."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    found = [
        Revision(str(s.revision), (s.doc or "").strip().splitlines()[0] if s.doc else "")
        for s in script.walk_revisions("base", "heads")
    ][::-1]  # walked from the head down
    if after is None:
        return found
    ids = [revision.id for revision in found]
    return found[ids.index(after) + 1 :] if after in ids else []


def upgrade_locked(
    connection: Connection,
    revision: str = "head",
    *,
    lock_timeout_ms: int = LOCK_TIMEOUT_MS,
    force: bool = False,
    schema: str | None = None,
) -> str | None:
    """Upgrade on a connection whose open transaction already excludes other migrators (SQLite)
    or takes the advisory lock that does (Postgres); the revision it found, read under that
    lock (so what lies above it is what this upgrade applied, not what a racing replica did).
    A database already ahead of this code is left alone: the caller reads where it stands."""
    from alembic import command
    from alembic.script import ScriptDirectory

    config = alembic_config(connection=connection, lock_timeout_ms=lock_timeout_ms, schema=schema)
    if connection.dialect.name == "postgresql":
        # Taken here (env.py takes it again) so the checks below see what the upgrade will do.
        connection.execute(text(f"SELECT pg_advisory_xact_lock({ADVISORY_LOCK_KEY})"))
    current = current_revision(connection)
    if Standing(current, head=head_revision()).ahead:
        return current
    scripts = ScriptDirectory.from_config(config)
    # The migrations this upgrade applies, oldest first (walked from the target down).
    steps = reversed(list(scripts.iterate_revisions(known(scripts, revision), current or "base")))
    contracts = [s.revision for s in steps if s is not None and compat.kind(s) == compat.CONTRACT]
    if contracts and not force:
        refuse_breaking(connection, contracts[-1])
    command.upgrade(config, revision)
    return current


def refuse_breaking(connection: Connection, contract: str) -> None:
    """The fleet guard: `SchemaError` naming every live replica whose code a database at
    `contract` (a contract migration) no longer takes, those built for an older schema head."""
    if not inspect(connection).has_table(schema.fleet.name):
        return
    now = int(time.time() * 1000)
    f = schema.fleet.c
    rows = connection.execute(
        select(f.owner, f.version, f.schema_head, f.host, f.pid, f.seen_at)
        .where(f.live_until > now)
        .order_by(f.owner)
    ).all()
    found = [
        f"{owner} (talaria-relay {version}, schema head {head}, pid {pid} on {host}, "
        f"seen {max(0, now - seen) / 1000:.0f} s ago)"
        for owner, version, head, host, pid, seen in rows
        if later(contract, head)
    ]
    if found:
        raise SchemaError(
            f"migration {contract} is a contract one: code of an older schema head stops "
            f"working on it, and {len(found)} live replica(s) run such code: "
            + "; ".join(found)
            + ". Roll them out to this release first (they leave the fleet when they stop), "
            "or pass --force to migrate anyway"
        )


def known(scripts: ScriptDirectory, revision: str) -> str:
    """`revision` if this code's scripts hold it ("head" for theirs), else `InvalidInputError`."""
    if revision in ("head", "base") or (revision.lstrip("+-").isdigit() and revision[0] in "+-"):
        return revision  # Alembic's own words, and steps relative to the current revision
    unknown = f"no revision {revision!r} in this code's migrations (0001 to {head_revision()})"
    try:
        found = scripts.get_revision(revision)
    except Exception as exc:  # alembic raises several kinds for a revision it cannot place
        raise InvalidInputError(unknown) from exc
    if found is None:
        raise InvalidInputError(unknown)
    return found.revision


async def upgrade(
    target: StoreTarget,
    revision: str = "head",
    *,
    lock_timeout_ms: int = LOCK_TIMEOUT_MS,
    force: bool = False,
) -> list[Revision]:
    """Migrate the store `target` names (`resolve(url)`) to `revision`; the revisions this call
    applied, oldest first (none when another migrator, or an earlier run, got there first).

    A contract migration is refused (`SchemaError` naming them) while live replicas of older
    code would break on it, unless `force`.
    """

    def step(connection: Connection) -> str | None:
        schema = schema_name(target.sqlalchemy_url)
        return upgrade_locked(
            connection, revision, lock_timeout_ms=lock_timeout_ms, force=force, schema=schema
        )

    before = await run(target, step)
    applied = revisions(before)
    if revision != "head":
        ids = [r.id for r in applied]
        applied = applied[: ids.index(revision) + 1] if revision in ids else []
    return applied


async def current(target: StoreTarget) -> str | None:
    """The revision the store is at; None for an empty (or missing SQLite) database."""
    return (await standing(target)).current


async def standing(target: StoreTarget) -> Standing:
    """Where the store stands against this code: its revision and compatibility record."""
    if target.url is None:
        raise InvalidInputError(f"a {target.name} store has no schema revision")
    if target.backend == "sqlite" and not (target.path and target.path.exists()):
        return Standing(None, head=head_revision())
    try:
        # Read-only: asking the revision must work on a file this process may not write.
        runner = await open_runner(target, read_only=True)
        try:
            return replace(await schema_standing(runner), head=head_revision())
        finally:
            await runner.close()
    except StoreError as exc:
        if target.backend == "postgres" or isinstance(exc, StoreUnavailableError):
            raise
        # A file that is no SQLite database is a store that cannot be opened (docs/operating.md).
        raise file_error(exc.__cause__ or exc, target) from exc


async def open_runner(target: StoreTarget, *, read_only: bool = False) -> Runner:
    """A runner on the store `target` names; a SQLite file is made (private) unless `read_only`."""
    if target.backend == "postgres":
        from relay.store.sql.drivers.postgres import PostgresRunner  # asyncpg: Postgres only

        url = target.sqlalchemy_url
        return await PostgresRunner.open(url, target.display, schema=schema_name(url))
    assert target.path is not None
    if not read_only:
        try:
            create_private(target.path)
        except OSError as exc:
            raise file_error(exc, target) from exc
    return await SqliteRunner.open(target.path, target.display, read_only=read_only)


def offline_sql(
    target: StoreTarget, since: str | None = None, *, lock_timeout_ms: int = LOCK_TIMEOUT_MS
) -> None:
    """Print the DDL of an upgrade to head for the store, from revision `since` (None: from an
    empty database), without connecting to it."""
    from alembic import command

    address = target.sqlalchemy_url.render_as_string(hide_password=False)
    config = alembic_config(address, lock_timeout_ms=lock_timeout_ms)
    # The relay's revision moves out of `alembic_version` first (migrations/env.py).
    config.attributes["since"] = since
    command.upgrade(config, "head" if since is None else f"{since}:head", sql=True)


async def downgrade(
    target: StoreTarget, revision: str, *, lock_timeout_ms: int = LOCK_TIMEOUT_MS
) -> None:
    """Migrate the store down to `revision` (a rollback: see docs/rolling-deploys.md)."""
    from alembic import command
    from alembic.script import ScriptDirectory

    def step(connection: Connection) -> None:
        config = alembic_config(connection=connection, lock_timeout_ms=lock_timeout_ms)
        command.downgrade(config, known(ScriptDirectory.from_config(config), revision))

    await run(target, step)


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
            raise migration_error(exc, target) from exc
        finally:
            await engine.dispose()
        return answer
    assert target.path is not None
    try:
        return await asyncio.to_thread(FORK_GATE.run, _on_sqlite, target.path, step)
    except (OSError, sqlite3.Error, DBAPIError) as exc:
        raise file_error(exc, target) from exc


async def ensure_sqlite_schema(path: Path) -> None:
    """Migrate an embedded SQLite file to head, once, whoever of several processes comes first."""

    def step(connection: Connection) -> None:
        # Only up: a database a newer release migrated meanwhile is left as it is. The fleet
        # guard is `migrate`'s: a restarted embedded app upgrades its file.
        if Standing(current_revision(connection)).below:
            upgrade_locked(connection, force=True)

    await asyncio.to_thread(FORK_GATE.run, _on_sqlite, path, step)


def _on_sqlite(path: Path, step: Callable[[Connection], T]) -> T:
    # Inside BEGIN IMMEDIATE: processes opening one new file at once migrate it in turn.
    engine = sqlite_engine(path)
    try:
        with engine.connect() as connection:
            connection.execution_options(**{WRITE: True})
            with connection.begin():
                return step(connection)
    finally:
        engine.dispose()


def create_schema_sql(name: str) -> str:
    """The statement that makes the relay's Postgres schema (`name`: a checked plain identifier)."""
    return f"CREATE SCHEMA IF NOT EXISTS {name}"


def ensure_schema(connection: Connection, name: str | None) -> None:
    """Create the Postgres schema a URL names (`?schema=NAME`), where every relay object lives,
    if it is missing and the role may; otherwise a `SchemaError` names the grant it needs."""
    if name is None or connection.dialect.name != "postgresql":
        return
    found = connection.execute(text("SELECT 1 FROM pg_namespace WHERE nspname = :n"), {"n": name})
    if found.first() is not None:
        return  # CREATE ... IF NOT EXISTS would still need the privilege it does not use
    try:
        with connection.begin_nested():
            connection.execute(text(create_schema_sql(name)))
    except DBAPIError as exc:
        original = exc.orig
        state = getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)
        state = state or getattr(getattr(original, "__cause__", None), "sqlstate", None)
        if str(state) != "42501":  # insufficient_privilege: here CREATE on the database
            raise
        who = connection.execute(text("SELECT current_user, current_database()")).one()
        raise SchemaError(
            f"the relay's schema {name} does not exist and role {who[0]} may not create it: "
            f'have the database owner run `CREATE SCHEMA {name} AUTHORIZATION "{who[0]}"` (or '
            f'`GRANT CREATE ON DATABASE "{who[1]}" TO "{who[0]}"`), then migrate again'
        ) from exc


def migration_error(exc: BaseException, target: StoreTarget) -> StoreError:
    """A driver's error in a migration, naming the store but never its password; a lock wait
    past the timeout says what to do."""
    orig = getattr(exc, "orig", None)
    text = str(orig or exc)
    message = text.splitlines()[0] if text else type(exc).__name__
    password = target.url.password if target.url is not None else None
    if password:
        message = message.replace(password, "***")
    cause = orig.__cause__ if orig else None
    state = str(getattr(orig, "sqlstate", None) or getattr(cause, "sqlstate", None) or "")
    failed = isinstance(exc, DBAPIError) and not (
        exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError)
    )
    message = sqlstate.explained(exc, state, message)
    if state == "42501":
        message += " (migrate as the owner role)"
    if "lock_timeout" in message:
        return StoreUnavailableError(
            f"relay store {target.display}: the migration waited past its lock timeout for a "
            "table that a transaction holds, and changed nothing: run it again when that "
            "transaction ends, or give it longer "
            f"({cli_command('migrate --lock-timeout 60', target)})"
        )
    return store_error(target.display, message, failed=failed and not sqlstate.unavailable(state))


def file_error(exc: BaseException, target: StoreTarget) -> StoreError:
    """A SQLite file that cannot be opened or written (read-only, not a file): one line."""
    text = getattr(exc, "strerror", None) or str(getattr(exc, "orig", None) or exc)
    return store_error(target.display, text)
