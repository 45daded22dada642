"""`migrate` and the fleet: a contract migration is refused while live replicas would break."""

from __future__ import annotations

import time

from sqlalchemy import Connection, inspect, select

from relay.errors import SchemaError
from relay.store.sql import schema
from relay.store.sql.compat import later


def breaking(connection: Connection, contract: str, now_ms: int | None = None) -> list[str]:
    """The live replicas whose code a database at `contract` (a contract migration) no longer
    takes: those built for an older schema head. A database without the fleet lists none."""
    if not inspect(connection).has_table(schema.fleet.name):
        return []
    now = int(time.time() * 1000) if now_ms is None else now_ms
    f = schema.fleet.c
    rows = connection.execute(
        select(f.owner, f.version, f.schema_head, f.host, f.pid, f.seen_at)
        .where(f.live_until > now)
        .order_by(f.owner)
    ).all()
    return [
        f"{owner} (talaria-relay {version}, schema head {head}, pid {pid} on {host}, "
        f"seen {max(0, now - seen) / 1000:.0f} s ago)"
        for owner, version, head, host, pid, seen in rows
        if later(contract, head)
    ]


def refuse_breaking(connection: Connection, contract: str) -> None:
    """`SchemaError` naming every live replica a contract migration to `contract` would break."""
    found = breaking(connection, contract)
    if found:
        raise SchemaError(
            f"migration {contract} is a contract one: code of an older schema head stops "
            f"working on it, and {len(found)} live replica(s) run such code: "
            + "; ".join(found)
            + ". Roll them out to this release first (they leave the fleet when they stop), "
            "or pass --force to migrate anyway"
        )
