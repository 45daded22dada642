"""A Postgres server that cannot take the store's work now: read-only, holding a lock too long,
refusing a login. Each is "unavailable" (a backoff, exit 3), never "failed", and a connection
to a read-only server is dropped so the pool reconnects once the server takes writes again.

The read-only server is the test database with `default_transaction_read_only` set: the setting
reaches new connections only, which is what a pool that reconnects sees after a failover.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from backends import on
from cli_support import run
from databases import set_read_only
from sql_support import sql_backend
from sqlalchemy import func, make_url, select

from relay.errors import StoreError, StoreUnavailableError
from relay.store import RelayStore, open_store
from relay.store.sql.dialect import POSTGRES
from relay.store.sql.drivers.postgres import PostgresRunner

pytestmark = on("postgres")
NOW = 1_800_000_000_000


def with_params(url: str, **params: object) -> str:
    query = "&".join(f"{name}={value}" for name, value in params.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


def runner(store: RelayStore) -> PostgresRunner:
    found = sql_backend(store).runner
    assert isinstance(found, PostgresRunner)
    return found


async def backends(url: str) -> int:
    """The store's sessions on its database (the admin connection asking is not one)."""
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'talaria-relay'"
        )
        return count
    finally:
        await conn.close()


async def eventually_backends(url: str, count: int) -> int:
    """Poll until the store holds `count` sessions (or 10 s pass); the last count seen."""
    seen = -1
    for _ in range(200):
        seen = await backends(url)
        if seen == count:
            break
        await asyncio.sleep(0.05)
    return seen


@pytest.fixture
async def read_only_url(store_url: str) -> AsyncIterator[str]:
    """The store's database, read-only for new connections until the test ends."""
    await set_read_only(store_url, True)
    try:
        yield store_url
    finally:
        await set_read_only(store_url, False)


async def test_a_read_only_server_is_unavailable_and_its_connections_go(
    read_only_url: str,
) -> None:
    """Writes to a read-only server raise StoreUnavailableError naming it read-only; the pool
    keeps none of its connections, and once the server takes writes the store writes again."""
    async with open_store(read_only_url) as store:
        assert await store.revision_floor() == 0  # reads work on a read-only server
        # Two connections in the pool, both to the read-only server.
        await asyncio.gather(store.revision_floor(), store.identities())
        pool = runner(store).pool
        assert pool is not None
        with pytest.raises(StoreUnavailableError) as caught:
            await store.allocate_revisions(1, NOW)
        assert "read-only" in str(caught.value)
        assert pool.idle == 0
        assert await eventually_backends(read_only_url, 0) == 0
        with pytest.raises(StoreUnavailableError):
            await store.profile_identity("default")  # a write transaction too
        await set_read_only(read_only_url, False)
        (allocated,) = await store.allocate_revisions(1, NOW)
        assert await store.revision_floor() == allocated


async def test_check_says_a_read_only_server_is_not_ready(
    read_only_url: str, tmp_path: Any
) -> None:
    """`talaria-relay check` on a read-only server: exit 1, one line saying it is read-only."""
    home = tmp_path / "xdg"
    home.mkdir()
    result = run(home, "check", "--store", read_only_url, timeout=60)
    assert result.code == 1, result.describe()
    (line,) = result.stdout.strip().splitlines()
    assert "not ready" in line
    assert "read-only" in line
    await set_read_only(read_only_url, False)
    result = run(home, "check", "--store", read_only_url, timeout=60)
    assert "read-only" not in result.stdout, result.describe()


@pytest.fixture
async def blocker(store_url: str) -> AsyncIterator[Any]:
    """A connection of its own to the store's database, to hold locks."""
    dsn = make_url(store_url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def test_a_lock_held_too_long_ends_the_write_as_unavailable_within_lock_timeout(
    store_url: str, blocker: Any
) -> None:
    """A write transaction waiting on a row another session holds ends after `lock_timeout`
    (not `statement_timeout`) as StoreUnavailableError, and leaves no session waiting."""
    url = with_params(store_url, lock_timeout=0.5, statement_timeout=60)
    async with open_store(url) as store:
        holding = blocker.transaction()
        await holding.start()
        await blocker.execute(
            "INSERT INTO relay_identities (profile, identity) VALUES ('default', 'pfi_held')"
        )
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError) as caught:
            await store.profile_identity("default")
        waited = time.monotonic() - started
        await holding.rollback()
        assert "lock_timeout" in str(caught.value)
        assert 0.5 <= waited < 30, waited
        assert (await store.profile_identity("default")).startswith("pfi_")


