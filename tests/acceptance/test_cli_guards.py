"""The command never does the wrong thing quietly: each mistake is one clear line and an exit code.

Acceptance tests of the command, like tests/acceptance/test_cli.py; their helpers are in
tests/cli_support.py.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import ROOT, cli, expect, home, json_url, sqlite_url, write_legacy_state

import relay

__all__ = ["home"]  # the fixture, imported for the tests below


def test_version_is_the_package_metadata(home: Path) -> None:
    """`talaria-relay --version` and `relay.__version__` are pyproject's version."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    result = expect(cli(home, "--version", timeout=30), 0)
    assert result.stdout.strip() == f"talaria-relay {project['version']}"
    assert relay.__version__ == project["version"]


def test_license_file_matches_the_metadata() -> None:
    """pyproject says MIT, and LICENSE is the MIT licence."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")


@pytest.mark.parametrize("kind", ["json", "sqlite"])
def test_import_from_a_missing_store_exits_2_and_creates_nothing(home: Path, kind: str) -> None:
    """`import --from` a JSON dir or SQLite file that is not there: exit 2 naming it, no files."""
    source = home / ("state" if kind == "json" else "relay.db")
    url = json_url(source) if kind == "json" else sqlite_url(source)
    target = home / "target.db"
    result = expect(cli(home, "import", "--from", url, "--to", sqlite_url(target)), 2)
    assert f"--from: no {'JSON' if kind == 'json' else 'SQLite'} store at {source}" in result.stderr
    assert sorted(home.iterdir()) == []


@pytest.mark.parametrize("kind", ["json", "sqlite"])
def test_status_of_a_missing_store_exits_2_and_creates_nothing(home: Path, kind: str) -> None:
    """`status` on a path that does not exist says so, exits 2, and creates nothing."""
    source = home / ("state" if kind == "json" else "relay.db")
    url = json_url(source) if kind == "json" else sqlite_url(source)
    for flags in ([], ["--json"]):
        result = expect(cli(home, "status", *flags, "--store", url, timeout=30), 2)
        assert f"--store: no {'JSON' if kind == 'json' else 'SQLite'} store at {source}" in (
            result.stderr
        )
        assert result.stdout == ""
    assert sorted(home.iterdir()) == []


def test_a_relative_sqlite_url_shows_the_path_it_resolved(home: Path) -> None:
    """`sqlite:///x.db` is relative to the working directory: the error shows where it looked."""
    result = expect(cli(home, "status", "--store", "sqlite:///srv/relay.db", timeout=30), 2)
    assert f"no SQLite store at {ROOT / 'srv' / 'relay.db'}" in result.stderr
    assert "sqlite:////srv/relay.db absolute" in result.stderr
    assert not (ROOT / "srv").exists()


def test_demo_never_writes_the_store_the_environment_names(home: Path) -> None:
    """Without --store, `demo` uses its own demo.db, never `$TALARIA_RELAY_STORE_URL`'s store."""
    real = home / "real.db"
    env = {"TALARIA_RELAY_STORE_URL": sqlite_url(real)}
    result = expect(cli(home, "demo", env=env, timeout=120), 0)
    assert not real.exists(), result.describe()
    assert str(home / "talaria-relay" / "demo.db") in result.stdout


def test_demo_refuses_a_store_that_holds_anything_and_skips_when_asked(home: Path) -> None:
    """A second `demo --store` on its store exits 2, changing nothing; --skip-if-registered: 0."""
    store = home / "named.db"
    expect(cli(home, "demo", "--store", sqlite_url(store), timeout=120), 0)
    before = store.read_bytes()
    result = expect(cli(home, "demo", "--store", sqlite_url(store), timeout=60), 2)
    assert "already holds a registration with http://127.0.0.1:" in result.stderr
    assert "writes only into an empty store" in result.stderr
    flags = ["--store", sqlite_url(store), "--skip-if-registered"]
    result = expect(cli(home, "demo", *flags, timeout=60), 0)
    assert "registration skipped" in result.stdout
    assert store.read_bytes() == before


def test_demo_summary_shows_what_the_relay_holds_apart_from_the_store(home: Path) -> None:
    """The summary's relay table is the relay's own state; the store's status is labelled so."""
    result = expect(cli(home, "demo", "--store", sqlite_url(home / "d.db"), timeout=120), 0)
    relay_part, _, store_part = result.stdout.partition("what the store holds")
    assert "what the relay holds" in relay_part
    assert "sessions announced once each: chat-old, chat-plan, chat-review" in relay_part
    assert "store        sqlite" in store_part


def test_legacy_import_without_identities_stops_and_names_the_flags(home: Path) -> None:
    """A legacy state dir whose profile homes are not given: exit 2 naming the flags, no copy;
    with --allow-missing-identities the import goes on."""
    state, root = home / "legacy-state", home / "profiles"
    write_legacy_state(state, {"alpha": root / "alpha", "beta": root / "beta"})
    target = home / "imported.db"
    args = ["import", "--from", json_url(state), "--to", sqlite_url(target)]
    result = expect(cli(home, *args, timeout=30), 2)
    assert "no identity found for profiles alpha, beta" in result.stderr
    assert "--profile-home NAME=PATH" in result.stderr
    assert "--profiles-root DIR" in result.stderr
    assert not target.exists()
    result = expect(cli(home, *args, "--allow-missing-identities", timeout=30), 0)
    assert "identities       0" in result.stdout


