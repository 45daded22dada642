"""What a newcomer meets first, run as they would run it (issue 31, "First contact")."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cli_support import ROOT, child_env, dev_relay, home, run, sqlite_url

__all__ = ["home"]  # the fixture, imported for the tests below


@pytest.mark.sqlite
@pytest.mark.parametrize("where", ["default", "env"])
def test_status_and_check_agree_on_a_store_that_is_not_there(
    home: Path, tmp_path: Path, where: str
) -> None:
    """With no `--store`, `status` and `check` on a store that is not there exit alike (3), say
    where its URL came from, never blame a `--store` nobody gave, and create nothing."""
    env = {} if where == "default" else {"TALARIA_RELAY_STORE_URL": sqlite_url(tmp_path / "x.db")}
    said = "the embedded default" if where == "default" else "$TALARIA_RELAY_STORE_URL"
    status = run(home, "status", env=env, timeout=30, process=True)
    check = run(home, "check", env=env, timeout=30, process=True)
    assert (status.code, check.code) == (3, 3), status.describe() + check.describe()
    assert f"the store URL from {said}" in status.stderr, status.describe()
    assert f"the store URL from {said}" in check.stdout, check.describe()
    assert "--store:" not in status.stderr
    assert sorted(home.iterdir()) == []
    assert not (tmp_path / "x.db").exists()


@pytest.mark.sqlite
def test_a_store_named_with_store_that_is_not_there_is_bad_input(home: Path) -> None:
    """`--store` naming a file that is not there is a typo: exit 2, blaming `--store`."""
    result = run(home, "status", "--store", sqlite_url(home / "typo.db"), timeout=30)
    assert result.code == 2, result.describe()
    assert "--store: no SQLite store at" in result.stderr


def test_offline_sql_without_a_url_names_its_dialect(home: Path) -> None:
    """`migrate --sql --from-empty` without a URL says, in the SQL, that it is SQLite's and how to
    get Postgres'; with a Postgres URL it says Postgres."""
    result = run(home, "migrate", "--sql", "--from-empty", timeout=30, process=True)
    assert result.code == 0, result.describe()
    first, second = result.stdout.splitlines()[:2]
    assert first.startswith("-- the SQLite DDL of every revision"), first
    assert "postgresql://" in second
    pg = run(home, "migrate", "--sql", "--from-empty", "--store", "postgresql://u@h/db", timeout=30)
    assert pg.stdout.startswith("-- the Postgres DDL of every revision"), pg.describe()


@pytest.mark.sqlite
def test_alembic_current_in_a_checkout_creates_nothing_in_the_home(tmp_path: Path) -> None:
    """`alembic current` with no URL, the default store not there: it says so, fails, and
    leaves the user's home as it was; `alembic upgrade head` on a named file then works, and
    `current` names the revision, at head and below 0010 (kept in `alembic_version` there)."""
    fake_home = tmp_path / "home"
    fake_home.mkdir()
    env = {k: v for k, v in child_env(fake_home).items() if k != "XDG_STATE_HOME"}
    env["HOME"] = str(fake_home)
    alembic = [sys.executable, "-m", "alembic"]
    done = subprocess.run(
        [*alembic, "current"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode != 0, done.stdout + done.stderr
    assert "no SQLite store at" in done.stdout + done.stderr
    assert "nothing created" in done.stdout + done.stderr
    assert list(fake_home.iterdir()) == []
    url = sqlite_url(tmp_path / "named.db")
    said = []
    for args in (["upgrade", "head"], ["current"], ["downgrade", "0009"], ["current"]):
        done = subprocess.run(
            [*alembic, "-x", f"url={url}", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        said.append(done.stdout)
    assert "(head)" in said[1]
    assert said[3].split() == ["0009"]
    assert os.path.exists(tmp_path / "named.db")


@pytest.mark.sqlite
def test_after_the_demo_no_replica_of_it_lives_and_a_second_run_says_how_to_go_on(
    home: Path, tmp_path: Path
) -> None:
    """Once `demo` has exited, `status` lists no live replica (it ended its turns and stopped);
    a second `demo` on that store is refused naming `--skip-if-registered`, which then passes."""
    url = sqlite_url(tmp_path / "demo.db")
    first = run(home, "demo", "--store", url, timeout=120, process=True)
    assert first.code == 0, first.describe()
    status = run(home, "status", "--json", "--store", url, timeout=30, process=True)
    assert status.code == 0, status.describe()
    document = json.loads(status.stdout)
    replicas = document["fleet"]["replicas"]
    assert replicas, status.describe()  # the demo's rows are there, handed over
    assert not [r for r in replicas if r["alive"]], status.describe()
    again = run(home, "demo", "--store", url, timeout=60, process=True)
    assert again.code == 2, again.describe()
    assert "--skip-if-registered" in again.stderr
    skipped = run(home, "demo", "--store", url, "--skip-if-registered", timeout=60)
    assert skipped.code == 0, skipped.describe()


@pytest.mark.parametrize("where", ["relay", "store"])
def test_a_host_name_typo_is_named(home: Path, tmp_path: Path, where: str) -> None:
    """A host name DNS does not know is said as such, naming the host (the relay's) or the URL
    that holds it (the store's), not only "Name or service not known"."""
    if where == "relay":
        args = ["demo", "--store", sqlite_url(tmp_path / "d.db")]
        args += ["--relay-url", "https://relay.typo-host.invalid", "--invitation", "x"]
        said = "no host named relay.typo-host.invalid was found (DNS"
    else:
        args = ["check", "--store", "postgresql://relay@db.typo-host.invalid/relay"]
        said = "db.typo-host.invalid/relay is unavailable: its host name was not found (DNS"
    result = run(home, *args, timeout=60, process=True)
    assert result.code == 3, result.describe()
    assert said in result.output, result.describe()


def test_the_dev_relay_banner_command_registers_and_enrolls_two_relay_users(home: Path) -> None:
    """The `try:` line of `dev-relay` runs as printed: its two invitations are two relay users',
    so the demo's second profile gets a grant of its own and the first stays enabled."""
    with dev_relay(home) as relay:
        line = ""
        while not line.startswith("try:"):
            read = relay.stdout.next_line(time.monotonic() + 10)
            assert read is not None, relay.startup
            line = read.strip()
        args = shlex.split(line.removeprefix("try:"))
        assert args[0] == "talaria-relay"
        result = run(home, *args[1:], "--store", sqlite_url(home / "d.db"), timeout=120)
        held = httpx.get(f"{relay.url}/admin/state", timeout=10).json()
        relay.stop()
    assert result.code == 0, result.describe()
    assert sorted(grant["userId"] for grant in held["grants"]) == ["usr_owner", "usr_work"]