async def test_a_single_statement_waiting_on_a_lock_ends_within_statement_timeout(
    store_url: str, blocker: Any
) -> None:
    """A one-statement write (autocommit) waiting on a held row is cancelled on the server after
    `statement_timeout`, as StoreUnavailableError; the revision counter is unharmed."""
    url = with_params(store_url, statement_timeout=0.5)
    async with open_store(url) as store:
        (first,) = await store.allocate_revisions(1, NOW)
        holding = blocker.transaction()
        await holding.start()
        await blocker.execute("SELECT floor FROM relay_revision WHERE id = 1 FOR UPDATE")
        with pytest.raises(StoreUnavailableError) as caught:
            await store.allocate_revisions(1, NOW)
        assert "statement_timeout" in str(caught.value)
        for _ in range(200):  # the cancel request travels on a connection of its own
            waiting = await blocker.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            )
            if waiting == 0:
                break
            await asyncio.sleep(0.05)
        await holding.rollback()
        assert waiting == 0, "the server ended the cancelled statement's wait"
        assert await store.allocate_revisions(1, NOW) == [first + 1]


async def test_the_timeouts_are_per_transaction_and_leave_no_session_setting(
    store_url: str,
) -> None:
    """A transaction runs under the URL's timeouts (SET LOCAL); the session keeps the server's
    defaults, so a PgBouncer server connection carries nothing to its next client."""
    url = with_params(store_url, statement_timeout=7, lock_timeout=3, pool_size=1)
    async with open_store(url) as store:
        db = runner(store)
        seen: list[Any] = []

        async def body(tx: Any) -> None:
            seen.append(await tx.rows(SHOW_TIMEOUTS))

        await db.write(body)
        await db.read(body)
        assert [list(rows[0]) for rows in seen] == [["7s", "3s"], ["0", "0"]]


SHOW_TIMEOUTS = POSTGRES.compile(
    select(func.current_setting("statement_timeout"), func.current_setting("lock_timeout"))
)


async def test_pool_size_bounds_the_connections_a_store_opens(store_url: str) -> None:
    """With `pool_size=2`, twenty concurrent calls share two server connections."""
    url = with_params(store_url, pool_size=2)
    async with open_store(url) as store:
        await asyncio.gather(*(store.revision_floor() for _ in range(20)))
        assert await backends(store_url) == 2


async def test_a_refused_login_is_unavailable_naming_the_cause(store_url: str) -> None:
    """A role the server does not know (SQLSTATE 28000) is "unavailable", not "failed", and
    says the server refused the login."""
    url = make_url(store_url).set(username="relay_no_such_role").render_as_string(False)
    with pytest.raises(StoreUnavailableError) as caught:
        await open_store(url)
    assert "refused the login" in str(caught.value)
    assert isinstance(caught.value, StoreError)


@pytest.mark.parametrize("command", [["migrate"], ["migrate", "--check"], ["status"], ["check"]])
def test_a_refused_login_exits_3_in_one_line(
    store_url: str, tmp_path: Any, command: list[str]
) -> None:
    """Every command meeting a refused login (SQLSTATE 28000) exits 3, "cannot be reached",
    with one line naming the cause, as a TLS failure does."""
    home = tmp_path / "xdg"
    home.mkdir()
    url = make_url(store_url).set(username="relay_no_such_role").render_as_string(False)
    result = run(home, *command, "--store", url, timeout=60)
    assert result.code == 3, result.describe()
    (line,) = (result.stderr + result.stdout).strip().splitlines()
    assert "refused the login" in line
