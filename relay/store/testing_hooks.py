"""The store's one hook for the bench (`benchmarks/`, run from a checkout): not an API for apps.

The bench measures the store beside a raw driver running the same statements, so it needs each
operation as the statements the SQL store's own hook builds, and what readies and counts a
store. Everything the bench reaches of the store's insides is named here, and only here.
"""

from relay.store.backend import Claim, Deletion
from relay.store.sql.backend import SqlBackend
from relay.store.sql.dialect import POSTGRES, SQLITE, Dialect
from relay.store.sql.drivers.runner import Call, Many, Stats, Step
from relay.store.sql.drivers.sqlite import BUSY_TIMEOUT_S
from relay.store.sql.drivers.sqlite import connect as connect_sqlite
from relay.store.sql.ledger import claim_step as claim_started
from relay.store.sql.ledger import mark_step as mark_sent
from relay.store.sql.ledger import record_steps as record_started
from relay.store.sql.migrate import upgrade
from relay.store.sql.outbox import ack_step as ack_deleted
from relay.store.sql.outbox import enqueue_step as enqueue_deleted
from relay.store.sql.registration import identity_step as profile_identity
from relay.store.sql.revisions import allocate_step as allocate_revisions
from relay.store.sql.transfer import ledger_steps as merge_ledger

__all__ = [
    "BUSY_TIMEOUT_S",
    "POSTGRES",
    "SQLITE",
    "Call",
    "Claim",
    "Deletion",
    "Dialect",
    "Many",
    "Stats",
    "Step",
    "ack_deleted",
    "allocate_revisions",
    "claim_started",
    "connect_sqlite",
    "enqueue_deleted",
    "mark_sent",
    "merge_ledger",
    "profile_identity",
    "record_started",
    "sent",
    "upgrade",
]


def sent(store: object) -> Stats | None:
    """What the SQL backend under `store` has sent so far; None for a store on another one."""
    backend = getattr(store, "backend", None)
    return backend.stats if isinstance(backend, SqlBackend) else None
