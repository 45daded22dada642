"""What tests read beneath a SQL store: its backend, its runner and their statement counts."""

from __future__ import annotations

from relay.store import RelayStore
from relay.store.sql.backend import SqlBackend
from relay.store.store import Store


def sql_backend(store: RelayStore) -> SqlBackend:
    """The `SqlBackend` a store opened on a SQL URL holds."""
    assert isinstance(store, Store), f"{store!r} is not a composed Store"
    backend = store.backend
    assert isinstance(backend, SqlBackend), f"{store.display_url} is not a SQL store"
    return backend
