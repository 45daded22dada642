"""What one publisher pass costs the store: transactions and statements, at S=20 and S=200.

A steady pass (nothing new) costs the same whatever the number of sessions, and a first pass
announcing S sessions costs O(P + S/16) transactions, not one or more per session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harness import Env, relay_env

from relay.publishing.announcements import STARTED_BATCH
from relay.store import open_store
from relay.store.sql import SqlStore, Stats

PROFILES = ("default", "work", "home")

pytestmark = pytest.mark.sqlite


@pytest.fixture
async def sql_store(tmp_path: Path) -> AsyncIterator[SqlStore]:
    async with open_store(f"sqlite:///{tmp_path / 'relay.db'}") as store:
        assert isinstance(store, SqlStore)
        yield store


async def _paired(store: SqlStore) -> AsyncIterator[Env]:
    async with relay_env(store, profiles=PROFILES) as env:
        await env.pair("default")
        for profile in PROFILES[1:]:
            await env.pair(profile, user=f"usr_{profile}")
        await env.publish()
        yield env


def _cost(before: Stats, after: Stats) -> tuple[int, int]:
    return after.transactions - before.transactions, after.statements - before.statements


async def _pass_cost(env: Env, store: SqlStore) -> tuple[int, int]:
    before = Stats(store.stats.transactions, store.stats.statements)
    assert await env.publish() is None
    return _cost(before, store.stats)


async def _costs(store: SqlStore, sessions: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(first pass, steady pass) costs with `sessions` new sessions in each profile."""
    async for env in _paired(store):
        env.clock.advance(1)
        for profile in PROFILES:
            for n in range(sessions):
                sid = f"{profile}-{n}"
                env.host.create_session(sid, profile, f"Chat {n}")
                env.host.start_run(sid)
        first = await _pass_cost(env, store)
        announced = len(env.accepted("started"))
        assert announced == sessions * len(PROFILES)
        steady = await _pass_cost(env, store)
        return first, steady
    raise AssertionError("unreachable")


async def test_a_steady_pass_costs_the_same_at_20_and_200_sessions(tmp_path: Path) -> None:
    """With nothing new to announce, 200 sessions cost the store what 20 do."""
    costs = []
    for sessions in (20, 200):
        async with open_store(f"sqlite:///{tmp_path / f'relay-{sessions}.db'}") as store:
            assert isinstance(store, SqlStore)
            costs.append((await _costs(store, sessions))[1])
    assert costs[0] == costs[1]


@pytest.mark.parametrize("sessions", [20, 200])
async def test_a_first_pass_batches_its_announcements(sql_store: SqlStore, sessions: int) -> None:
    """Announcing S sessions in P profiles costs at most a few transactions per profile plus two
    per batch of 16 (its claim and its mark), never one per session."""
    (first_tx, _), (steady_tx, _) = await _costs(sql_store, sessions)
    batches = len(PROFILES) * -(-sessions // STARTED_BATCH)
    assert first_tx <= steady_tx + len(PROFILES) + 2 * batches
    assert first_tx < sessions * len(PROFILES)
