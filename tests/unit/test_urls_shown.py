"""Store URLs in messages are shown as the user wrote them, the password hidden."""

from __future__ import annotations

import pytest

from relay.store import resolve


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("postgresql://relay:s3cret@db:5432/relay", "postgresql://relay:***@db:5432/relay"),
        ("postgres://relay@db/relay?sslmode=require", "postgres://relay@db/relay?sslmode=require"),
        ("postgresql+asyncpg://relay:s3cret@db/relay", "postgresql+asyncpg://relay:***@db/relay"),
        ("postgresql://relay:p%40ss@h1,h2/relay", "postgresql://relay:***@h1,h2/relay"),
        ("  sqlite:///relay.db ", "sqlite:///relay.db"),
        ("sqlite+aiosqlite:///relay.db", "sqlite+aiosqlite:///relay.db"),
        ("json:///srv/state", "json:///srv/state"),
    ],
)
def test_a_url_shows_as_written_without_its_password(written: str, shown: str) -> None:
    """No `postgresql+asyncpg://` the user never typed, no `ssl=` for their `sslmode=`, no
    password; the parsed URL underneath is the driver's all the same."""
    target = resolve(written)
    assert target.display == shown
    assert "s3cret" not in target.display
    assert "p%40ss" not in target.display
    if target.url is not None and target.backend == "postgres":
        assert target.url.drivername == "postgresql+asyncpg"
