"""`talaria-relay check`, the readiness probe: exit codes and its JSON (run in this process with a
child's environment; a subprocess once, as a probe runs it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import free_port, populate, run

from relay.store import open_store

KEYS = {"ready", "store", "reachable", "schema_at_head", "registered", "problem", "schema", "exit"}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "xdg"
    path.mkdir()
    return path


def check(home: Path, url: str, *extra: str) -> tuple[int, dict[str, object]]:
    result = run(home, "check", "--json", "--store", url, *extra, timeout=30)
    assert "Traceback" not in result.output, result.describe()
    document = json.loads(result.stdout)
    assert set(document) == KEYS
    assert document["exit"] == result.code
    return result.code, document


async def test_a_registered_store_at_head_is_ready(home: Path, tmp_path: Path) -> None:
    """Migrated and registered: exit 0, ready, no problem."""
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    async with open_store(url) as store:
        await populate(store)
    code, document = check(home, url)
    assert code == 0
    assert document["ready"] is True
    assert (document["schema_at_head"], document["registered"], document["problem"]) == (
        True,
        True,
        None,
    )
    result = run(home, "check", "--store", url, timeout=30, process=True)
    assert (result.code, result.stdout.strip().endswith("is ready")) == (0, True)


async def test_an_unregistered_store_is_not_ready(home: Path, tmp_path: Path) -> None:
    """Migrated but never paired: exit 1, and the problem says to pair."""
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    async with open_store(url):
        pass
    code, document = check(home, url)
    assert (code, document["registered"], document["schema_at_head"]) == (1, False, True)
    assert "pair" in str(document["problem"])


def test_a_missing_sqlite_file_is_missing_to_check_and_status_alike(
    home: Path, tmp_path: Path
) -> None:
    """A SQLite file that does not exist: `check` says there is no store there (exit 3, not
    reachable, no schema verdict), `status` says the same words (exit 2); nothing created."""
    path = tmp_path / "relay.db"
    code, document = check(home, f"sqlite:///{path}")
    assert (code, document["reachable"], document["schema_at_head"]) == (3, False, None)
    absent = f"no SQLite store at {path}"
    assert absent in str(document["problem"])
    status = run(home, "status", "--store", f"sqlite:///{path}", timeout=30)
    assert status.code == 2
    assert absent in status.stderr
    assert not path.exists()


async def test_a_store_below_head_is_not_ready(home: Path, tmp_path: Path) -> None:
    """An empty SQLite file (no relay schema yet): exit 1 with the hint to migrate."""
    path = tmp_path / "relay.db"
    path.touch()
    code, document = check(home, f"sqlite:///{path}")
    assert (code, document["reachable"], document["schema_at_head"]) == (1, True, False)
    assert "talaria-relay migrate" in str(document["problem"])


async def test_an_unmigrated_postgres_is_not_ready(home: Path, pg_database: str) -> None:
    """An empty Postgres database answers but has no schema: exit 1."""
    code, document = check(home, pg_database)
    assert (code, document["reachable"], document["schema_at_head"]) == (1, True, False)


def test_an_unreachable_store_exits_3(home: Path) -> None:
    """A Postgres server that is not there: exit 3, not reachable."""
    code, document = check(home, f"postgresql://relay@127.0.0.1:{free_port()}/relay")
    assert (code, document["reachable"], document["ready"]) == (3, False, False)
