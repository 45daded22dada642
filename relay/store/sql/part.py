"""What every aggregate's SQL hooks share: the runner, and through it the dialect."""

from __future__ import annotations

from relay.store.sql.runner import Runner


class SqlPart:
    """Base of the per-aggregate hook classes that `SqlStore` combines."""

    _db: Runner
