"""`retire_runs`, on every backend: a stopping replica's finished rows are free at once, its
live rows keep their lease, its sending marks go."""

from __future__ import annotations

from store_support import LEASE, NOW, SECOND, A, B, run, sync

from relay.store import RelayStore


async def test_a_retired_owners_finished_rows_are_taken_over_at_once(store: RelayStore) -> None:
    """After A retires, its finished row's lease has ended and B's next pass owns it; A's live
    row keeps its lease (and its owner) until the lease ends; A sends nothing any more."""
    await sync(store, A, run("live"), run("done", stream="t2", phase="completed"))
    retired_at = NOW + SECOND
    await store.retire_runs(A, retired_at)
    rows = {r.session_id: r for r in await store.run_states()}
    assert rows["done"].lease_until == retired_at
    assert rows["live"].lease_until == NOW + LEASE
    assert all(r.sending_by is None for r in rows.values())

    await sync(store, B, now=retired_at + 1)
    owners = {r.session_id: r.owner for r in await store.run_states()}
    assert owners == {"done": B, "live": A}


async def test_retiring_touches_no_one_elses_rows(store: RelayStore) -> None:
    """B's rows, finished or not, keep their leases when A retires; retiring twice is as once."""
    await sync(store, B, run("b-done", phase="completed", owner=B))
    before = await store.run_states()
    await store.retire_runs(A, NOW + SECOND)
    await store.retire_runs(A, NOW + SECOND)
    assert await store.run_states() == before
