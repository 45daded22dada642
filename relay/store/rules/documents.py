"""`Documents`: where the rulebook keeps its documents (memory, or JSON files), and what each is.

A document is one aggregate's state as a plain value (`relay.store.rules`). Keys and identities
are kept where each layout keeps them, so their documents are small objects of the layout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from relay.errors import CorruptStateError, StoreError
from relay.store.records import RelayConfig
from relay.store.rules import fleet, ledger, outbox, presence
from relay.store.rules import runs as run_rules

D = TypeVar("D")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Doc(Generic[D]):
    """The name of a document whose value is a `D`."""

    name: str


@dataclass(slots=True)
class StoredRegistration:
    """The stored registration and its generation (0 while none is stored)."""

    config: RelayConfig | None = None
    generation: int = 0
    # Why the stored registration cannot be read; its generation still counts.
    problem: str | None = None

    def read(self) -> RelayConfig | None:
        if self.problem is not None:
            raise CorruptStateError(self.problem)
        return self.config


class Identities(Protocol):
    """Each profile's identity, minted once, wherever the layout keeps it."""

    def get(self, profile: str) -> str | None:
        """The stored identity; raises when it cannot be read."""

    def set(self, profile: str, identity: str) -> None: ...

    def forget(self, profile: str) -> None: ...

    def holds(self, profile: str) -> bool:
        """Whether the layout has a place for this profile's identity now."""

    def known(self) -> Iterable[str]:
        """The profiles whose identities are listed (not all need be stored)."""


class IdentityTable(dict[str, str]):
    """Identities in one table: the memory layout, and a JSON state dir without profile homes."""

    def set(self, profile: str, identity: str) -> None:
        self[profile] = identity

    def forget(self, profile: str) -> None:
        self.pop(profile, None)

    def holds(self, profile: str) -> bool:
        return True

    def known(self) -> Iterable[str]:
        return list(self)


def readable(identities: Identities, profiles: Iterable[str]) -> dict[str, str]:
    """The identities of `profiles` that can be read; one that cannot is left out, as missing."""
    found: dict[str, str] = {}
    for profile in profiles:
        with contextlib.suppress(CorruptStateError, StoreError, OSError):
            if (identity := identities.get(profile)) is not None:
                found[profile] = identity
    return found


Keys = dict[str, str | None]  # reference -> stored PEM; None: a key that is not text


CONFIG: Doc[StoredRegistration] = Doc("config")
KEYS: Doc[Keys] = Doc("keys")
IDENTITIES: Doc[Identities] = Doc("identities")
FLOOR: Doc[int] = Doc("revision floor")
STARTED: Doc[ledger.Ledger] = Doc("started ledger")
DELETED: Doc[outbox.Outbox] = Doc("deleted outbox")
CLAIMS: Doc[outbox.Claims] = Doc("deletion claims")
PRESENCE: Doc[presence.Leases] = Doc("presence leases")
RUNS: Doc[run_rules.Runs] = Doc("runs")
FORGOTTEN: Doc[run_rules.Forgotten] = Doc("forgotten turns")
FLEET: Doc[fleet.Rows] = Doc("fleet")


class Session(Protocol):
    """The documents under one lock. A value read may be edited in place; `put` replaces one."""

    def get(self, doc: Doc[D]) -> D: ...

    def put(self, doc: Doc[D], value: D) -> None: ...


class Documents(Protocol):
    """A store's documents; each `session` is one lock, and writes all it changed or nothing."""

    @property
    def name(self) -> str: ...

    @property
    def display_url(self) -> str: ...

    def session(self, *, write: bool) -> contextlib.AbstractContextManager[Session]:
        """The documents, locked (shared when not `write`); on a clean exit, what changed is
        written. Raising inside changes nothing."""

    async def run(self, work: Callable[[], R]) -> R:
        """Run `work` (which opens sessions) where blocking is fine, mapping I/O errors."""

    def key_ref(self, key_id: str) -> str:
        """The reference a saved key of `key_id` gets: what the registration names."""

    def key_named(self, ref: str) -> str | None:
        """The reference under which `KEYS` holds the key `ref` names, if any can."""

    async def close(self) -> None: ...
