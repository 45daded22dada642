"""Where a database stands against this code's migrations, and whether this code may use it:
below its schema head, at it, or ahead of it, and then compatible or not, by the record of
expand and contract migrations in `relay_compat` (docs/rolling-deploys.md). A database ahead and
not compatible is refused with one `SchemaError` naming what it needs (never `migrate`: this
code's cannot go forward, and going back would break the newer replicas).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Executable, delete, func, insert, select, text

from relay.errors import SchemaError
from relay.store.sql import schema, version_table
from relay.store.sql.drivers.runner import Runner, Tx, first, scalar
from relay.store.sql.schema import HEAD_REVISION, SAME_TABLES
from relay.store.url import StoreTarget, command
from relay.version import __version__

if TYPE_CHECKING:
    from alembic.script import Script, ScriptDirectory

# What each migration module declares as `kind` (docs/rolling-deploys.md#expand-and-contract).
EXPAND, CONTRACT = "expand", "contract"

# The first revision that has `relay_compat`; a database below it records no compatibility.
COMPAT_SINCE = "0007"
# A newer release may add columns to `relay_compat`: every release reads only `schema.compat`'s.


def later(revision: str, than: str) -> bool:
    """Whether `revision` comes after `than` in the chain (a revision no number places: yes)."""
    return not (revision.isdigit() and than.isdigit()) or int(revision) > int(than)


def reached(revision: str | None, since: str) -> bool:
    """Whether a database at `revision` has what migration `since` added."""
    return revision is not None and not later(since, revision)


@dataclass(frozen=True, slots=True)
class Standing:
    """A database's revision against this code's head, with its compatibility record.

    `oldest_head` is the oldest schema head whose code may use the database, as its migrations
    recorded it (None: no record, as below 0007); `migrated_by` the release that last upgraded it.
    """

    current: str | None
    oldest_head: str | None = None
    migrated_by: str | None = None
    head: str = HEAD_REVISION

    @property
    def at_head(self) -> bool:
        return self.current == self.head

    @property
    def ahead(self) -> bool:
        """The database is at a revision newer than this code knows."""
        return self.current is not None and not self.at_head and later(self.current, self.head)

    @property
    def compatible(self) -> bool:
        """Ahead, and its record lets code of this schema head use it."""
        return (
            self.ahead and self.oldest_head is not None and not later(self.oldest_head, self.head)
        )

    @property
    def runnable(self) -> bool:
        """A store of this code opens it: at head, at a revision with head's tables, or ahead and
        compatible."""
        return self.at_head or self.current in SAME_TABLES or self.compatible

    @property
    def below(self) -> bool:
        return not self.at_head and not self.ahead

    def summary(self) -> str:
        """One phrase after the store's name: "is at head 0007", "is at 0009, ahead of …"."""
        if self.at_head:
            return f"is at head {self.head}"
        if self.current is None:
            return f"is at no revision, not at head {self.head}"
        if not self.ahead:
            return f"is at {self.current}, not at head {self.head}"
        verdict = "compatible" if self.compatible else "not compatible"
        return f"is at {self.current}, ahead of this code (head {self.head}): {verdict}"

    def needs(self) -> str:
        """What a database ahead of this code and not compatible with it needs."""
        assert self.current is not None
        if self.oldest_head is None:
            needed = f"code of schema head {self.current} or newer (it records no older code)"
        else:
            needed = f"code of schema head {self.oldest_head} or newer"
        if self.migrated_by:
            needed += f", such as talaria-relay {self.migrated_by}, which migrated it"
        return needed

    def error(self, target: StoreTarget) -> SchemaError:
        """Why a store of this code does not open the database of `target`."""
        if self.ahead:
            return SchemaError(
                f"the relay database is at revision {self.current}, newer than this code "
                f"(talaria-relay of schema head {self.head}), and no longer takes it: it needs "
                f"{self.needs()}; run that release here (migrating from this code cannot help)"
            )
        state = "has no relay schema" if self.current is None else f"is at revision {self.current}"
        return SchemaError(
            f"the relay database {state}, not at head {self.head}: "
            f"run {command('migrate', target)} (or `alembic upgrade head`) first"
        )

    def document(self) -> dict[str, Any]:
        """The `schema` object of `status --json` and `check --json`."""
        return {
            "current": self.current,
            "head": self.head,
            "at_head": self.at_head,
            "ahead": self.ahead,
            "compatible": self.runnable,
            "oldest_head": self.oldest_head,
            "migrated_by": self.migrated_by,
        }


def kind(script: Script) -> str:
    """The kind a migration module declares (`kind = "expand"` or `"contract"`)."""
    declared = getattr(script.module, "kind", None)
    if declared not in (EXPAND, CONTRACT):
        raise SchemaError(
            f"migration {script.revision} declares no kind: set `kind = {EXPAND!r}` "
            f"or `kind = {CONTRACT!r}` in its module"
        )
    return str(declared)


def oldest_head(scripts: ScriptDirectory, revision: str) -> str:
    """The oldest schema head whose code may use a database at `revision`: the newest contract
    migration at or below it (the first migration when there is none)."""
    script = scripts.get_revision(revision)
    while script is not None:
        if script.down_revision is None or kind(script) == CONTRACT:
            return script.revision
        below = script.down_revision
        assert isinstance(below, str)  # one chain, no merges
        script = scripts.get_revision(below)
    raise SchemaError(f"no migration {revision} in this code's scripts")


def record(scripts: ScriptDirectory, revision: str, *, upgraded: bool) -> list[Executable]:
    """The statements that write the compatibility record of a database now at `revision`: who
    may use it, and (after an upgrade) the release that migrated it."""
    return [
        delete(schema.compat),
        insert(schema.compat).values(
            id=1,
            oldest_head=oldest_head(scripts, revision),
            migrated_by=__version__ if upgraded else None,
        ),
    ]


async def schema_revision(runner: Runner) -> str | None:
    """The relay's Alembic revision; None when the store has no relay schema."""
    return (await schema_standing(runner)).current


async def schema_standing(runner: Runner) -> Standing:
    """Where the store stands against this code: its revision (found as `version_table` says)
    and its compatibility record."""
    d = runner.dialect
    names = (version_table.NAME, version_table.SHARED, version_table.MARKER, schema.compat.name)
    present = d.compile(
        select(*(func.to_regclass(name).is_not(None) for name in names))
        if d.postgres
        else select(
            *(text(f"(SELECT count(*) FROM sqlite_master WHERE name = '{name}')") for name in names)
        )
    )
    own = d.compile(select(version_table.table.c.version_num))
    shared = d.compile(select(version_table.shared.c.version_num))
    c = schema.compat.c
    record = d.compile(select(c.oldest_head, c.migrated_by).where(c.id == 1))

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
    recovery, read_only = (await runner.read(lambda tx: tx.rows(q)))[0]
    if recovery:
        return "the server is in recovery (a standby): it takes no writes"
    if read_only == "on":
        return "the server is read-only (default_transaction_read_only): it takes no writes"
    return None
