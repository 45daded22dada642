"""The relay tables: the one `MetaData` that the migrations must reproduce exactly."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)

# Indexes from 0008 (docs/query-plans.md): each hot statement reads an index range, at any size.

# The migration these tables are the result of; `alembic` reads the same from the scripts, and
# tests/test_migrations.py holds the two equal, so reading a revision needs no Alembic.
HEAD_REVISION = "0011"
# The revisions below head a store of this code opens, while a deploy has yet to migrate
# (docs/rolling-deploys.md): each later one added only what it does without (`relay_batch`: its
# batches run as transactions; the fleet tables), indexes, the revision's move (`version_table`
# reads either), or columns it uses only from their revision on (`backend.SqlBackend`).
SAME_TABLES = ("0005", "0006", "0007", "0008", "0009", "0010")

# Constraint names are spelled out so SQLite and Postgres agree and migrations can name them.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _singleton(name: str, *columns: Column[Any]) -> Table:
    """A table of one row, whose `id` is 1."""
    return Table(
        name,
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=False),
        *columns,
        CheckConstraint("id = 1", name="singleton"),
    )


def _ms(name: str, *, nullable: bool = False) -> Column[int]:
    """A time: integer milliseconds, as on the wire."""
    return Column(name, BigInteger, nullable=nullable)


config = _singleton(
    "relay_config",
    Column("url", Text, nullable=False),
    Column("publisher_id", Text, nullable=False),
    Column("key_id", Text, nullable=False),
    Column("key_ref", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("generation", BigInteger, nullable=False),
    _ms("updated_at"),
)

profiles = Table(
    "relay_profiles",
    metadata,
    Column("profile", Text, primary_key=True),
    Column("identity", Text, nullable=False),
    Column("profile_id", Text, nullable=False),
)

keys = Table(
    "relay_keys",
    metadata,
    Column("ref", String(64), primary_key=True),
    Column("pem", Text, nullable=False),
    # Whether `pem` is encrypted PKCS#8 (under a key passphrase); it mirrors the PEM's label.
    Column("encrypted", Boolean, nullable=False, server_default=false()),
)

identities = Table(
    "relay_identities",
    metadata,
    Column("profile", Text, primary_key=True),
    Column("identity", Text, nullable=False),
)

revision = _singleton("relay_revision", Column("floor", BigInteger, nullable=False))

started_scopes = Table(
    "relay_started_scopes",
    metadata,
    Column("profile_id", Text, primary_key=True),
    Column("floor", BigInteger, nullable=False),
)

started = Table(
    "relay_started",
    metadata,
    Column("profile_id", Text, primary_key=True),
    Column("session_id", String(191), primary_key=True),
    _ms("started_at"),
    Column("sent", Boolean, nullable=False, server_default=false()),
    Column("claimed_by", String(64)),
    _ms("claimed_until", nullable=True),
    # Claims read one scope's unsent entries oldest first, straight off this index.
    Index("ix_relay_started_unsent", "profile_id", "sent", "started_at", "session_id"),
    # The 24 h prune deletes one scope's oldest entries: a range of this one.
    Index("ix_relay_started_age", "profile_id", "started_at"),
    # An idle replica's next lease end among unsent claims (`keep_alive`): unsent rows only.
    Index(
        "ix_relay_started_claimed_until",
        "claimed_until",
        postgresql_where=text("sent = false"),
        sqlite_where=text("sent = 0"),
    ),
)

deleted = Table(
    "relay_deleted",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("session_id", Text, nullable=False),
    Column("profile", Text, nullable=False),
    Column("through", BigInteger, nullable=False),
    Column("identity", Text),
    Column("scope_url", Text),
    Column("scope_publisher_id", Text),
    Column("scope_profile_id", Text),
    # Who is delivering the entry, until when: a dead claimer's work is taken over.
    Column("claimed_by", String(64)),
    _ms("claimed_until", nullable=True),
    UniqueConstraint("session_id", "profile", name="uq_relay_deleted_session_profile"),
    # Claims take the oldest `through` first; a pass asks whether one would; an idle replica
    # reads the next lease end; a registration binds a profile's unbound entries (few).
    Index("ix_relay_deleted_through", "through", "id"),
    Index("ix_relay_deleted_claimed_until", "claimed_until"),
    Index(
        "ix_relay_deleted_unbound",
        "profile",
        postgresql_where=text("scope_url IS NULL"),
        sqlite_where=text("scope_url IS NULL"),
    ),
    CheckConstraint(
        "(scope_url IS NULL) = (scope_publisher_id IS NULL)"
        " AND (scope_url IS NULL) = (scope_profile_id IS NULL)",
        name="scope_complete",
    ),
)

presence = Table(
    "relay_presence",
    metadata,
    Column("profile", Text, primary_key=True),
    Column("tab_id", String(64), primary_key=True),
    Column("seq", BigInteger, nullable=False),
    Column("active", Boolean, nullable=False),
    _ms("expires_at"),
    _ms("updated_at"),
)

runs = Table(
    "relay_runs",
    metadata,
    Column("session_id", String(191), primary_key=True),
    Column("stream_id", String(191)),
    Column("profile", Text),
    Column("title", Text, nullable=False),
    Column("phase", String(32), nullable=False),
    _ms("started_at"),
    _ms("updated_at"),
    Column("owner", String(64), nullable=False),
    _ms("lease_until"),
    # Which replica is sending a snapshot with this row in it, until when: a replica that took
    # the row over publishes it only after that send, so the relay never sees it go back.
    Column("sending_by", String(64)),
    Column("sending_until", BigInteger, nullable=False, server_default="0"),
    # From 0011: whom a takeover took the row from when it ended its live turn as failed; that
    # replica, back, corrects it once with its true phase (`RunState.taken_back`).
    Column("taken_from", String(64)),
    # A pass reads the rows its replica owns; a takeover looks for leases that ended.
    Index("ix_relay_runs_owner", "owner"),
    Index("ix_relay_runs_lease_until", "lease_until"),
    # A pass prunes finished rows by age, and releases the rows it marked as sending.
    Index("ix_relay_runs_updated_at", "updated_at"),
    Index("ix_relay_runs_sending_by", "sending_by"),
)

# The newest turn of each session whose run row was pruned, and when: a replica may still offer an
# older turn of that session (a superseded run, a remembered outcome), and that must never become
# the session's row again. Forgotten a day later (`relay.store.requests.TURN_MEMORY_MS`).
turns = Table(
    "relay_turns",
    metadata,
    Column("session_id", String(191), primary_key=True),
    _ms("started_at"),
    Column("stream_id", String(191)),
    _ms("forgotten_at"),
    Index("ix_relay_turns_forgotten_at", "forgotten_at"),
)

# The oldest schema head whose code may still use this database (`relay.store.sql.compat`),
# written by the migrations from 0007 on; one row.
compat = _singleton(
    "relay_compat",
    Column("oldest_head", String(32), nullable=False),
    Column("migrated_by", String(64)),
)

# Every running service, as it recorded itself: what code it runs, where, and how its passes go.
# `seen_at` and `live_until` move with its leases; a row unseen for a day goes
# (`relay.store.fleet`).
fleet = Table(
    "relay_fleet",
    metadata,
    Column("owner", String(64), primary_key=True),
    Column("version", String(64), nullable=False),
    Column("schema_head", String(32), nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", BigInteger, nullable=False),
    _ms("started_at"),
    _ms("seen_at"),
    # Live until then: its lease, renewed with its leases (a replica dead this long is gone).
    _ms("live_until"),
    _ms("pass_at", nullable=True),
    Column("pass_outcome", String(32)),
    _ms("backoff_until", nullable=True),
    Column("backoff_class", String(64)),
    # From 0009: the replica's wall clock minus the store's (ms), and its passes over the last
    # hour, a character a minute (`relay.store.fleet_passes`; 60 wide, 64 for room).
    Column("clock_offset_ms", BigInteger),
    Column("passes", String(64)),
    Index("ix_relay_fleet_seen_at", "seen_at"),
)
