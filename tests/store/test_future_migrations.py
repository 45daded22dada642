"""Synthetic future migrations on top of head: this code works through an expand one, is refused
clearly by a contract one, and `migrate` refuses the contract one while older code is live.

The future release is this code with two more migrations (tests/future_release.py), run as a
real `talaria-relay` process; each test has a database of its own.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import forked
import pytest
from cli_support import Result, child_env, populate, run
from databases import execute, own_database
from future_release import CONTRACT, EXPAND, command, scripts
from replicas import cluster

from relay.errors import SchemaError
from relay.store import open_store
from relay.store.sql.migrate import head_revision, upgrade
from relay.store.url import resolve


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A registered store at this code's head, in a database of its own."""
    url = own_database(request, tmp_path, request.param)

    async def fill() -> None:
        await upgrade(resolve(url))
        async with open_store(url) as opened:
            await populate(opened)

    asyncio.run(fill())
    # `populate` runs a service on a clock a year ahead: its fleet row would count as live.
    execute(url, "DELETE FROM relay_fleet")
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def bare(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store at this code's head, in a database of its own."""
    url = own_database(request, tmp_path, request.param)
    asyncio.run(upgrade(resolve(url)))
    return url


def future(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`talaria-relay ARGS` as the future release, in a process of its own, forked from the fork
    server (`forked.py`) rather than an interpreter started for it."""
    location = tmp_path / "future-migrations"
    if not location.exists():
        scripts(tmp_path)
    run_it = forked.run(
        *command(location, *args), env=child_env(tmp_path), cwd=Path.cwd(), within_s=120
    )
    done = asyncio.run(run_it)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


def older_replica(url: str, owner: str = "web-old/0123456789ab") -> None:
    """A live fleet row of this code (schema head `head_revision()`), as its replica writes it."""
    now = int(time.time() * 1000)
    execute(
        url,
        "INSERT INTO relay_fleet (owner, version, schema_head, host, pid, started_at, seen_at, "
        f"live_until) VALUES ('{owner}', '0.9.0', '{head_revision()}', 'node-a', 4242, "
        f"{now}, {now}, {now + 60_000})",
    )


def here(tmp_path: Path, *args: str) -> Result:
    home = tmp_path / "xdg"
    home.mkdir(exist_ok=True)
    result = run(home, *args, timeout=60)
    assert "Traceback" not in result.output, result.describe()
    return result


async def _opens(url: str) -> bool:
    async with open_store(url) as opened:
        return await opened.load_config() is not None


def test_this_code_works_through_an_expand_migration(tmp_path: Path, store: str) -> None:
    """After the future release's expand migration, this code opens the store, reads what it
    holds, and its commands say the database is ahead and compatible, exit 0."""
    applied = future(tmp_path, "migrate", "--to", EXPAND, "--store", store)
    assert applied.returncode == 0, applied.stderr
    assert asyncio.run(_opens(store))
    status = here(tmp_path, "status", "--store", store)
    assert status.code == 0, status.describe()
    assert f"{EXPAND} (ahead of this code (head {head_revision()}): compatible)" in status.stdout
    assert here(tmp_path, "migrate", "--check", "--store", store).code == 0
    assert here(tmp_path, "check", "--store", store).code == 0


def test_contract_migration_refused_while_older_code_is_live(tmp_path: Path, store: str) -> None:
    """The future `migrate` refuses its contract migration while a live replica runs this code,
    naming it, and changes nothing; with --force it applies it."""
    older_replica(store)
    refused = future(tmp_path, "migrate", "--store", store)
    assert refused.returncode == 1, refused.stderr
    assert f"migration {CONTRACT} is a contract one" in refused.stderr
    assert "web-old/0123456789ab (talaria-relay 0.9.0" in refused.stderr
    assert f"schema head {head_revision()}, pid 4242 on node-a" in refused.stderr
    assert "--force" in refused.stderr
    gate = here(tmp_path, "migrate", "--check", "--store", store)
    assert (gate.code, f"is at head {head_revision()}" in gate.stdout) == (0, True)
    forced = future(tmp_path, "migrate", "--force", "--store", store)
    assert forced.returncode == 0, forced.stderr
    assert f"is at head {CONTRACT}" in forced.stdout


def test_this_code_is_refused_by_a_contract_migration(tmp_path: Path, store: str) -> None:
    """Past the contract migration this code is refused with one SchemaError naming the code the
    database needs; rolling the database back (the future release's `migrate --to`) lets it in."""
    assert future(tmp_path, "migrate", "--store", store).returncode == 0
    with pytest.raises(SchemaError) as raised:
        asyncio.run(_opens(store))
    assert f"at revision {CONTRACT}, newer than this code" in str(raised.value)
    assert f"needs code of schema head {CONTRACT} or newer" in str(raised.value)
    for args in (("migrate",), ("migrate", "--check"), ("status",), ("check",)):
        found = here(tmp_path, *args, "--store", store)
        assert found.code == 1, found.describe()
        assert "not compatible" in found.output, found.describe()
    back = future(tmp_path, "migrate", "--to", head_revision(), "--store", store)
    assert back.returncode == 0, back.stderr
    assert asyncio.run(_opens(store))
    assert here(tmp_path, "migrate", "--check", "--store", store).code == 0


def test_a_fleet_row_with_fields_from_a_newer_release_is_read(tmp_path: Path, store: str) -> None:
    """A fleet row with a column this code does not know (the expand migration's) is read by this
    code's store and `status`, and still counts: `migrate` of the future release names it."""
    assert future(tmp_path, "migrate", "--to", EXPAND, "--store", store).returncode == 0
    older_replica(store)
    execute(store, "UPDATE relay_fleet SET zone = 'eu-west'")

    async def listed() -> list[str]:
        async with open_store(store) as opened:
            return [member.owner for member in await opened.fleet()]

    assert asyncio.run(listed()) == ["web-old/0123456789ab"]
    status = json.loads(here(tmp_path, "status", "--json", "--store", store).stdout)
    # The rows the fleet recorded (the store's fixture holds runs of an owner it has not).
    recorded = [row["owner"] for row in status["fleet"]["replicas"] if "release" in row]
    assert recorded == ["web-old/0123456789ab"]
    refused = future(tmp_path, "migrate", "--store", store)
    assert (refused.returncode, "web-old/0123456789ab" in refused.stderr) == (1, True)


async def test_migrate_waits_for_a_real_replica_of_this_code(tmp_path: Path, bare: str) -> None:
    """A replica process of this code, publishing, is in the fleet: the future release's
    `migrate` refuses its contract migration naming it; once the replica stops it has left the
    live fleet, and the same `migrate` applies it without --force."""
    async with cluster(bare, 1) as group:
        await group.pair()
        await group.everywhere("flush")
        owner = group.replicas[0].incarnation
        refused = await asyncio.to_thread(future, tmp_path, "migrate", "--store", bare)
        assert refused.returncode == 1, refused.stderr
        assert f"{owner} (talaria-relay" in refused.stderr
        status = here(tmp_path, "status", "--json", "--store", bare)
        replicas = json.loads(status.stdout)["fleet"]["replicas"]
        assert [row["owner"] for row in replicas if row["alive"]] == [owner]
    applied = await asyncio.to_thread(future, tmp_path, "migrate", "--store", bare)
    assert applied.returncode == 0, applied.stderr
