"""`RelayStore` on SQL: SQLite (embedded) and Postgres (replicas), on their raw drivers."""

from relay.store.sql.runner import Stats
from relay.store.sql.store import SqlStore

__all__ = ["SqlStore", "Stats"]
