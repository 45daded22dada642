"""Every fix-it hint that names a command works when pasted as printed (issue 31).

Each test provokes a hint about a store that is not the default one, runs the command it names as
a shell would split it, and checks that it fixed that store, and that nothing made the default.
"""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg
import pytest
from cli_support import asyncpg_dsn, cli, expect, home, pasted, run, sqlite_url

from relay.errors import SchemaError
from relay.operator.judge import judge
from relay.store import migrations, open_store, resolve, standing
from relay.store.url import command

__all__ = ["home"]  # the fixture, imported for the tests below


def run_pasted(home: Path, text: str) -> None:
    """Run the hint's command (in this process, with a child's environment); it must succeed."""
    expect(cli(home, *pasted(text), timeout=60), 0)


async def at_head(url: str) -> bool:
    return (await standing(url)).at_head


async def below_head(directory: Path) -> str:
    """A SQLite store at 0004 (below head), in a directory whose name has a quote and a space."""
    url = sqlite_url(directory / "relay.db")
    await migrations.upgrade(resolve(url), "0004")
    return url


@pytest.fixture
def odd_dir(tmp_path: Path) -> Path:
    path = tmp_path / "it's here"
    path.mkdir()
    return path


@pytest.mark.sqlite
@pytest.mark.parametrize("args", [["check"], ["status"], ["status", "--json"]], ids=" ".join)
async def test_check_and_status_hints_migrate_the_store_in_question(
    home: Path, odd_dir: Path, args: list[str]
) -> None:
    """`check` and `status` on a store below head print a `migrate` hint that, pasted, brings
    that store (not the default) to head."""
    url = await below_head(odd_dir)
    result = expect(cli(home, *args, "--store", url, timeout=30), 1)
    hint = json.loads(result.stdout)["hint"] if "--json" in args else result.output
    assert pasted(hint)[0] == "migrate", hint
    run_pasted(home, hint)
    assert await at_head(url)
    assert not (home / "talaria-relay").exists(), "the hint migrated the default store"


@pytest.mark.sqlite
async def test_schema_error_hint_migrates_the_store(home: Path, odd_dir: Path) -> None:
    """The `SchemaError` of a store below head names `migrate` with that store."""
    url = await below_head(odd_dir)
    with pytest.raises(SchemaError) as refused:
        await open_store(url, read_only=True)
    run_pasted(home, str(refused.value))
    assert await at_head(url)


@pytest.mark.sqlite
async def test_operator_page_schema_hint_migrates_the_store(home: Path, odd_dir: Path) -> None:
    """The page's schema verdict names `migrate` with the store the page reads."""
    url = await below_head(odd_dir)
    schema = {"current": "0004", "head": migrations.HEAD, "at_head": False, "compatible": False}
    document = {
        "store": {"backend": "sqlite", "url": resolve(url).display, "schema": schema},
        "registration": {"url": "https://relay.example"},
        "profiles": [],
        "fleet": {"source": "fleet", "replicas": [], "more": 0},
        "generated_at": 0,
    }
    _level, _line, reasons = judge(document)
    (hint,) = [reason for reason in reasons if "talaria-relay" in reason]
    run_pasted(home, hint)
    assert await at_head(url)


@pytest.mark.postgres
async def test_a_password_is_never_printed_and_the_hint_says_to_put_it_back(
    home: Path, pg_database: str
) -> None:
    """With a password in the URL the hint shows `***` and says so; with the password put back
    it migrates that database."""
    with_password = pg_database.replace("postgresql+asyncpg://", "postgresql://").replace(
        "@", ":hint-secret-9@", 1
    )
    if ":hint-secret-9@" not in with_password or with_password.count("@") != 1:
        pytest.skip("the test Postgres URL has a password of its own")
    result = expect(cli(home, "status", "--store", with_password, timeout=30, process=True), 1)
    assert "hint-secret-9" not in result.output
    assert "in place of ***" in result.output
    args = [word.replace(":***@", ":hint-secret-9@") for word in pasted(result.output)]
    expect(cli(home, *args, timeout=60), 0)
    assert await at_head(pg_database)


@pytest.mark.postgres
async def test_lock_timeout_hint_migrates_once_the_lock_is_gone(
    home: Path, pg_database: str
) -> None:
    """A migration that waited past its lock timeout names a `migrate` with a longer one and
    the store; pasted once the lock is released, it migrates that database."""
    await migrations.upgrade(resolve(pg_database), "0008")
    holder = await asyncpg.connect(asyncpg_dsn(pg_database))
    try:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("LOCK TABLE relay_fleet IN ACCESS SHARE MODE")
        result = run(home, "migrate", "--lock-timeout", "0.5", "--store", pg_database)
        assert result.code == 3, result.describe()
        await transaction.rollback()
    finally:
        await holder.close()
    assert "--lock-timeout 60" in result.stderr, result.describe()
    run_pasted(home, result.stderr)
    assert await at_head(pg_database)


@pytest.mark.sqlite
def test_the_default_store_is_named_by_leaving_store_out(tmp_path: Path) -> None:
    """Only the embedded default goes without `--store`; a URL with a quote stays one word."""
    assert command("migrate", resolve(None)) == "`talaria-relay migrate`"
    url = sqlite_url(tmp_path / "a 'b'" / "relay.db")
    hint = command("migrate", resolve(url))
    assert pasted(hint) == ["migrate", "--store", url]
