"""Fixtures: one fresh store per test on every backend (`backends.py` says which ones).

The tests sit in one folder a layer, each with its marker (`LAYERS`): `pytest -m unit` or
`pytest tests/unit` is the inner loop; the shared helper modules stay here, at the root.

A fresh store is cheap to hand out: SQLite is a copy of a file migrated once per session (per
xdist worker); Postgres comes from `TALARIA_RELAY_TEST_POSTGRES_URL` (an admin URL, e.g.
`postgresql://postgres@127.0.0.1:5432/postgres`): a migrated template database is built once per
session and each test gets a database of its own copied from it (`CREATE DATABASE … TEMPLATE`),
emptied with `TRUNCATE` and handed to a later test unless the test changed its shape
(`databases.PgClones`): isolated, and locks behave as in production (no rolled-back wrapper
transaction). Without a reachable server the Postgres tests skip, except under CI, where that is
a failure.

Property tests (Hypothesis) run the `ci` profile: few examples, so the suite stays minutes long.
`HYPOTHESIS_PROFILE=long` (or `--hypothesis-profile=long`) runs many more, for a soak.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from backends import ALL, MEMORY, params
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from databases import FreshStores, PgClones, admin_execute, pg_store_url
from hypothesis import HealthCheck, settings
from secrets_support import SecretWatch
from sqlalchemy import make_url

from relay.store import RelayStore, open_store, resolve
from relay.store.keys import pkcs8
from relay.store.sql.migrate import upgrade

PG_ENV = "TALARIA_RELAY_TEST_POSTGRES_URL"
TESTS = Path(__file__).resolve().parent
# A test file's folder is its layer, and its layer its marker (registered in pyproject.toml).
LAYERS = ("unit", "store", "publisher", "acceptance")
FIRST = {
    "test_crash.py",
    "test_concurrency.py",
    "test_bench.py",
    "test_replica_processes.py",
    "test_store_machine.py",
    "test_secrets.py",
    "test_pass_cost.py",
    "test_migrations.py",
    "test_mixed_fleet.py",
    "test_future_migrations.py",
}


# First: xdist's own hook reads the `xdist_group` marks this adds (naming the test `…@pgdeploy`).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's layer; a test file outside the layer folders is an error."""
    for item in items:
        try:
            layer = item.path.resolve().relative_to(TESTS).parts[0]
        except ValueError:  # not under tests/ (a path given on the command line)
            continue
        if layer not in LAYERS:
            raise pytest.UsageError(
                f"{item.path.relative_to(TESTS.parent)} is outside the layer folders: move it into"
                f" one of tests/{{{','.join(LAYERS)}}} (see docs/developing.md)"
            )
        item.add_marker(layer)
        # Postgres as deployed: the clusters, PgBouncers and CA are a worker's session fixtures,
        # so their tests go to one worker, which makes them once (`--dist loadgroup`).
        if "pgdeploy" in getattr(getattr(item, "module", None), "pytest_plugins", ()):
            item.add_marker(pytest.mark.xdist_group("pgdeploy"))
    # The files whose tests take up to a minute (child processes killed, spawned, or many runs) go
    # first: xdist's `loadgroup` handing a worker a test or two at a time, they start at once on
    # separate workers instead of one starting last and holding up the end of the run.
    items.sort(key=lambda item: item.path.name not in FIRST)


# No deadline: an example that opens a store or a database takes as long as the machine lets it,
# and a shared CI machine makes timings noise. `print_blob` lets a failure be replayed exactly.
settings.register_profile(
    "ci",
    max_examples=50,
    stateful_step_count=20,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long", parent=settings.get_profile("ci"), max_examples=1000, stateful_step_count=50
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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
            asyncio.run(admin_execute(url, "SELECT 1"))
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
    asyncio.run(admin_execute(pg_admin_url, f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(upgrade(resolve(pg_store_url(pg_admin_url, name))))
        yield name
    finally:
        asyncio.run(admin_execute(pg_admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def pg_clones(pg_admin_url: str, pg_template: str) -> Iterator[PgClones]:
    """Migrated databases for `store_url`, reused across the session's tests (`PgClones`)."""
    clones = PgClones(pg_admin_url, pg_template)
    yield clones
    clones.close()


@pytest.fixture(scope="session")
def sqlite_seed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per session; a test's store is a copy of it."""
    seed = tmp_path_factory.mktemp("sqlite-seed") / "relay.db"
    asyncio.run(upgrade(resolve(f"sqlite:///{seed}")))
    return seed


@pytest.fixture
def pg_database(pg_admin_url: str) -> Iterator[str]:
    """A fresh, empty (unmigrated) database's URL."""
    name = f"relay_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(admin_execute(pg_admin_url, f'CREATE DATABASE "{name}"'))
    try:
        yield pg_store_url(pg_admin_url, name)
    finally:
        asyncio.run(admin_execute(pg_admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


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
    """A URL of a fresh, migrated store of `backend` (each open of `memory://` is a new store).

    SQLite: `tmp_path/relay.db`, a copy of the session's migrated seed. Postgres: a database no
    other test is using, empty and at head; the test may change it in any way (`PgClones`).
    """
    if backend == MEMORY:
        yield "memory://"
    elif backend == "json":
        yield f"json://{tmp_path / 'state'}"
    elif backend == "sqlite":
        path = tmp_path / "relay.db"
        shutil.copyfile(request.getfixturevalue("sqlite_seed"), path)
        yield f"sqlite:///{path}"
    else:
        clones: PgClones = request.getfixturevalue("pg_clones")
        url = clones.take()
        try:
            yield url
        finally:
            clones.give_back(url)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[RelayStore]:
    async with open_store(store_url) as opened:
        yield opened


@pytest.fixture
def fresh_stores(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[FreshStores]:
    """Fresh stores of `backend`, as many as the test asks for, one at a time."""
    admin = template = None
    if backend == "postgres":
        admin = request.getfixturevalue("pg_admin_url")
        template = request.getfixturevalue("pg_template")
    stores = FreshStores(backend, tmp_path, admin, template)
    yield stores
    stores.close()


@pytest.fixture
def no_secret_leaks(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SecretWatch]:
    """Fails the test if a secret it made reached a log record, a reported line or an error.

    Every logger records at DEBUG; the watch learns the keys, invitations and signatures as they
    are made (a test adds the secrets it knows besides) and keeps the library's lines and error
    messages. The check runs after the test, over all of them.
    """
    watch = SecretWatch()
    watch.install(monkeypatch)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="relay")
    yield watch
    # `caplog.records` would be this teardown's alone: the setup's and the test's are asked for.
    records = [*caplog.get_records("setup"), *caplog.get_records("call")]
    # Formatted, a record carries its traceback too.
    watch.assert_clean(*map(caplog.handler.format, records), where="log records")
    watch.assert_clean(*watch.lines, where="reported lines and error messages")


@pytest.fixture
def signing_key(no_secret_leaks: SecretWatch) -> Ed25519PrivateKey:
    """A key a test signs with itself, outside pairing; the secret watch knows it too."""
    key = Ed25519PrivateKey.generate()
    no_secret_leaks.add_key(key)
    return key
