"""A store's waits bounded to a share of the lease, and keepalive on each connection (issue 33):
a silent network fails a call within the bound, never after the URL's 30 s statement_timeout."""

from __future__ import annotations

import socket
import time

import pytest
from backends import on
from blackhole import Blackhole
from sqlalchemy import make_url

from relay.errors import InvalidInputError, StoreUnavailableError
from relay.store import open_store
from relay.store.budget import Budget
from relay.store.sql.drivers.postgres import PostgresRunner, keepalive


def test_a_bound_shortens_waits_and_never_lengthens_them() -> None:
    """`Budget.bounded` takes the shorter of each wait and the bound."""
    bounded = Budget(statement_timeout=30.0, lock_timeout=0.5).bounded(4.0)
    assert (bounded.statement_timeout, bounded.lock_timeout) == (4.0, 0.5)
    assert "statement_timeout = 4000" in bounded.set_local()


def test_keepalive_finds_a_silent_connection_within_about_the_wait() -> None:
    """Idle a third of the wait, probes every sixth, three of them, and unacked data given up
    after the wait: on Linux, every option is there."""
    found = {(level, option): value for level, option, value in keepalive(6.0)}
    assert found[socket.SOL_SOCKET, socket.SO_KEEPALIVE] == 1
    idle = found[socket.IPPROTO_TCP, socket.TCP_KEEPIDLE]
    interval = found[socket.IPPROTO_TCP, socket.TCP_KEEPINTVL]
    probes = found[socket.IPPROTO_TCP, socket.TCP_KEEPCNT]
    assert (idle, interval, probes) == (2, 1, 3)
    assert idle + interval * probes <= 6
    assert found[socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT] == 6000


async def test_bound_waits_refuses_what_is_not_a_positive_number() -> None:
    """A bound of zero, a negative one or a flag is bad input naming the fix."""
    async with open_store("memory://") as store:
        for bad in (0, -1.0, True):
            with pytest.raises(InvalidInputError, match="positive number"):
                store.bound_waits(bad)
        store.bound_waits(1.5)  # nothing to bound: no server


@on("postgres")
async def test_a_silent_network_fails_a_call_within_the_bound(store_url: str) -> None:
    """Through a blackhole: every connection has keepalive and a user timeout; once cut, a read
    fails as unavailable within 1.25 x the bound (not the URL's 30 s); healed, it answers."""
    url = make_url(store_url)
    async with Blackhole(url.host or "127.0.0.1", url.port or 5432) as hole:
        proxied = url.set(host="127.0.0.1", port=hole.port).render_as_string(hide_password=False)
        async with open_store(proxied) as store:
            store.bound_waits(0.5)
            runner = store.backend.runner  # type: ignore[attr-defined]
            assert isinstance(runner, PostgresRunner)
            assert runner.budget.statement_timeout == 0.5
            await store.revision_floor()
            assert runner.pool is not None
            conn = await runner.pool.acquire()
            try:
                sock = conn._transport.get_extra_info("socket")
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 1000
            finally:
                runner.pool.release(conn)
            hole.cut()
            began = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="no answer within"):
                await store.revision_floor()
            took = time.monotonic() - began
            print(f"a silent network failed a read after {took:.2f}s (bound 0.5s)")
            assert took <= 0.5 * 1.25 + 0.2
            hole.heal()
            await store.revision_floor()
