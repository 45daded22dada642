"""What a steady publisher pass costs the store: one read, one write transaction and the release
of its sending marks, whatever the number of sessions or profiles (on SQLite one fsync, the release
committing without one; on Postgres three round trips, the write one `relay_batch` call).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from backends import on
from harness import PUBLISHER_ID, Env, relay_env
from sql_support import sql_backend

from benchmarks.proxy import latency_proxy
from relay.store import RelayStore, open_store, resolve
from relay.store.sql.backend import SqlBackend
from relay.store.sql.dialect import Compiled
from relay.store.sql.drivers.runner import Stats, Tx

sqlite = pytest.mark.sqlite


@pytest.fixture
async def sql_store(tmp_path: Path) -> AsyncIterator[SqlBackend]:
    async with open_store(f"sqlite:///{tmp_path / 'relay.db'}") as store:
        yield sql_backend(store)


def _spent(before: Stats, after: Stats) -> Stats:
    return Stats(
        after.transactions - before.transactions,
        after.statements - before.statements,
        after.writes - before.writes,
        after.unsynced - before.unsynced,
    )


@asynccontextmanager
async def _steady(store: RelayStore, profiles: int, sessions: int) -> AsyncIterator[Env]:
    """`profiles` paired profiles with `sessions` live sessions spread over them, announced and
    published: what is left for the next pass is a steady one."""
    names = ("default", *(f"p{n}" for n in range(1, profiles)))
    async with relay_env(store, profiles=names) as env:
        await env.pair(names[0])
        for name in names[1:]:
            await env.pair(name, user=f"usr_{name}")
        env.clock.advance(1)
        for n in range(sessions):
            env.host.create_session(f"s-{n}", names[n % profiles], f"Chat {n}")
            env.host.start_run(f"s-{n}")
        assert await env.publish() is None  # the first pass: the sightings announced
        assert await env.publish() is None  # every statement prepared, every pool warm
        yield env


async def _published_all(env: Env, sessions: int, snapshots: int) -> None:
    """The pass just run sent every profile's snapshot, with every session in it."""
    config = await env.config()
    assert len(env.accepted("snapshot")) - snapshots == len(config.profiles)
    rows = {
        row.session_id
        for grant in config.profiles.values()
        for row in env.relay.rows(PUBLISHER_ID, grant.profile_id)
    }
    assert rows == {f"s-{n}" for n in range(sessions)}


async def _steady_pass(store: RelayStore, profiles: int, sessions: int) -> Stats:
    """What a steady pass costs the store."""
    async with _steady(store, profiles, sessions) as env:
        stats = sql_backend(store).stats
        before, snapshots = replace(stats), len(env.accepted("snapshot"))
        assert await env.publish() is None
        spent = _spent(before, stats)
        await _published_all(env, sessions, snapshots)
        return spent
    raise AssertionError("unreachable")


@sqlite
@pytest.mark.parametrize("profiles", [3, 20])
@pytest.mark.parametrize("sessions", [20, 200])
async def test_a_steady_pass_is_one_read_one_write_and_one_release(
    tmp_path: Path, profiles: int, sessions: int
) -> None:
    """On SQLite a steady pass is three transactions, one of them fsync-bearing (its write): the
    release of its sending marks commits without an fsync, whatever P and S."""
    async with open_store(f"sqlite:///{tmp_path / 'relay.db'}") as store:
        spent = await _steady_pass(store, profiles, sessions)
    assert spent.transactions <= 3
    assert spent.writes <= 1
    assert spent.unsynced <= 1


@on("postgres")
async def test_a_steady_pass_on_postgres_is_three_transactions(store_url: str) -> None:
    """On Postgres a steady pass is three transactions (read, write, release) at P=20, S=200."""
    async with open_store(store_url) as store:
        spent = await _steady_pass(store, 20, 200)
    assert spent.transactions <= 3


@on("postgres")
async def test_a_steady_pass_on_postgres_is_three_round_trips(store_url: str) -> None:
    """Counted at a proxy in front of Postgres, a steady pass at P=20, S=200 is three round
    trips: the read, the write sent as one `relay_batch` call, the release."""
    address = resolve(store_url).sqlalchemy_url
    async with latency_proxy(address.host or "127.0.0.1", address.port or 5432, 0) as (
        port,
        counts,
    ):
        proxied = address.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
        async with open_store(proxied) as store, _steady(store, 20, 200) as env:
            before, snapshots = counts.round_trips, len(env.accepted("snapshot"))
            assert await env.publish() is None
            assert counts.round_trips - before <= 3
            await _published_all(env, 200, snapshots)


@sqlite
async def test_only_a_write_asked_not_to_be_durable_commits_without_an_fsync(
    sql_store: SqlBackend,
) -> None:
    """`durable=False` commits its own transaction at `synchronous=NORMAL` (in WAL mode: no
    fsync), and every write before and after it, failed or not, at FULL."""
    pragma = Compiled("PRAGMA synchronous", None, {})

    async def level(tx: Tx) -> int:
        return int((await tx.rows(pragma))[0][0])

    async def failing(tx: Tx) -> None:
        raise RuntimeError("the body failed")

    runner = sql_store.runner
    full, normal = 2, 1
    assert await runner.write(level) == full
    before = replace(runner.stats)
    assert await runner.write(level, single=True, durable=False) == normal
    assert (runner.stats.writes, runner.stats.unsynced) == (before.writes, before.unsynced + 1)
    assert await runner.write(level) == full
    with pytest.raises(RuntimeError):
        await runner.write(failing, durable=False)
    assert await runner.write(level) == full
