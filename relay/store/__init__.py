"""Relay state behind one repository, `RelayStore`, on JSON files, SQLite, Postgres or memory.

    async with open_store("postgresql://relay@db/relay") as store:
        revisions = await store.allocate_revisions(3, now_ms)

`await open_store(url)` works too; the caller then closes the store. Where a SQL store's schema
stands, and migrating it: `relay.store.migrations` (`standing(url)` is here too).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.store.contract import RelayStore
from relay.store.migrations import Standing, standing
from relay.store.records import (
    Backlog,
    DeletedScope,
    DeletedView,
    PresenceLease,
    ProfileGrant,
    RelayConfig,
    RunState,
    StartedEntry,
    StartedScope,
    StateBatch,
    Waiting,
)
from relay.store.url import StoreTarget, require_directory, resolve

__all__ = [
    "Backlog",
    "DeletedScope",
    "DeletedView",
    "PresenceLease",
    "ProfileGrant",
    "RelayConfig",
    "RelayStore",
    "RunState",
    "Standing",
    "StartedEntry",
    "StartedScope",
    "StateBatch",
    "StoreTarget",
    "Waiting",
    "open_store",
    "resolve",
    "standing",
]

ProfileHome = Callable[[str], Path]


async def _open(url: str | None, profile_home: ProfileHome | None, read_only: bool) -> RelayStore:
    target = resolve(url)
    require_directory(target)  # a mistyped directory is refused, not made
    from relay.store.store import Store

    if target.backend == "memory":
        from relay.store.memory import MemoryDocuments
        from relay.store.rules.book import RulebookBackend

        return Store(RulebookBackend(MemoryDocuments()))
    if target.backend == "json":
        from relay.store.files import open_json

        assert target.path is not None
        return await open_json(target.path, profile_home=profile_home)
    from relay.store.sql.backend import SqlBackend

    return Store(await SqlBackend.open(target, read_only=read_only))


@dataclass(slots=True)
class _Opening:
    """What `open_store` returns: await it, or use it as an async context manager."""

    url: str | None
    profile_home: ProfileHome | None
    read_only: bool
    store: RelayStore | None = None

    def __await__(self) -> Generator[Any, None, RelayStore]:
        return _open(self.url, self.profile_home, self.read_only).__await__()

    async def __aenter__(self) -> RelayStore:
        self.store = await self
        return self.store

    async def __aexit__(self, *exc: object) -> None:
        if self.store is not None:
            await self.store.close()


def open_store(
    url: str | None = None, *, profile_home: ProfileHome | None = None, read_only: bool = False
) -> _Opening:
    """Open the store at `url`, else `$TALARIA_RELAY_STORE_URL`, else the embedded SQLite file.

    `memory://` opens a new, empty store that lives in this process only, until it is closed:
    for tests and trials, never for state that has to survive or be shared.

    `profile_home` maps a profile name to its home directory; a JSON store then keeps each
    profile's identity in `<home>/.talaria-relay-profile-id`, as the Python original did.

    `read_only`: a SQL store is opened to be read only, creating, migrating and writing nothing
    (SQLite opens the file read-only, so a file this process may not write can be read; a write
    through it fails). JSON and memory stores open as without it.
    """
    return _Opening(url, profile_home, read_only)
