"""The store's `Backend` on SQL: SQLite (embedded) and Postgres (replicas), on their raw drivers."""

from relay.store.sql.backend import SqlBackend
from relay.store.sql.runner import Stats

__all__ = ["SqlBackend", "Stats"]
