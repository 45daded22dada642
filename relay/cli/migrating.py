"""`talaria-relay migrate`: up to head, or to a revision; knows a database ahead of this code."""

from __future__ import annotations

import argparse

from relay.cli.output import FAILED, OK, fail, progress, say
from relay.errors import InvalidInputError
from relay.store import StoreTarget, resolve
from relay.store import migrations as migrate
from relay.store.migrations import Standing, later


async def cmd_migrate(args: argparse.Namespace) -> int:
    target = resolve(args.store)
    if target.url is None:
        raise InvalidInputError(f"a {target.name} store has no schema to migrate")
    if args.lock_timeout <= 0:
        raise InvalidInputError("--lock-timeout must be more than 0 seconds")
    lock_timeout_ms = max(1, round(args.lock_timeout * 1000))
    if args.sql:
        return await _migrate_sql(target, from_empty=args.from_empty, lock_ms=lock_timeout_ms)
    if args.from_empty:
        raise InvalidInputError("--from-empty goes with --sql")
    found = await migrate.standing(target)
    if found.ahead:
        return _ahead(target.display, found)
    if args.check:
        say(f"{target.display} {found.summary()}" + ("" if found.at_head else "; pending:"))
        for revision in migrate.revisions(found.current):  # none at head
            say(f"  {revision.id}  {revision.doc}")
        return OK if found.at_head else FAILED
    if args.to is not None and found.current is not None and later(found.current, args.to):
        await migrate.downgrade(target, args.to, lock_timeout_ms=lock_timeout_ms)
        say(f"{target.display} {(await migrate.standing(target)).summary()}")
        return OK
    applied = await migrate.upgrade(
        target, args.to or "head", lock_timeout_ms=lock_timeout_ms, force=args.force
    )
    found = await migrate.standing(target)
    if found.ahead:  # a newer release migrated it meanwhile
        return _ahead(target.display, found)
    if not applied and found.at_head:
        say(f"{target.display} is already at head {found.head}")
        return OK
    for revision in applied:
        say(f"applied {revision.id}  {revision.doc}")
    say(f"{target.display} {found.summary()}")
    return OK


async def _migrate_sql(target: StoreTarget, *, from_empty: bool, lock_ms: int) -> int:
    """The DDL a DBA runs by hand: what the database lacks (it is read, not written), or with
    `from_empty` every revision without connecting. Notes go to stderr: stdout is only SQL."""
    if from_empty:
        # A comment in the SQL itself, so a file of it says which database it is for.
        say(
            f"-- the {target.name} DDL of every revision to head {migrate.HEAD}, "
            "from an empty database"
        )
        if target.written is None:
            say(
                "-- (no --store given: the embedded default's dialect; for Postgres give a "
                "postgresql:// URL, which is not connected to)"
            )
        migrate.offline_sql(target, lock_timeout_ms=lock_ms)
        return OK
    found = await migrate.standing(target)
    if found.ahead:
        needs = "" if found.compatible else f"; it needs {found.needs()}"
        progress(f"-- {target.display} {found.summary()}: nothing to apply{needs}")
        return OK if found.compatible else FAILED
    if found.at_head:
        progress(f"-- {target.display} is already at head {found.head}: nothing to apply")
        return OK
    pending = ", ".join(revision.id for revision in migrate.revisions(found.current))
    progress(f"-- {target.display} is at {found.current or 'no revision'}: the DDL of {pending}")
    migrate.offline_sql(target, since=found.current, lock_timeout_ms=lock_ms)
    return OK


def _ahead(display: str, found: Standing) -> int:
    """A database a newer release migrated: nothing this code can do to it; exit 0 while this
    code may still use it (a rollback's init step passes), 1 when it may not."""
    if found.compatible:
        say(f"{display} {found.summary()}: nothing to migrate, this code runs on it")
        return OK
    fail(f"{display} {found.summary()}: it needs {found.needs()}")
    return FAILED
