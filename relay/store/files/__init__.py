"""The JSON store: the rulebook's documents as files in the legacy layout of the Python original."""

from __future__ import annotations

from pathlib import Path

from relay.store.files.state import JsonDocuments, ProfileHome
from relay.store.rules.book import RulebookBackend
from relay.store.store import Store

__all__ = ["JsonDocuments", "open_json"]


async def open_json(state_dir: Path, *, profile_home: ProfileHome | None = None) -> Store:
    """The store of `state_dir`, created (0700) when missing."""
    return Store(RulebookBackend(await JsonDocuments.open(state_dir, profile_home)))
