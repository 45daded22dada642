"""Django and the relay in one database, with real `manage.py` processes (forked: `forked.py`):
the site in tests/django_site with its `notes` app, whose second migration runs the relay's.
Django's `migrate` builds both, `makemigrations --check` is clean beside the relay's tables, the
management command finds the relay at head, and a relay migrated first changes none of that."""

from __future__ import annotations

import asyncio
from pathlib import Path

import forked
import pytest
from backends import on
from cli_support import child_env
from databases import behind_the_store, own_database
from sqlalchemy import text

from relay.store import resolve
from relay.store.migrations import HEAD, standing

pytestmark = on("sqlite", "postgres")


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> str:
    return own_database(request, tmp_path, backend)


def process(tmp: Path, url: str, module: str, *args: str) -> str:
    """`python -m MODULE ARGS` for the site on `url`, as a process of its own (forked from the
    fork server, `forked.py`: no interpreter start); its output (a nonzero exit fails the test)."""
    env = child_env(
        tmp / "state",
        DJANGO_SETTINGS_MODULE="django_site.settings",
        DJANGO_SITE_DATABASE_URL=url,
    )
    done = asyncio.run(forked.run(module, *args, module=True, env=env, cwd=tmp, within_s=120))
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def django(tmp: Path, url: str, *args: str) -> str:
    """`django-admin ARGS` for the site on `url`."""
    return process(tmp, url, "django", *args)


def test_django_migrate_runs_the_relays_migrations(database: str, tmp_path: Path) -> None:
    """`manage.py migrate` builds the app's table and, from its migration, the relay's schema;
    `makemigrations --check` is clean; `relay_migrate` finds the relay at head; Django's own
    rows and the relay's live side by side."""
    django(tmp_path, database, "migrate", "--no-input")
    assert asyncio.run(standing(resolve(database))).at_head
    assert "No changes detected" in django(
        tmp_path, database, "makemigrations", "--check", "--dry-run"
    )
    assert "relay: at head" in django(tmp_path, database, "relay_migrate")
    (rows,) = asyncio.run(behind_the_store(database, text("SELECT count(*) FROM notes_note")))
    assert rows == [(0,)]


def test_relay_first_then_django(database: str, tmp_path: Path) -> None:
    """The relay migrated first (its CLI step): Django's `migrate` and `makemigrations --check`
    pass on the database holding it, and the relay stays at head."""
    assert f"at head {HEAD}" in process(tmp_path, database, "relay", "migrate", "--store", database)
    django(tmp_path, database, "migrate", "--no-input")
    assert "No changes detected" in django(
        tmp_path, database, "makemigrations", "--check", "--dry-run"
    )
    assert asyncio.run(standing(resolve(database))).at_head
