"""The relay in a host application's own database, with real processes: the host's Alembic chain
(tests/host_app, revision `a1`) and `talaria-relay migrate` in either order, again, the host's
`alembic check` and downgrade, and databases migrated by releases before 0010 (the relay's revision
in `alembic_version`, alone or beside the host's) upgraded in place."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import forked
import pytest
from backends import on
from databases import behind_the_store, own_database
from harness import relay_env
from intact import running
from sqlalchemy import text

from relay.store import open_store, resolve
from relay.store.migrations import HEAD, VERSION_TABLE, standing

pytestmark = on("sqlite", "postgres")

ROOT = Path(__file__).resolve().parents[2]
HOST_INI = ROOT / "tests" / "host_app" / "alembic.ini"
NO_CHANGES = "No new upgrade operations detected"
Done = subprocess.CompletedProcess[str]


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> str:
    """An empty database of the test's own, shared by the host and the relay."""
    return own_database(request, tmp_path, backend)


async def _process(module: str, args: list[str], url: str, tmp: Path) -> Done:
    """`python -m MODULE ARGS` as a process of its own, forked from the fork server that has the
    library imported (`forked.py`): an interpreter start each would cost about a second of CPU."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env |= {
        "HOST_APP_DATABASE_URL": url,
        "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}",
        "XDG_STATE_HOME": str(tmp / "state"),
    }
    env.pop("TALARIA_RELAY_STORE_URL", None)
    return await forked.run(module, *args, module=True, env=env, cwd=tmp, within_s=120)


async def relay(tmp: Path, url: str, *args: str) -> Done:
    """`talaria-relay ARGS --store URL` as a process of its own."""
    return await _process("relay", [*args, "--store", url], url, tmp)


async def host(tmp: Path, url: str, *args: str) -> Done:
    """The host application's `alembic ARGS` on its database, as a process of its own."""
    return await _process("alembic", ["-c", str(HOST_INI), *args], url, tmp)


def ok(done: Done) -> str:
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


async def version_rows(url: str) -> tuple[list[str] | None, list[str] | None]:
    """The rows of `alembic_version` and of the relay's version table (None: no such table)."""
    found: list[list[str] | None] = []
    for name in ("alembic_version", VERSION_TABLE):
        exists = (
            f"SELECT count(*) FROM sqlite_master WHERE name = '{name}'"
            if url.startswith("sqlite")
            else f"SELECT count(to_regclass('{name}'))"
        )
        ((count,),) = (await behind_the_store(url, text(exists)))[0]
        if not count:
            found.append(None)
            continue
        (rows,) = await behind_the_store(url, text(f"SELECT version_num FROM {name}"))
        found.append(sorted(str(row[0]) for row in rows))
    return found[0], found[1]


async def publishes(url: str) -> None:
    """A store on the shared database pairs and publishes (the quick start's first turn)."""
    async with open_store(url) as store, relay_env(store) as env:
        await env.pair()
        running(env, "s1")
        assert await env.publish() is None
        assert [r.status for r in env.sent("snapshot")][-1] == 200


async def test_host_first_then_relay_then_both_again(database: str, tmp_path: Path) -> None:
    """The host migrates, then the relay (exit 0, at head); both again change nothing; the
    host's `alembic check` finds nothing to do and its `current` is its own `a1`."""
    ok(await host(tmp_path, database, "upgrade", "head"))
    assert f"at head {HEAD}" in ok(await relay(tmp_path, database, "migrate"))
    assert f"already at head {HEAD}" in ok(await relay(tmp_path, database, "migrate"))
    ok(await host(tmp_path, database, "upgrade", "head"))
    assert NO_CHANGES in ok(await host(tmp_path, database, "check"))
    assert "a1 (head)" in ok(await host(tmp_path, database, "current"))
    assert await version_rows(database) == (["a1"], [HEAD])
    await publishes(database)


async def test_relay_first_then_host_and_the_hosts_downgrade(database: str, tmp_path: Path) -> None:
    """The relay migrates, then the host (exit 0); the host's check is empty; the host's
    downgrade to base leaves the relay at head and publishing."""
    ok(await relay(tmp_path, database, "migrate"))
    ok(await host(tmp_path, database, "upgrade", "head"))
    assert NO_CHANGES in ok(await host(tmp_path, database, "check"))
    ok(await host(tmp_path, database, "downgrade", "base"))
    ok(await relay(tmp_path, database, "migrate", "--check"))
    assert (await version_rows(database))[1] == [HEAD]
    await publishes(database)


async def test_upgrade_in_place_from_0009_of_the_relay_alone(database: str, tmp_path: Path) -> None:
    """A database a release before 0010 migrated (its revision in `alembic_version`, nothing
    else there): `migrate --sql` shows the move, `migrate` makes it, and `alembic_version` goes;
    then the host's own chain runs on it."""
    ok(await relay(tmp_path, database, "migrate", "--to", "0009"))
    assert await version_rows(database) == (["0009"], None)
    shown = ok(await relay(tmp_path, database, "migrate", "--sql"))
    assert f"INSERT INTO {VERSION_TABLE} (version_num) VALUES ('0009')" in shown
    assert "DELETE FROM alembic_version WHERE version_num = '0009'" in shown
    assert (await version_rows(database)) == (["0009"], None)  # --sql wrote nothing
    assert f"at head {HEAD}" in ok(await relay(tmp_path, database, "migrate"))
    assert await version_rows(database) == (None, [HEAD])
    ok(await host(tmp_path, database, "upgrade", "head"))
    assert NO_CHANGES in ok(await host(tmp_path, database, "check"))


async def test_upgrade_in_place_from_0009_beside_the_host(database: str, tmp_path: Path) -> None:
    """`alembic_version` holding the host's `a1` and the relay's 0009: the relay's row moves,
    the host's stays with its table; the host's chain then runs; a rollback to 0009 puts it
    back; a revision the relay does not know is never read as its own."""
    ok(await host(tmp_path, database, "upgrade", "head"))
    ok(await relay(tmp_path, database, "migrate", "--to", "0009"))
    assert await version_rows(database) == (["0009", "a1"], None)
    ok(await relay(tmp_path, database, "migrate"))
    assert await version_rows(database) == (["a1"], [HEAD])
    assert "a1 (head)" in ok(await host(tmp_path, database, "current"))
    assert NO_CHANGES in ok(await host(tmp_path, database, "check"))
    # Rolled back through 0010: the revision goes back where code of 0009 reads it.
    ok(await relay(tmp_path, database, "migrate", "--to", "0009"))
    assert await version_rows(database) == (["0009", "a1"], None)
    ok(await relay(tmp_path, database, "migrate"))
    assert (await standing(resolve(database))).at_head


async def test_a_host_revision_is_not_a_newer_relay(database: str, tmp_path: Path) -> None:
    """A database holding only the host's chain (`a1`, even numbered like the relay's, `0003`)
    is someone else's: the relay's standing is no revision, and `migrate` builds its schema."""
    ok(await host(tmp_path, database, "upgrade", "head"))
    found = await standing(resolve(database))
    assert (found.current, found.ahead) == (None, False)

    await behind_the_store(database, text("UPDATE alembic_version SET version_num = '0003'"))
    assert (await standing(resolve(database))).current is None
    assert f"at head {HEAD}" in ok(await relay(tmp_path, database, "migrate"))
    assert await version_rows(database) == (["0003"], [HEAD])