@pytest.mark.postgres
@pytest.mark.parametrize(
    "query",
    [
        "application_name=my-relay",
        "options=-c%20statement_timeout%3D5000",
        "sslmode=disable",
        "sslmode=prefer",
        "sslmode=allow",
        "ssl=false",
        "target_session_attrs=read-write",
        "target_session_attrs=any&application_name=x&sslmode=prefer",
        "pool_size=2&pool_max_idle=5&pool_max_lifetime=60&statement_timeout=5&lock_timeout=1",
    ],
)
def test_postgres_url_parameters_users_paste_work(home: Path, pg_database: str, query: str) -> None:
    """libpq parameters copied from a connection string work for `migrate` and `status`."""
    url = f"{pg_database}{'&' if '?' in pg_database else '?'}{query}"
    expect(cli(home, "migrate", "--store", url, timeout=60), 0)
    expect(cli(home, "status", "--json", "--store", url, timeout=60), 0)


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("sslmode=maybe", "sslmode='maybe'"),
        ("target_session_attrs=whichever", "target_session_attrs='whichever'"),
        ("sslrootcert=/nonexistent/root.crt", "sslrootcert: no file at /nonexistent/root.crt"),
        ("sslcert=/nonexistent/c.crt", "sslcert: no file at"),
        ("sslkey=/nonexistent/c.key", "sslkey: no file at"),
        ("keepalives=1", "unknown postgres store URL parameter 'keepalives'"),
    ],
)
def test_a_bad_postgres_url_parameter_is_named(home: Path, query: str, named: str) -> None:
    """A parameter that cannot work: exit 2 and a message that names it; nothing is contacted."""
    url = f"postgresql://relay@127.0.0.1:1/relay?{query}"
    result = expect(cli(home, "status", "--store", url, timeout=30), 2)
    assert named in result.stderr


@pytest.mark.postgres
def test_a_missing_postgres_database_is_unreachable(home: Path, pg_database: str) -> None:
    """A database that does not exist on a live server: exit 3, naming the store."""
    url = pg_database.rsplit("/", 1)[0] + "/relay_no_such_database"
    result = expect(cli(home, "status", "--store", url, timeout=30), 3)
    assert "relay_no_such_database" in result.stderr


@contextlib.contextmanager
def read_only_view(directory: Path) -> Iterator[Path]:
    """`directory` bind-mounted read-only: binds root too, which permission bits do not."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("no mount/umount here to make a read-only bind mount")
    view = directory.with_name(directory.name + "-ro")
    view.mkdir()
    mounted = subprocess.run([mount, "--bind", str(directory), str(view)], check=False)
    remounted = mounted.returncode == 0 and (
        subprocess.run([mount, "-o", "remount,bind,ro", str(view)], check=False).returncode == 0
    )
    try:
        if not remounted:
            pytest.skip("this sandbox cannot bind-mount a directory read-only (mount failed)")
        yield view
    finally:
        if mounted.returncode == 0:
            subprocess.run([umount, str(view)], check=True)


@pytest.mark.sqlite
def test_status_reads_a_read_only_database_and_writers_fail_in_one_line(home: Path) -> None:
    """On a read-only mount, `status` reads the database; `migrate` and `demo` give one line, 3."""
    data = home / "data"
    data.mkdir()
    expect(cli(home, "migrate", "--store", sqlite_url(data / "relay.db"), timeout=30), 0)
    with read_only_view(data) as view:
        url = sqlite_url(view / "relay.db")
        result = expect(cli(home, "status", "--store", url, timeout=30), 0)
        assert "registration none" in result.stdout
        expect(cli(home, "status", "--json", "--store", url, timeout=30), 0)
        for args in (["migrate"], ["demo"]):
            result = cli(home, *args, "--store", url, timeout=60)
            assert result.code in (2, 3), result.describe()
            assert len(result.stderr.strip().splitlines()) == 1, result.describe()
            said = result.stderr.lower()
            assert "readonly" in said or "read-only" in said, result.describe()


@pytest.mark.parametrize("kind", ["directory", "under-a-file"])
def test_a_sqlite_path_that_cannot_be_a_file_is_one_line(home: Path, kind: str) -> None:
    """A directory given as the SQLite file, or a path under a file: exit 2, one line."""
    (home / "plain").write_text("x")
    path = home if kind == "directory" else home / "plain" / "relay.db"
    for args in (["status"], ["migrate"], ["import", "--to", sqlite_url(home / "t.db"), "--from"]):
        result = expect(
            cli(
                home,
                *args,
                *([] if "--from" in args else ["--store"]),
                sqlite_url(path),
                timeout=30,
            ),
            2,
        )
        assert len(result.stderr.strip().splitlines()) == 1, result.describe()
