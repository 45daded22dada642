"""`SqlStore`: `RelayStore` on SQLite or Postgres, one hook class per aggregate on one runner."""

from __future__ import annotations

from relay.store.gate import StoreGate
from relay.store.sql import migrate
from relay.store.sql.ledger import LedgerSql
from relay.store.sql.outbox import OutboxSql
from relay.store.sql.passes import PassesSql
from relay.store.sql.presence import PresenceSql
from relay.store.sql.registration import RegistrationSql
from relay.store.sql.revisions import RevisionsSql
from relay.store.sql.runner import Runner, Stats
from relay.store.sql.runs import RunsSql
from relay.store.sql.schema_state import (
    ensure_sqlite_schema,
    schema_revision,
    schema_standing,
    unwritable,
)
from relay.store.sql.sqlite import SqliteRunner, create_private
from relay.store.sql.transfer import TransferSql
from relay.store.url import StoreTarget


class SqlStore(
    RegistrationSql,
    RevisionsSql,
    LedgerSql,
    OutboxSql,
    PresenceSql,
    RunsSql,
    PassesSql,
    TransferSql,
    StoreGate,
):
    """Relay state in SQL tables; open with `await SqlStore.open(target)`."""

    def __init__(self, runner: Runner, display_url: str) -> None:
        self._db = runner
        self._display_url = display_url

    @classmethod
    async def open(cls, target: StoreTarget, *, read_only: bool = False) -> SqlStore:
        """Connect; migrate an embedded SQLite file, but require Postgres to be migrated already
        (to head, to a revision with head's tables, or ahead of this code and compatible with
        it: `Standing.runnable`; a newer one that is not is a `SchemaError` saying what it needs).

        `read_only` (SQLite): create, migrate and write nothing, so a read-only file can be read.
        """
        runner: Runner
        if target.backend == "postgres":
            from relay.store.sql.postgres import PostgresRunner  # asyncpg: Postgres stores only

            runner = await PostgresRunner.open(target.sqlalchemy_url, target.display)
        else:
            assert target.path is not None
            if not read_only:
                try:
                    create_private(target.path)
                except OSError as exc:
                    raise migrate.file_error(exc, target) from exc
            runner = await SqliteRunner.open(target.path, target.display, read_only=read_only)
        try:
            standing = await schema_standing(runner)
            if standing.below and target.backend == "sqlite" and not read_only:
                assert target.path is not None
                await ensure_sqlite_schema(target.path)
            elif not standing.runnable:
                raise standing.error()
        except BaseException:
            await runner.close()
            raise
        return cls(runner, target.display)

    @property
    def display_url(self) -> str:
        return self._display_url

    @property
    def backend(self) -> str:
        return self._db.dialect.name

    async def schema_revision(self) -> str | None:
        return await schema_revision(self._db)

    async def unwritable(self) -> str | None:
        return await unwritable(self._db)

    @property
    def stats(self) -> Stats:
        """Transactions and statements sent so far."""
        return self._db.stats

    async def close(self) -> None:
        await self._db.close()
