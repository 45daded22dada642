"""Where a store may create directories: only `migrate`, and the embedded default's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from relay.errors import InvalidInputError
from relay.store import open_store, resolve
from relay.store.sql import migrate

pytestmark = pytest.mark.backends("sqlite", "json")


@pytest.mark.parametrize("scheme", ["sqlite", "json"])
async def test_open_store_refuses_a_missing_directory_and_creates_nothing(
    tmp_path: Path, scheme: str
) -> None:
    """A store path under a directory that is not there (a typo) is refused, naming the
    directory and the fix; nothing is created."""
    place = tmp_path / "typo" / ("relay.db" if scheme == "sqlite" else "state")
    with pytest.raises(InvalidInputError) as refused:
        await open_store(f"sqlite:///{place}" if scheme == "sqlite" else f"json://{place}")
    assert f"no directory {tmp_path / 'typo'}" in str(refused.value)
    assert "create it" in str(refused.value)
    assert ("talaria-relay migrate" in str(refused.value)) is (scheme == "sqlite")
    assert os.listdir(tmp_path) == []


async def test_migrate_creates_the_directory_then_the_store_opens(tmp_path: Path) -> None:
    """`migrate` makes the directories a SQLite path needs; the store then opens there."""
    path = tmp_path / "new" / "deeper" / "relay.db"
    await migrate.upgrade(resolve(f"sqlite:///{path}"))
    async with open_store(f"sqlite:///{path}") as store:
        assert await store.schema_revision() == migrate.head_revision()


async def test_the_embedded_default_makes_its_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default store (no URL anywhere) creates `$XDG_STATE_HOME/talaria-relay`: nobody
    typed it, so it cannot be a typo."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("TALARIA_RELAY_STORE_URL", raising=False)
    async with open_store() as store:
        assert store.backend_name == "sqlite"
    assert (tmp_path / "state" / "talaria-relay" / "relay.db").is_file()
