"""`talaria-relay migrate` says what it did: each revision it applied, or that there was none;
`--check` lists what is pending; `--sql` prints only the pending DDL (`--from-empty`: all)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import Result, run

from relay.store import resolve
from relay.store.sql import migrate

pytestmark = pytest.mark.sqlite
HEAD = migrate.head_revision()


def cli(home: Path, *args: str, code: int = 0) -> Result:
    result = run(home, *args, timeout=60)
    assert result.code == code, result.describe()
    return result


def test_migrate_lists_what_it_applied_then_says_already_at_head(tmp_path: Path) -> None:
    """A new file: one `applied` line per revision, oldest first, then the head; run again:
    `already at head` and nothing applied."""
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    lines = cli(tmp_path, "migrate", "--store", url).stdout.splitlines()
    ids = [revision.id for revision in migrate.revisions()]
    assert [line.split()[1] for line in lines[:-1]] == ids
    assert all(line.startswith("applied ") for line in lines[:-1])
    assert lines[-1] == f"{url} is at head {HEAD}"
    again = cli(tmp_path, "migrate", "--store", url).stdout.splitlines()
    assert again == [f"{url} is already at head {HEAD}"]


async def test_from_a_middle_revision_only_the_rest_is_listed_and_printed(tmp_path: Path) -> None:
    """At 0004: `--check` lists every later revision as pending (exit 1), `--sql` prints only
    their DDL (no CREATE of 0001's tables), `--sql --from-empty` all of it, and `migrate`
    applies exactly those."""
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    await migrate.upgrade(resolve(url), "0004")
    check = cli(tmp_path, "migrate", "--check", "--store", url, code=1).stdout
    pending = [line.split()[0] for line in check.splitlines()[1:]]
    later = [revision.id for revision in migrate.revisions("0004")]
    assert later[:2] == ["0005", "0006"]
    assert pending == later
    assert "is at 0004, not at head" in check

    sql = cli(tmp_path, "migrate", "--sql", "--store", url)
    assert "CREATE TABLE relay_config" not in sql.stdout
    # The relay's revision moves to its own table before the steps (0010), as `migrate` does it.
    assert "INSERT INTO relay_alembic_version (version_num) VALUES ('0004')" in sql.stdout
    assert "DELETE FROM alembic_version WHERE version_num = '0004'" in sql.stdout
    assert f"UPDATE relay_alembic_version SET version_num='{later[-1]}'" in sql.stdout
    assert "0004" in sql.stderr
    everything = cli(tmp_path, "migrate", "--sql", "--from-empty", "--store", url).stdout
    assert "CREATE TABLE relay_config" in everything
    assert await migrate.current(resolve(url)) == "0004"  # --sql wrote nothing

    lines = cli(tmp_path, "migrate", "--store", url).stdout.splitlines()
    assert [line.split()[:2] for line in lines[:-1]] == [["applied", id] for id in later]


def test_sql_at_head_prints_no_sql(tmp_path: Path) -> None:
    """`--sql` on a database at head prints no statement, and says so on stderr."""
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    cli(tmp_path, "migrate", "--store", url)
    result = cli(tmp_path, "migrate", "--sql", "--store", url)
    assert result.stdout == ""
    assert f"already at head {HEAD}" in result.stderr


def test_from_empty_goes_with_sql(tmp_path: Path) -> None:
    """`--from-empty` alone is bad usage (exit 2)."""
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    result = cli(tmp_path, "migrate", "--from-empty", "--store", url, code=2)
    assert "--from-empty goes with --sql" in result.stderr
