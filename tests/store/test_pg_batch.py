"""A Postgres write batch is one call of `relay_batch`: one round trip for any number of steps,
the same rows and the same errors as its statements run one by one in a transaction, and a
transaction of them all the same where the database has no such function (still at 0005)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any

import asyncpg
import pytest
from backends import on
from databases import set_read_only
from pg_batch_support import (
    ALLOCATE,
    BIG,
    INSERT_RUN,
    READ_BACK,
    RENEW,
    loop_rows,
    postgres_runner,
    run_row,
    ten_steps,
    typed,
)
from sqlalchemy import make_url

from benchmarks.proxy import latency_proxy
from relay.errors import StoreError, StoreUnavailableError
from relay.health import NOT_READY, probe
from relay.store import open_store, resolve
from relay.store.sql import migrate
from relay.store.sql.drivers import pgbatch
from relay.store.sql.drivers.postgres import PostgresRunner
from relay.store.sql.drivers.runner import Step, run_steps

pytestmark = on("postgres")


@pytest.fixture
async def db(store_url: str) -> AsyncIterator[PostgresRunner]:
    async with open_store(store_url) as store:
        yield postgres_runner(store)


async def test_a_batch_answers_what_its_statements_answer_one_by_one(db: PostgresRunner) -> None:
    """NULLs, booleans, bigints past 2^53 and up to 2^63-1, negative ones, empty strings, quotes,
    backslashes, unicode, parameter sets (one, several, none), steps without parameters, and a
    last step answering computed columns: the same values, types and column order as the
    statements give one by one, and the same rows left behind."""
    steps = ten_steps()
    assert pgbatch.call_params(steps, {}) is not None  # one call, not a loop
    expected = await loop_rows(db, steps)
    assert len(expected) == 3
    found = await db.batch(steps)
    assert db.batch_calls
    assert typed(found) == typed(expected)
    assert typed(await db.read(lambda tx: tx.rows(READ_BACK))) == typed(expected)
    # A last step answering RETURNING, and one answering nothing (a set of parameter sets).
    returning: list[Step] = [(ALLOCATE, {"floor": BIG})]
    assert typed(await db.batch(returning)) == [[(int, BIG), (bool, True), (bool, True)]]
    assert await db.batch([(RENEW, [{"owner": "web-1/abc"}])]) == []
    assert await db.batch([(RENEW, {"owner": "web-1/abc"})]) == []
    assert await db.batch([]) == []


async def test_a_ten_step_batch_costs_one_round_trip(store_url: str) -> None:
    """Behind a proxy counting round trips, on one connection (its own cost counted apart): a
    batch of ten steps is one round trip, two the first time (asyncpg prepares the call once per
    connection, and asks the server about no type); the same steps as a transaction cost eleven
    (BEGIN with its SET LOCALs, nine statements, COMMIT: a step of no parameter sets sends
    nothing), seventeen the first time (each statement prepared)."""
    address = make_url(store_url)
    async with latency_proxy(address.host or "127.0.0.1", address.port or 5432, 0) as (
        port,
        counts,
    ):

        async def round_trips(call: Awaitable[object]) -> int:
            before = counts.round_trips
            await call
            return counts.round_trips - before

        proxied = address.set(host="127.0.0.1", port=port).update_query_dict({"pool_size": "1"})
        async with open_store(proxied.render_as_string(hide_password=False)) as store:
            db = postgres_runner(store)
            assert counts.round_trips > 1  # connecting, and checking the schema's revision
            assert await round_trips(db.batch(ten_steps(0))) == 2
            stats = (db.stats.transactions, db.stats.writes, db.stats.statements)
            assert await round_trips(db.batch(ten_steps(10))) == 1
            after = (db.stats.transactions, db.stats.writes, db.stats.statements)
            assert [a - b for a, b in zip(after, stats, strict=True)] == [1, 1, 10]
            first, second = ten_steps(20), ten_steps(30)
            assert await round_trips(db.write(lambda tx: run_steps(tx, first))) == 17
            assert await round_trips(db.write(lambda tx: run_steps(tx, second))) == 11
            assert counts.connections == 1


async def test_a_failing_step_fails_the_batch_as_the_same_statement_would(
    db: PostgresRunner,
) -> None:
    """A unique violation in the sixth step: the same StoreError ("failed", not unavailable)
    as the statements one by one give, and nothing of the steps before it is kept."""
    steps = [*ten_steps()[:5], (INSERT_RUN, run_row(0)), *ten_steps()[5:]]
    with pytest.raises(StoreError) as one_by_one:
        await db.write(lambda tx: run_steps(tx, steps))
    with pytest.raises(StoreError) as batched:
        await db.batch(steps)
    assert not isinstance(batched.value, StoreUnavailableError)
    assert str(batched.value) == str(one_by_one.value)
    assert "duplicate key value" in str(batched.value)
    assert isinstance(batched.value.__cause__, asyncpg.UniqueViolationError)
    assert await db.read(lambda tx: tx.rows(READ_BACK)) == []
    assert db.batch_calls


@pytest.fixture
async def blocker(store_url: str) -> AsyncIterator[Any]:
    """A connection of its own to the store's database, holding a row of relay_runs locked."""
    dsn = make_url(store_url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    holding = conn.transaction()
    await holding.start()
    await conn.execute(
        "INSERT INTO relay_runs (session_id, title, phase, started_at, updated_at, owner,"
        " lease_until) VALUES ('s0', '', 'running', 0, 0, 'web-1/abc', 0)"
    )
    try:
        yield conn
    finally:
        await holding.rollback()
        await conn.close()


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"lock_timeout": "0.3", "statement_timeout": "60"}, "lock_timeout"),
        ({"lock_timeout": "60", "statement_timeout": "0.3"}, "statement_timeout"),
    ],
)
async def test_a_batch_waiting_on_a_lock_ends_within_its_timeout_as_unavailable(
    store_url: str, blocker: Any, params: Mapping[str, str], named: str
) -> None:
    """A batch waiting on a row another session holds ends after `lock_timeout` (set inside
    the call, for its transaction) or `statement_timeout` (the client cancels the call), as
    StoreUnavailableError naming which; no wait is left on the server, and it runs afterwards."""
    url = make_url(store_url).update_query_dict(dict(params)).render_as_string(False)
    async with open_store(url) as store:
        db = postgres_runner(store)
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError) as caught:
            await db.batch(ten_steps())
        assert 0.3 <= time.monotonic() - started < 30
        assert named in str(caught.value)
        for _ in range(200):  # a cancel travels on a connection of its own
            waiting = await blocker.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            )
            if waiting == 0:
                break
            await asyncio.sleep(0.05)
        assert waiting == 0
        assert db.batch_calls


