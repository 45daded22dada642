"""`talaria-relay grants ROLE`: the SQL that gives a runtime role what the store needs, no more.

The owner role runs `migrate`; the replicas' runtime role may only read and write rows, read the
version table (a store checks it when it opens) and run `relay_batch`, granted by name (PUBLIC
may run a new function unless the owner's default privileges revoke that); the function runs as
its caller (SECURITY INVOKER), so it gives nothing the table grants do not. No sequence exists.
Nothing is contacted: the owner runs what it prints (`psql -v ON_ERROR_STOP=1`)."""

from __future__ import annotations

import argparse
import re

from relay.cli.output import OK, say
from relay.errors import InvalidInputError
from relay.store import resolve
from relay.store.migrations import BATCH_ARGUMENTS, BATCH_FUNCTION, HEAD, TABLES, VERSION_TABLE
from relay.store.url import schema_name

DML = "SELECT, INSERT, UPDATE, DELETE"
# Postgres truncates identifiers past 63 bytes: a longer name would quietly name another role.
MAX_IDENTIFIER_BYTES = 63
# Printable, no double quote: then double-quoting it is the whole of the escaping.
_IDENTIFIER = re.compile(r'[^"\x00-\x1f\x7f]+')


def quoted(kind: str, name: str) -> str:
    """`name` as a quoted SQL identifier; InvalidInputError for one that cannot be a name."""
    if not _IDENTIFIER.fullmatch(name) or len(name.encode()) > MAX_IDENTIFIER_BYTES:
        raise InvalidInputError(
            f"{kind} must be 1..{MAX_IDENTIFIER_BYTES} bytes, printable, without a double quote"
        )
    if kind == "ROLE" and name.lower() == "public":
        raise InvalidInputError("ROLE must be a role, not PUBLIC (every role there is)")
    return '"' + name + '"'


def grants_sql(role: str, database: str, schema: str = "public", owner: str | None = None) -> str:
    who, db, where = quoted("ROLE", role), quoted("database", database), quoted("schema", schema)
    tables = ", ".join(f"{where}.{quoted('table', name)}" for name in TABLES)
    function = f'{where}."{BATCH_FUNCTION}"({", ".join(BATCH_ARGUMENTS)})'
    creator = f"FOR ROLE {quoted('owner', owner)} " if owner else ""
    lines = [f"-- The runtime role {who} for the relay tables at {HEAD}."]
    if schema != "public":
        # `migrate` makes it when its role may (CREATE on the database); else the owner runs this.
        of = f" AUTHORIZATION {quoted('owner', owner)}" if owner else ""
        lines.append(f"CREATE SCHEMA IF NOT EXISTS {where}{of};")
    lines += [
        f"GRANT CONNECT ON DATABASE {db} TO {who};",
        f"GRANT USAGE ON SCHEMA {where} TO {who};",
        f"GRANT {DML} ON TABLE {tables} TO {who};",
        f'GRANT SELECT ON TABLE {where}."{VERSION_TABLE}" TO {who};',
        f"GRANT EXECUTE ON FUNCTION {function} TO {who};",
    ]
    if not owner:
        lines.append("-- Run this as the role that migrates: its future tables are the ones meant.")
    default = f"ALTER DEFAULT PRIVILEGES {creator}IN SCHEMA {where} GRANT"
    lines += [f"{default} {DML} ON TABLES TO {who};", f"{default} EXECUTE ON FUNCTIONS TO {who};"]
    return "\n".join(lines)


async def cmd_grants(args: argparse.Namespace) -> int:
    target = resolve(args.store)
    if target.backend != "postgres" or target.url is None or not target.url.database:
        raise InvalidInputError(
            f"grants are for Postgres stores, not {target.name}: give --store postgresql://…"
        )
    schema = args.schema or schema_name(target.url) or "public"
    say(grants_sql(args.role, target.url.database, schema, args.owner))
    return OK
