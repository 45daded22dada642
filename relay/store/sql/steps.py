"""The SQL store's operations as statements with their parameters, for whoever runs them raw.

Each is built by the same function the store's own hook builds it with, so a caller that runs
them on a driver of its own (the bench's raw side, `relay.cli.bench.raw`) sends what the store
sends: the same SQL text, the same parameters, the same number of statements. A `Call` is a
statement and its parameters; a `Many`, a statement run once per parameter set; a `Step`, either.
"""

from relay.store.sql.drivers.runner import Call, Many, Step
from relay.store.sql.ledger import claim_step as claim_started
from relay.store.sql.ledger import mark_step as mark_sent
from relay.store.sql.ledger import record_steps as record_started
from relay.store.sql.outbox import ack_step as ack_deleted
from relay.store.sql.outbox import enqueue_step as enqueue_deleted
from relay.store.sql.registration import identity_step as profile_identity
from relay.store.sql.revisions import allocate_step as allocate_revisions
from relay.store.sql.transfer import ledger_steps as merge_ledger

__all__ = [
    "Call",
    "Many",
    "Step",
    "ack_deleted",
    "allocate_revisions",
    "claim_started",
    "enqueue_deleted",
    "mark_sent",
    "merge_ledger",
    "profile_identity",
    "record_started",
]