async def test_a_read_only_server_fails_a_batch_as_unavailable_and_its_connections_go(
    store_url: str,
) -> None:
    """A batch on a read-only server: StoreUnavailableError naming it, no connection kept."""
    await set_read_only(store_url, True)
    try:
        async with open_store(store_url) as store:
            db = postgres_runner(store)
            with pytest.raises(StoreUnavailableError) as caught:
                await db.batch(ten_steps())
            assert "read-only" in str(caught.value)
            assert db.pool is not None
            assert db.pool.idle == 0
            assert db.batch_calls
    finally:
        await set_read_only(store_url, False)


async def test_a_store_at_0005_opens_and_runs_batches_as_transactions(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A database a deploy has yet to migrate (0005, no function): the store opens, its first
    batch finds the function missing (nothing ran), says so once, and every batch runs as a
    transaction of its steps with the same answer; `check` says the schema is below head."""
    await migrate.downgrade(resolve(store_url), "0005")
    assert (await probe(store_url)).code == NOT_READY
    async with open_store(store_url) as store:
        db = postgres_runner(store)
        with caplog.at_level(logging.WARNING, logger="relay.store"):
            expected = await loop_rows(db, ten_steps())
            assert typed(await db.batch(ten_steps())) == typed(expected)
            assert not db.batch_calls
            transactions = db.stats.transactions
            assert len(await db.batch(ten_steps(10))) == 6
            assert db.stats.transactions == transactions + 1
        (warning,) = [r for r in caplog.records if "relay_batch" in r.getMessage()]
        assert "statement by statement" in warning.getMessage()
    await migrate.upgrade(resolve(store_url))
    async with open_store(store_url) as store:
        db = postgres_runner(store)
        assert len(await db.batch(ten_steps(20))) == 9
        assert db.batch_calls
