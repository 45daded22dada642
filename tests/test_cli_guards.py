"""The command never does the wrong thing quietly: each mistake is one clear line and an exit code.

Acceptance tests in subprocesses, like tests/test_cli.py, whose helpers they share.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from cli_support import ROOT
from test_cli import cli, expect, home, json_url, sqlite_url

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
