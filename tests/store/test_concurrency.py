"""Many real processes on one store: nothing is handed out twice and nothing is lost."""

from __future__ import annotations

import mp_workers
from backends import REAL, on
from processes import run_processes

from relay.store import open_store

# Each process opens the URL: a memory store would be a new, private one in each.
pytestmark = on(*REAL)

WORKERS = 4


async def test_revisions_are_unique_and_increasing_across_processes(store_url: str) -> None:
    """Four processes x 200 allocations never share a revision; each sees its own increase."""
    results = run_processes(mp_workers.allocate, WORKERS, store_url, 200)
    every: list[int] = []
    for batches in results:
        mine = [revision for batch in batches for revision in batch]
        assert mine == sorted(mine)
        assert len(set(mine)) == len(mine)
        for batch in batches:
            assert batch == list(range(batch[0], batch[0] + len(batch)))
        every += mine
    assert len(set(every)) == len(every)
    async with open_store(store_url) as store:
        assert await store.revision_floor() == max(every)


async def test_concurrent_identity_mint_gives_one_value(store_url: str) -> None:
    """Processes minting the same 50 profiles' identities at once all get the same values."""
    results = run_processes(mp_workers.mint, WORKERS, store_url, 50, 4)
    assert all(result == results[0] for result in results)
    assert len(set(results[0].values())) == 50
    async with open_store(store_url) as store:
        for name, identity in results[0].items():
            assert await store.profile_identity(name) == identity


async def test_concurrent_claims_never_share_an_entry(store_url: str) -> None:
    """Four processes draining 100 started entries claim each exactly once, together all of them."""
    sessions = [(f"session-{n:03d}", mp_workers.NOW + n) for n in range(100)]
    async with open_store(store_url) as store:
        await store.track_started(["prf_a"], mp_workers.NOW)
        await store.record_started_scopes({"prf_a": sessions}, mp_workers.NOW + 100)
    results = run_processes(mp_workers.claim, WORKERS, store_url, "prf_a")
    claimed = [session for result in results for session in result]
    assert sorted(claimed) == sorted(session for session, _ in sessions)
    async with open_store(store_url) as store:
        (scope,) = await store.started_ledger()
        assert all(entry.sent for entry in scope.entries)
        assert len(scope.entries) == 100


async def test_concurrent_ledger_and_outbox_writes_lose_nothing(store_url: str) -> None:
    """Four processes x 50 ledger and outbox writes: every one of them is there afterwards."""
    async with open_store(store_url) as store:
        await store.track_started(["prf_a"], mp_workers.NOW)
    run_processes(mp_workers.record, WORKERS, store_url, "prf_a", 25)
    expected = {f"w{w}-s{n}" for w in range(WORKERS) for n in range(25)}
    async with open_store(store_url) as store:
        (scope,) = await store.started_ledger()
        assert {entry.session_id for entry in scope.entries} == expected
        assert {view.session_id for view in await store.pending_deleted()} == expected
