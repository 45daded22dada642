"""`relay.store.hosting`: the relay's migrations called from a host's code, sync and async, and
the filters a host's Alembic autogenerate runs the relay's objects through."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Column, Index, Integer, MetaData, Table

from relay.store.hosting import RELAY_TABLES, include_name, include_object, migrate, migrate_async
from relay.store.migrations import HEAD, VERSION_TABLE, revisions, standing

pytestmark = pytest.mark.sqlite


async def test_migrate_from_sync_and_async_code(tmp_path: Path) -> None:
    """`migrate_async` applies every revision once; `migrate`, called where a loop already runs
    (a thread of its own), and again, applies none; the store is at head."""
    url = f"sqlite:///{tmp_path / 'app.db'}"
    assert await migrate_async(url) == [revision.id for revision in revisions()]
    assert migrate(url) == []
    assert (await standing(url)).current == HEAD


def test_migrate_from_plain_sync_code(tmp_path: Path) -> None:
    """A release script (no event loop) migrates with `migrate(url)`."""
    url = f"sqlite:///{tmp_path / 'app.db'}"
    assert migrate(url)[-1] == HEAD


def test_the_filters_leave_out_the_relays_objects_only() -> None:
    """Relay tables, their indexes and columns are left out; a host's are kept."""
    assert VERSION_TABLE in RELAY_TABLES
    assert "relay_runs" in RELAY_TABLES
    assert not include_name("relay_runs", "table", {})
    assert not include_name(VERSION_TABLE, "table", {})
    assert not include_name("ix_relay_runs_owner", "index", {"table_name": "relay_runs"})
    assert include_name("host_notes", "table", {})
    assert include_name("ix_host_notes_author", "index", {"table_name": "host_notes"})
    assert include_name("public", "schema", {})
    meta = MetaData()
    relay = Table("relay_runs", meta, Column("owner", Integer), Index("ix_r", "owner"))
    host = Table("relay_like_host_table", meta, Column("id", Integer), Index("ix_h", "id"))
    assert not include_object(relay, "relay_runs", "table", True, None)
    assert not include_object(next(iter(relay.indexes)), "ix_r", "index", True, None)
    assert include_object(host, host.name, "table", True, None)
    assert include_object(next(iter(host.indexes)), "ix_h", "index", True, None)
