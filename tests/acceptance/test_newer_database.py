"""Every command on a database a newer release migrated: what it says and how it exits.

The database is made newer by hand, as a newer release would leave it: its revision past this
code's head, and the compatibility record (`relay_compat`) saying which code may still use it.
Compatible: everything works and says the database is ahead. Not compatible: each command that
reads the store exits 1 with one line that says what the database needs, never a traceback and
never the advice to migrate (tests/store/test_future_migrations.py applies real ones).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from cli_support import Result, populate, run
from databases import execute, own_database

from relay.errors import SchemaError
from relay.store import open_store
from relay.store.sql.migrate import head_revision, upgrade
from relay.store.url import resolve

FUTURE = "0099"
RECORD = (
    "CREATE TABLE IF NOT EXISTS relay_compat (id INTEGER PRIMARY KEY, "
    "oldest_head VARCHAR(32) NOT NULL, migrated_by VARCHAR(64))"
)


def advance(url: str, oldest_head: str) -> None:
    """Leave the store at `FUTURE` with a record that takes code of `oldest_head` or newer."""
    statements = [
        RECORD,
        "DELETE FROM relay_compat",
        f"INSERT INTO relay_compat VALUES (1, '{oldest_head}', '9.9.0')",
        f"UPDATE relay_alembic_version SET version_num = '{FUTURE}'",
    ]
    execute(url, *statements)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def migrated(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A registered store at head, in a database of its own (never a shared clone)."""
    url = own_database(request, tmp_path, request.param)

    async def fill() -> None:
        await upgrade(resolve(url))
        async with open_store(url) as store:
            await populate(store)

    asyncio.run(fill())
    return url


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "xdg"
    path.mkdir()
    return path


def cli(home: Path, *args: str) -> Result:
    result = run(home, *args, timeout=60)
    assert "Traceback" not in result.output, result.describe()
    return result


AHEAD = f"is at {FUTURE}, ahead of this code (head {head_revision()})"


def test_compatible_newer_database_every_command(home: Path, migrated: str) -> None:
    """A newer database that takes this code: migrate, check, status and rekey exit 0 and say it
    is ahead and compatible; the store opens."""
    advance(migrated, head_revision())
    migrate = cli(home, "migrate", "--store", migrated)
    assert (migrate.code, f"{AHEAD}: compatible" in migrate.stdout) == (0, True), migrate.describe()
    gate = cli(home, "migrate", "--check", "--store", migrated)
    assert (gate.code, f"{AHEAD}: compatible" in gate.stdout) == (0, True), gate.describe()
    check = cli(home, "check", "--store", migrated)
    assert (check.code, "is ready (the database" in check.stdout) == (0, True), check.describe()
    assert f"{AHEAD}: compatible" in check.stdout
    status = cli(home, "status", "--store", migrated)
    assert status.code == 0, status.describe()
    assert f"ahead of this code (head {head_revision()}): compatible" in status.stdout
    document = json.loads(cli(home, "status", "--json", "--store", migrated).stdout)
    assert document["store"]["schema"]["ahead"] is True
    assert document["store"]["schema"]["compatible"] is True
    rekey = cli(home, "rekey", "--decrypt", "--store", migrated)
    assert rekey.code == 0, rekey.describe()

    async def opens() -> None:
        async with open_store(migrated) as store:
            assert await store.load_config() is not None

    asyncio.run(opens())


def test_incompatible_newer_database_every_command(home: Path, migrated: str) -> None:
    """A newer database that no longer takes this code: every command that reads it exits 1 with
    what it needs, never advising `migrate`; opening the store is one SchemaError."""
    advance(migrated, FUTURE)
    needs = f"needs code of schema head {FUTURE} or newer, such as talaria-relay 9.9.0"
    store = ("--store", migrated)
    for args, stream in [
        (("migrate", *store), "stderr"),
        (("migrate", "--check", *store), "stderr"),
        (("migrate", "--sql", *store), "stderr"),
        (("check", *store), "stdout"),
        (("status", *store), "stderr"),
        (("status", "--json", *store), "stderr"),
        (("rekey", "--decrypt", *store), "stderr"),
        (("import", "--dry-run", "--from", migrated, "--to", "memory://"), "stderr"),
    ]:
        found = cli(home, *args)
        said: str = getattr(found, stream)
        assert found.code == 1, found.describe()
        assert needs in said, found.describe()
        assert "run `talaria-relay migrate" not in found.output, found.describe()
    document = json.loads(cli(home, "status", "--json", "--store", migrated).stdout)
    assert (document["store"]["schema"]["ahead"], document["store"]["schema"]["compatible"]) == (
        True,
        False,
    )
    check = json.loads(cli(home, "check", "--json", "--store", migrated).stdout)
    assert (check["ready"], check["exit"]) == (False, 1)

    async def refused() -> str:
        with pytest.raises(SchemaError) as raised:
            async with open_store(migrated):
                pass
        return str(raised.value)

    message = asyncio.run(refused())
    assert f"at revision {FUTURE}, newer than this code" in message
    assert needs in message
    assert "migrate`" not in message


def test_newer_database_without_a_record_is_refused(home: Path, migrated: str) -> None:
    """A revision this code does not know and no compatibility record: refused, not a traceback."""
    execute(
        migrated,
        "DROP TABLE IF EXISTS relay_compat",
        f"UPDATE relay_alembic_version SET version_num = '{FUTURE}'",
    )
    found = cli(home, "migrate", "--store", migrated)
    assert found.code == 1, found.describe()
    assert f"{AHEAD}: not compatible" in found.stderr
    assert "records no older code" in found.stderr
