"""The Postgres runner: asyncpg connections in a pool; statements prepared once per connection.

A body of one statement runs in autocommit: one round trip, no BEGIN/COMMIT. A transaction opens
with its timeouts in the same round trip as its BEGIN (`SET LOCAL`, see `budget`). A
batch of straight-line steps is one call of the `relay_batch` function, one round trip in all
(`pgbatch`), or, where the database has no such function, a transaction like any other. A
task cancelled mid-transaction leaves the server holding its row locks until the connection ends,
so such a connection is terminated, never handed back to the pool (sqlalchemy/sqlalchemy#12099 is
the same trap); so is one whose server turned read-only or is going away (`sqlstate`),
and then every other connection of the pool too. Nothing here needs session state, so
transaction-mode PgBouncer works with `?prepared_statement_cache_size=0`, and a connection goes
back to the pool as it is (`pgpool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import math
import os
import shlex
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg
from sqlalchemy import URL

from relay.errors import InvalidInputError, StoreError
from relay.hints import command
from relay.store.budget import PARAMETERS as BUDGET_PARAMETERS
from relay.store.budget import Budget, budget
from relay.store.hosts import dsn
from relay.store.sql.dialect import POSTGRES, Compiled, Row
from relay.store.sql.drivers import pgbatch, sqlstate
from relay.store.sql.drivers.deadlines import Deadlines
from relay.store.sql.drivers.pgpool import Pool
from relay.store.sql.drivers.runner import NO_PARAMS, Body, Stats, Step, Tx, run_steps

T = TypeVar("T")
logger = logging.getLogger("relay.store")
CONNECT_TIMEOUT_S = 10.0
# What a connection that broke while in use raises: the server's goodbye (class 08), or
# asyncpg's own complaints about a connection that is gone.
_LOST = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
)
_DRIVER_ERRORS = (asyncpg.PostgresError, *_LOST)
# A transaction's client-side deadline lies past its server-side statement_timeout, so the
# server's own answer (57014) comes first; the client's ends a wait on a server that is silent.
_CLIENT_MARGIN_S = 5.0


@dataclass(slots=True)
class PostgresTx:
    """Statements on one connection, each bounded by `timeout` seconds from the client (asyncpg
    then cancels it on the server); None: the caller bounds them (`Deadlines`)."""

    conn: Any
    stats: Stats
    timeout: float | None

    async def rows(self, q: Compiled, params: Mapping[str, Any] = NO_PARAMS) -> list[Row]:
        self.stats.statements += 1
        return await self.conn.fetch(  # type: ignore[no-any-return]
            q.sql, *q.args(params), timeout=self.timeout
        )

    async def run(self, q: Compiled, params: Mapping[str, Any] = NO_PARAMS) -> int:
        self.stats.statements += 1
        status: str = await self.conn.execute(q.sql, *q.args(params), timeout=self.timeout)
        count = status.rpartition(" ")[2]
        return int(count) if count.isdigit() else 0

    async def many(self, q: Compiled, rows: Sequence[Mapping[str, Any]]) -> None:
        self.stats.statements += 1
        await self.conn.executemany(q.sql, [q.args(row) for row in rows], timeout=self.timeout)


def keepalive(wait_s: float) -> list[tuple[int, int, int]]:
    """The (level, option, value) triples of TCP keepalive and a user timeout, those this
    platform has: a silent network is an error.

    A connection whose packets are dropped (a firewall change, a NAT or load balancer that forgot
    it, a partition) closes nothing: without keepalive an idle connection looks usable for hours
    and a statement sent on it waits for ever. asyncpg sets neither option and takes no libpq
    `keepalives*` parameters, so they are set on its socket once it connects: keepalive probes
    find an idle connection dead, and `TCP_USER_TIMEOUT` (Linux) ends one whose sent data goes
    unacked, each within about `wait_s` (the store's bounded wait).
    """
    # Probes after the connection has been idle a third of the wait, then every sixth: the third
    # unanswered probe ends it, so a dead idle connection is found within about the wait.
    idle = max(1, math.floor(wait_s / 3))
    interval = max(1, math.floor(wait_s / 6))
    wanted = [
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", idle),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", interval),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", 3),
        (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", max(1000, math.floor(wait_s * 1000))),
    ]
    return [
        (level, getattr(socket, name), value)
        for level, name, value in wanted
        if hasattr(socket, name)
    ]


def connect_options(url: URL) -> dict[str, Any]:
    """asyncpg's arguments for a store URL; libpq parameters it knows pass through its DSN."""
    skipped = (*BUDGET_PARAMETERS, "host", "port")  # the hosts go in the DSN's netloc
    query = {k: str(v) for k, v in url.query.items() if k not in skipped}
    options: dict[str, Any] = {}
    try:
        options["timeout"] = float(str(query.pop("connect_timeout", CONNECT_TIMEOUT_S)))
    except ValueError:
        raise InvalidInputError("connect_timeout must be a number of seconds") from None
    if not 0 < options["timeout"] < 3600:
        raise InvalidInputError("connect_timeout must be between 0 and 3600 seconds")
    if "prepared_statement_cache_size" in query:
        size = str(query.pop("prepared_statement_cache_size"))
        if not size.isdigit():
            raise InvalidInputError("prepared_statement_cache_size must be a whole number")
        options["statement_cache_size"] = int(size)
    if "ssl" in query:
        query["sslmode"] = query.pop("ssl")
    if "application_name" not in query:
        options["server_settings"] = {"application_name": "talaria-relay"}
    options["dsn"] = dsn(url, query)
    return options


def _identifier(name: str) -> str:
    """`name` as a quoted SQL identifier, for a hint's statement to paste."""
    return '"' + name.replace('"', '""') + '"'


class PostgresRunner:
    """Runs bodies on a pool; `await PostgresRunner.open(url, display, schema=…)`."""

    dialect = POSTGRES

    def __init__(self, url: URL, display: str, schema: str | None) -> None:
        self.stats = Stats()
        self._display = display
        self._password = url.password if isinstance(url.password, str) else None
        # Whom and where the server sees (the URL's, else libpq's defaults) and the relay's
        # schema: what the hints name.
        self._role = url.username or os.environ.get("PGUSER") or getpass.getuser()
        self._database = url.database or self._role
        self._schema = schema
        self.pool: Pool | None = None  # from `open` until `close`
        # Whether batches go to `relay_batch` (one round trip): until a call says the function is
        # missing or not ours to run; then, for this runner's life, they are transactions.
        self.batch_calls = True
        # The longest wait for the server (`bound_waits`): to connect, and how soon keepalive
        # and TCP_USER_TIMEOUT find a silent connection dead (`keepalive`).
        self._wait_s = CONNECT_TIMEOUT_S
        self._margin_s = _CLIENT_MARGIN_S
        self._set_budget(budget({k: str(v) for k, v in url.query.items()}))

    def _set_budget(self, limits: Budget) -> None:
        self.budget = limits
        self._begin = limits.set_local()
        self._batch_settings = limits.batch_settings()
        self._deadlines = Deadlines(limits.statement_timeout)
        self._wait_s = min(self._wait_s, limits.statement_timeout)

    @classmethod
    async def open(cls, url: URL, display: str, *, schema: str | None = None) -> PostgresRunner:
        """A runner on the store at `url` (`display`: as messages show it; `schema`: the
        Postgres schema the URL puts the relay in, None for the server's default)."""
        runner = cls(url, display, schema)
        limits, options = runner.budget, connect_options(url)
        try:
            # No floor of idle connections to restore: passes connect on demand, so a database
            # outage costs a failed call, not a task logging tracebacks every few seconds.
            runner.pool = await Pool.open(
                lambda: runner._connect(options),
                limits.pool_size,
                max_idle_s=limits.pool_max_idle,
                max_lifetime_s=limits.pool_max_lifetime,
            )
        except Exception as error:
            raise runner.translated(error) from error
        return runner

    async def _connect(self, options: dict[str, Any]) -> Any:
        """A new connection, within the bounded wait, with `keepalive` on its socket if TCP (a
        Unix socket has neither and needs none)."""
        conn = await asyncpg.connect(**options | {"timeout": min(options["timeout"], self._wait_s)})
        transport = getattr(conn, "_transport", None)  # asyncpg keeps its transport there
        sock = None if transport is None else transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            for level, option, value in keepalive(self._wait_s):
                # A platform that refuses one option keeps the others.
                with contextlib.suppress(OSError):
                    sock.setsockopt(level, option, value)
        return conn

    def bound_waits(self, seconds: float) -> None:
        """Wait `seconds` at most for the server (to connect, for a statement, a lock, a silent
        connection), never longer than the URL says: a silent network fails a call within it."""
        self._set_budget(self.budget.bounded(seconds))
        self._wait_s = min(self._wait_s, seconds)
        self._margin_s = min(self._margin_s, seconds / 4)
        if self.pool is not None:
            self.pool.discard_all()  # those made before: their keepalive was the URL's

    async def read(self, body: Body[T]) -> T:
        return await self._run(body, transaction=False)

    async def batch(self, steps: Sequence[Step]) -> list[Row]:
        params = pgbatch.call_params(steps, self._batch_settings) if self.batch_calls else None
        if params is not None:

            async def call(tx: Tx) -> list[Row]:
                # Counted as the statements it runs, as a transaction of them would be.
                self.stats.statements += len(steps) - 1
                return pgbatch.decoded(await tx.rows(pgbatch.CALL, params))

            self.stats.writes += 1
            try:
                return await self._run(call, transaction=False)
            except StoreError as error:
                if not pgbatch.unusable(error.__cause__):
                    raise
                # Nothing ran: the call was refused before its first step.
                if self.batch_calls:  # said once, by whichever call found it first
                    self.batch_calls = False
                    logger.warning(
                        "%s; until a restart its write batches run statement by statement "
                        "(run %s, and what %s prints)",
                        error,
                        command("migrate", self._display),
                        self._grants(),
                    )
        return await self.write(lambda tx: run_steps(tx, steps))

    async def write(self, body: Body[T], *, single: bool = False, durable: bool = True) -> T:
        # Every commit is durable here: asynchronous commit would need a SET LOCAL, and with it
        # a transaction, which costs a single statement round trips.
        self.stats.writes += 1
        return await self._run(body, transaction=not single)

    async def _run(self, body: Body[T], *, transaction: bool) -> T:
        # The pool this call draws from, to the end: `close` drops `self.pool` at once, and
        # the pool terminates the connections in use as they come back.
        pool = self.pool
        if pool is None:
            raise StoreError(f"the store {self._display} is closed")
        try:
            conn = await pool.acquire()
        except Exception as error:
            raise self.translated(error) from error
        self.stats.transactions += 1
        timeout = self.budget.statement_timeout
        try:
            if transaction:
                # BEGIN and the SET LOCALs in one round trip (a simple query of three).
                await conn.execute(self._begin, timeout=timeout)
                tx = PostgresTx(conn, self.stats, timeout + self._margin_s)
                try:
                    result = await body(tx)
                except Exception:
                    if not conn.is_closed() and conn.is_in_transaction():
                        await conn.execute("ROLLBACK", timeout=timeout)
                    raise
                await conn.execute("COMMIT", timeout=timeout)
            else:
                result = await self._autocommit(body, conn)
        except BaseException as error:
            # A statement past its timeout: asyncpg asks the server to cancel it, over a
            # connection of its own. Terminating this one would strand that statement on the
            # server, still waiting for its lock, to run later; kept, the connection waits
            # for the cancel before its next statement. Mid-transaction it goes all the same.
            timed_out = isinstance(error, TimeoutError)
            driver = isinstance(error, _DRIVER_ERRORS) and not timed_out
            lost = driver and isinstance(error, _LOST)
            state = _state(error)
            # A server read-only, leaving or gone is so behind every connection (a restart ends
            # them all): new ones (with a multi-host URL, to the new primary) avoid it.
            drop = lost or bool(state and sqlstate.drops_connection(state))
            # One that may hold our locks (cancelled mid-statement, or broken) never goes back;
            # a failed autocommit statement, or a body raising after its rollback, leaves it clean.
            dirty = not isinstance(error, Exception) or (
                driver and not isinstance(error, asyncpg.PostgresError)
            )
            with contextlib.suppress(asyncpg.InterfaceError):  # the server closed it under us
                if drop or dirty or conn.is_in_transaction():
                    conn.terminate()
            if drop:
                pool.discard_all()
            if driver or timed_out:
                raise self.translated(error, lost=lost) from error
            raise
        finally:
            pool.release(conn)
        return result

    async def _autocommit(self, body: Body[T], conn: Any) -> T:
        """`body` on `conn` in autocommit, bounded by `statement_timeout` (`deadlines`): past it,
        a TimeoutError, as asyncpg's own `timeout=` would raise, without its timer per call."""
        token = self._deadlines.start()
        try:
            return await body(PostgresTx(conn, self.stats, None))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not self._deadlines.expired(token) or task is None or task.uncancel():
                raise  # cancelled by someone else (too)
            raise TimeoutError from None
        finally:
            self._deadlines.end(token)

    def translated(self, error: BaseException, *, lost: bool = False) -> StoreError:
        """A driver's exception as a `StoreError` naming the store, never its password; `lost`
        says the connection broke while in use (asyncpg's own words rarely say so)."""
        error = _first(error)
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        state = _state(error)
        if isinstance(error, TimeoutError):
            text = f"no answer within statement_timeout ({self.budget.statement_timeout:g}s)"
        else:
            text = sqlstate.explained(error, state, text)
        if "unsupported startup parameter: options" in text:
            text += self._pooled_schema()
        if state == "42501":
            text += (
                f" (migrate as the owner role; to run as {self._role}, have the owner run what"
                f" {self._grants()} prints)"
            )
        if lost:
            text = f"the connection was lost ({text})"
        if self._password:
            text = text.replace(self._password, "***")
        failed = isinstance(error, asyncpg.PostgresError) and not sqlstate.unavailable(state)
        return sqlstate.store_error(self._display, text, failed=failed)

    def _pooled_schema(self) -> str:
        """How a schema reaches the relay through PgBouncer, which refuses startup `options`."""
        if self._schema is None:
            return " (a pooler such as PgBouncer takes no `options`: leave them out of the URL)"
        role, database = (_identifier(name) for name in (self._role, self._database))
        return (
            " (a pooler such as PgBouncer takes no `options`, which the URL's schema sends: have"
            f" the owner run `ALTER ROLE {role} IN DATABASE {database} SET search_path ="
            f" {self._schema}` and leave the schema out of this URL)"
        )

    def _grants(self) -> str:
        # `grants` connects to nothing: the store's password, hidden or not, has no place in it.
        return command(f"grants {shlex.quote(self._role)}", self._display.replace(":***@", "@"))

    async def close(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            await pool.close()


def _first(error: BaseException) -> BaseException:
    """Leaving a transaction on a dead connection raises an InterfaceError of its own over the
    error that killed the connection: that first error says what happened."""
    while isinstance(error, asyncpg.InterfaceError) and isinstance(
        error.__context__, _DRIVER_ERRORS
    ):
        error = error.__context__
    return error


def _state(error: BaseException) -> str:
    return str(getattr(_first(error), "sqlstate", "") or "")
