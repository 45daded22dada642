"""Fixtures: one fresh store per test on every backend (`backends.py` says which ones).

Postgres comes from `TALARIA_RELAY_TEST_POSTGRES_URL` (an admin URL, e.g.
`postgresql://postgres@127.0.0.1:5432/postgres`). A migrated template database is built once per
run and each test gets `CREATE DATABASE … TEMPLATE`: isolated, and locks behave as in production
(no rolled-back wrapper transaction). Without a reachable server the Postgres tests skip, except
under CI, where that is a failure.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from backends import ALL, MEMORY, params
from sqlalchemy import make_url

from relay.store import RelayStore, open_store, pkcs8
from relay.store.migrate import upgrade

PG_ENV = "TALARIA_RELAY_TEST_POSTGRES_URL"


def _asyncpg_dsn(url: str, database: str | None = None) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


async def _admin(url: str, *statements: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(url), timeout=5)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def pg_store_url(admin_url: str, database: str) -> str:
    return (
        make_url(admin_url)
        .set(drivername="postgresql+asyncpg", database=database)
        .render_as_string(hide_password=False)
    )


@pytest.fixture(autouse=True)
def _no_key_passphrase(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys are stored unencrypted unless a test sets a passphrase, whatever the shell has."""
    monkeypatch.delenv("TALARIA_RELAY_KEY_PASSPHRASE", raising=False)
    monkeypatch.delenv("TALARIA_RELAY_KEY_PASSPHRASE_FILE", raising=False)


@pytest.fixture
def fast_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cheap scrypt cost for keys sealed in this process (`test_keyring` checks the real one)."""
    monkeypatch.setattr(pkcs8, "SCRYPT_LOG_N", 10)


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """The admin URL of a reachable Postgres, or a skip (a failure under CI)."""
    url = os.environ.get(PG_ENV, "")
    reason = f"{PG_ENV} is not set"
    if url:
        shown = make_url(url).render_as_string(hide_password=True)
        try:
            asyncio.run(_admin(url, "SELECT 1"))
        except Exception as exc:  # any failure to connect means unreachable
            reason = f"Postgres at {shown} is unreachable: {exc}"
        else:
            return url
    if os.environ.get("CI"):
        pytest.fail(f"CI requires Postgres: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_template(pg_admin_url: str) -> Iterator[str]:
    """A migrated template database, dropped at the end of the run."""
    name = f"relay_tmpl_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(pg_admin_url, f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(upgrade(pg_store_url(pg_admin_url, name)))
        yield name
    finally:
        asyncio.run(_admin(pg_admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def pg_database(pg_admin_url: str) -> Iterator[str]:
    """A fresh, empty (unmigrated) database's URL."""
    name = f"relay_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(pg_admin_url, f'CREATE DATABASE "{name}"'))
    try:
        yield pg_store_url(pg_admin_url, name)
    finally:
        asyncio.run(_admin(pg_admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run a test that needs `backend` on those its closest `backends` marker names, else all."""
    if "backend" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("backends")
        metafunc.parametrize("backend", params(marker.args if marker else ALL), indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL of a fresh, migrated store of `backend` (each open of `memory://` is a new store)."""
    if backend == MEMORY:
        yield "memory://"
    elif backend == "json":
        yield f"json://{tmp_path / 'state'}"
    elif backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'relay.db'}"
    else:
        admin = request.getfixturevalue("pg_admin_url")
        template = request.getfixturevalue("pg_template")
        name = f"relay_t_{uuid.uuid4().hex[:12]}"
        asyncio.run(_admin(admin, f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
        try:
            yield pg_store_url(admin, name)
        finally:
            asyncio.run(_admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[RelayStore]:
    async with open_store(store_url) as opened:
        yield opened
