"""Profile identities in their homes: `<home>/.talaria-relay-profile-id`, as the original kept them.

A profile's home belongs to its user, not to the relay: it may be missing (then the profile has no
place for an identity), and it holds other programs' files beside ours.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from relay.errors import StoreError
from relay.store.files.documents import PROFILE_ID, PROFILE_ID_DOC
from relay.store.files.io import Write, read, remove_stale
from relay.store.rules.documents import StoredRegistration

ProfileHome = Callable[[str], Path]


@dataclass(slots=True)
class HomeIdentities:
    """The `Identities` of a JSON store with profile homes, read as asked, written on commit."""

    home: ProfileHome
    registration: Callable[[], StoredRegistration]
    # profile -> identity; None: forgotten
    changed: dict[str, str | None] = field(default_factory=dict)

    def _path(self, profile: str) -> Path:
        return Path(self.home(profile)) / PROFILE_ID

    def get(self, profile: str) -> str | None:
        if profile in self.changed:
            return self.changed[profile]
        if not self.holds(profile):
            raise StoreError(f"the home of profile {profile!r} is unavailable")
        return PROFILE_ID_DOC.parse(read(self._path(profile)))

    def set(self, profile: str, identity: str) -> None:
        self.changed[profile] = identity

    def forget(self, profile: str) -> None:
        self.changed[profile] = None

    def holds(self, profile: str) -> bool:
        return Path(self.home(profile)).is_dir()

    def known(self) -> Iterable[str]:
        config = self.registration().read()
        return list(config.profiles) if config else []

    def writes(self) -> list[Write]:
        """What to write; a killed writer's temps in each home written go first (the caller
        holds the exclusive lock)."""
        for profile, identity in self.changed.items():
            if identity is not None:
                remove_stale(self._path(profile).parent)
        return [
            Write(self._path(p), None if i is None else PROFILE_ID_DOC.dump(i))
            for p, i in self.changed.items()
            if i is not None or self.holds(p)  # no home: nothing to forget
        ]
