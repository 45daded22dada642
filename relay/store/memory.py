"""`MemoryDocuments`: the rulebook's documents in this process's memory (`memory://`).

Private to one open; `close()` discards it. A session takes one lock and works on copies of the
documents it reads, stored back when it ends cleanly: so each hook is atomic for coroutines and
threads alike, and one that raises changes nothing.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from relay.errors import StoreError
from relay.store.rules.documents import (
    CONFIG,
    FLOOR,
    IDENTITIES,
    Doc,
    IdentityTable,
    StoredRegistration,
)
from relay.store.url import MEMORY

D = TypeVar("D")
R = TypeVar("R")

# What a document holds before anything is stored; the others start as empty dicts.
_EMPTY: dict[str, Callable[[], Any]] = {
    CONFIG.name: StoredRegistration,
    FLOOR.name: int,
    IDENTITIES.name: IdentityTable,
}


@dataclass(slots=True)
class _Session:
    stored: dict[str, Any]
    values: dict[str, Any] = field(default_factory=dict)

    def get(self, doc: Doc[D]) -> D:
        if doc.name not in self.values:
            stored = self.stored.get(doc.name)
            # Records are frozen: a shallow copy is the whole document's copy.
            self.values[doc.name] = (
                _EMPTY.get(doc.name, dict)() if stored is None else copy.copy(stored)
            )
        value: D = self.values[doc.name]
        return value

    def put(self, doc: Doc[D], value: D) -> None:
        self.values[doc.name] = value


class MemoryDocuments:
    """The documents in a dict, private to this object."""

    name = "memory"
    display_url = MEMORY

    def __init__(self) -> None:
        self._stored: dict[str, Any] | None = {}
        # asyncio needs no lock (no session awaits); this keeps threads sharing a store apart.
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def session(self, *, write: bool) -> Iterator[_Session]:
        with self._lock:
            if self._stored is None:
                raise StoreError(f"the store {MEMORY} is closed")
            session = _Session(self._stored)
            yield session
            if write:
                self._stored.update(session.values)

    async def run(self, work: Callable[[], R]) -> R:
        return work()

    def key_ref(self, key_id: str) -> str:
        return hashlib.sha256(key_id.encode()).hexdigest()[:16]

    def key_named(self, ref: str) -> str | None:
        return ref

    async def close(self) -> None:
        """Discard the state; the store refuses every call from now on, as a closed SQL one."""
        with self._lock:
            self._stored = None
