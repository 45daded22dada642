"""The Postgres schema the relay's objects live in, when its URL names one (`?schema=NAME`, or
`options=-csearch_path=NAME`): every connection's search_path starts with it, so tables, indexes,
`relay_batch` and `relay_alembic_version` are created and found there. `migrate` creates it when
the role may; otherwise a `SchemaError` names the grant it needs."""

from __future__ import annotations

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from relay.errors import SchemaError


def create_sql(name: str) -> str:
    """The statement that makes the schema (`name` is a checked plain identifier)."""
    return f"CREATE SCHEMA IF NOT EXISTS {name}"


def ensure(connection: Connection, name: str | None) -> None:
    """Create schema `name` if it is missing (Postgres; None or another dialect: nothing)."""
    if name is None or connection.dialect.name != "postgresql":
        return
    found = connection.execute(text("SELECT 1 FROM pg_namespace WHERE nspname = :n"), {"n": name})
    if found.first() is not None:
        return  # CREATE ... IF NOT EXISTS would still need the privilege it does not use
    try:
        with connection.begin_nested():
            connection.execute(text(create_sql(name)))
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
