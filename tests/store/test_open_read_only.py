"""`open_store(url, read_only=True)`: a SQL store opened to be read creates, migrates and writes
nothing, where a plain open of an embedded SQLite file would make and migrate it."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.errors import SchemaError, StoreUnavailableError
from relay.store import migrations, open_store, resolve, standing


@pytest.mark.sqlite
async def test_a_read_only_open_creates_migrates_and_writes_nothing(tmp_path: Path) -> None:
    """A missing file is not made; a file below head is refused, not migrated; one at head is
    read, and a write through that store fails and changes nothing."""
    path = tmp_path / "relay.db"
    url = f"sqlite:///{path}"
    with pytest.raises(StoreUnavailableError, match="unable to open"):
        await open_store(url, read_only=True)
    assert not path.exists()
    await migrations.upgrade(resolve(url), "0004")  # below the revisions with head's tables
    with pytest.raises(SchemaError, match=f"run `talaria-relay migrate --store '{url}'`"):
        await open_store(url, read_only=True)
    assert (await standing(url)).current == "0004"
    await migrations.upgrade(resolve(url))
    async with open_store(url, read_only=True) as store:
        assert await store.revision_floor() == 0
        with pytest.raises(StoreUnavailableError, match="readonly"):
            await store.allocate_revisions(3, 1_000)
    async with open_store(url) as store:
        assert await store.revision_floor() == 0
