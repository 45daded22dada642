"""What one publisher pass costs the store: transactions and statements, at S=20 and S=200.

A steady pass (nothing new) costs the same whatever the number of sessions, and a first pass
announcing S new sessions (over all profiles) costs at most 2 + ⌈S/64⌉ transactions more than a
steady pass: its sightings, its first claim, and per batch of 64 the mark that claims the next.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from backends import on
from harness import Env, relay_env
from sql_support import sql_backend

from relay.store import RelayStore
from relay.store.sql.drivers.runner import Stats

PROFILES = ("default", "work", "home")
# The batch: at least 64 announcements per claim.
BATCH = 64

pytestmark = on("sqlite", "postgres")


async def _paired(store: RelayStore) -> AsyncIterator[Env]:
    async with relay_env(store, profiles=PROFILES) as env:
        await env.pair("default")
        for profile in PROFILES[1:]:
            await env.pair(profile, user=f"usr_{profile}")
        await env.publish()
        yield env


Cost = tuple[int, int]  # (transactions, statements)


def _cost(before: Stats, after: Stats) -> Cost:
    return after.transactions - before.transactions, after.statements - before.statements


async def _pass_cost(env: Env, store: RelayStore) -> Cost:
    stats = sql_backend(store).stats
    before = Stats(stats.transactions, stats.statements)
    assert await env.publish() is None
    return _cost(before, stats)


async def _first_and_steady(env: Env, store: RelayStore, sessions: range) -> tuple[Cost, Cost]:
    """(first pass, steady pass) costs with the `sessions` numbered new in each profile."""
    env.clock.advance(1)
    for profile in PROFILES:
        for n in sessions:
            sid = f"{profile}-{n}"
            env.host.create_session(sid, profile, f"Chat {n}")
            env.host.start_run(sid)
    before = len(env.accepted("started"))
    first = await _pass_cost(env, store)
    assert len(env.accepted("started")) - before == len(sessions) * len(PROFILES)
    return first, await _pass_cost(env, store)


async def test_a_steady_pass_costs_the_same_at_20_and_200_sessions(store: RelayStore) -> None:
    """With nothing new to announce, 200 sessions cost the store what 20 do."""
    async for env in _paired(store):
        _, at_20 = await _first_and_steady(env, store, range(20))
        _, at_200 = await _first_and_steady(env, store, range(20, 200))
        assert at_20 == at_200


@pytest.mark.parametrize("sessions", [20, 200])
async def test_a_first_pass_costs_two_transactions_and_one_per_batch_of_64(
    store: RelayStore, sessions: int
) -> None:
    """Announcing S sessions over P profiles costs at most 2 + ⌈S/64⌉ transactions (and two
    statements a batch) beyond a steady pass, whatever P: one claim spans every profile, and a
    batch is marked sent by the transaction that claims the next."""
    async for env in _paired(store):
        (first_tx, first_st), (steady_tx, steady_st) = await _first_and_steady(
            env, store, range(sessions)
        )
        batches = -(-sessions * len(PROFILES) // BATCH)
        assert first_tx - steady_tx <= 2 + batches
        assert first_st - steady_st <= 3 + 2 * (batches + 1)
