"""The contract of what replicas share beyond issue 2: run state, deletion claims, orphan keys.

Run on every backend, through the public methods only, at fixed times.
"""

from __future__ import annotations

import dataclasses

import pytest
from test_store_contract import NOW, SECOND, ed25519_pem, make_config

from relay.errors import InvalidInputError
from relay.store import RelayStore, RunState

LEASE = 20 * SECOND
RETENTION = 15 * 60 * SECOND
A, B, C = "replica-a", "replica-b", "replica-c"


def run(
    session: str = "s1",
    *,
    stream: str | None = "t1",
    phase: str = "running",
    started: int = NOW,
    updated: int = NOW,
    owner: str = A,
    title: str = "Title",
) -> RunState:
    return RunState(session, stream, "default", title, phase, started, updated, owner)


async def sync(store: RelayStore, owner: str, *live: RunState, now: int = NOW) -> list[RunState]:
    return await store.sync_runs(owner, live, now, lease_ms=LEASE, retention_ms=RETENTION)


async def enqueue(store: RelayStore, session: str, at: int) -> str:
    view = await store.enqueue_deleted(
        session, "default", at, session_live=False, identity=None, scope=None
    )
    return view.id


def shown(runs: list[RunState]) -> list[tuple[str, str | None, str, str]]:
    return [(r.session_id, r.stream_id, r.phase, r.owner) for r in runs]


# ── run state ─────────────────────────────────────────────────────────────────


async def test_sync_stores_the_hosted_turns_and_returns_the_owned_rows(store: RelayStore) -> None:
    owned = await sync(store, A, run("s2", started=NOW + 1), run("s1"))
    assert shown(owned) == [("s1", "t1", "running", A), ("s2", "t1", "running", A)]
    assert all(r.lease_until == NOW + LEASE for r in owned)
    assert await sync(store, B) == []
    assert [r.session_id for r in await store.run_states()] == ["s1", "s2"]


async def test_a_newer_turn_replaces_the_row_wherever_it_runs(store: RelayStore) -> None:
    await sync(store, A, run(stream="t1", started=NOW))
    owned_b = await sync(store, B, run(stream="t2", started=NOW + 5, owner=B), now=NOW + 10)
    assert shown(owned_b) == [("s1", "t2", "running", B)]
    # A still lists its older turn: it never overwrites the newer one, and A owns nothing.
    assert await sync(store, A, run(stream="t1", started=NOW), now=NOW + 20) == []
    assert shown(await store.run_states()) == [("s1", "t2", "running", B)]


async def test_a_finished_turn_stays_finished(store: RelayStore) -> None:
    done = run(phase="completed", updated=NOW + 7)
    assert await store.save_run(done, NOW + 7, LEASE)
    # The turn is still listed live until its teardown: the outcome wins.
    owned = await sync(store, A, run(phase="running"), now=NOW + 8)
    assert shown(owned) == [("s1", "t1", "completed", A)]
    assert owned[0].updated_at == NOW + 7
    assert not await store.save_run(run(phase="cancelled"), NOW + 9, LEASE)
    # A new turn of the same session replaces it.
    assert await store.save_run(run(stream="t2", started=NOW + 9), NOW + 9, LEASE)


async def test_a_live_turn_updates_its_phase_and_title(store: RelayStore) -> None:
    await sync(store, A, run())
    owned = await sync(store, A, run(phase="waiting_for_approval", title="New"), now=NOW + 1)
    assert (owned[0].phase, owned[0].title) == ("waiting_for_approval", "New")


async def test_sync_drops_the_owners_turns_that_are_gone(store: RelayStore) -> None:
    await sync(store, A, run("s1"), run("s2"))
    await store.save_run(run("s3", phase="failed"), NOW, LEASE)
    owned = await sync(store, A, run("s2"), now=NOW + 1)
    # s1 vanished without an outcome (as upstream, it is no longer published); s3 ended.
    assert [r.session_id for r in owned] == ["s2", "s3"]


async def test_leases_are_renewed_while_the_owner_syncs(store: RelayStore) -> None:
    await sync(store, A, run())
    owned = await sync(store, A, run(), now=NOW + LEASE - 1)
    assert owned[0].lease_until == NOW + 2 * LEASE - 1
    assert await sync(store, B, now=NOW + LEASE + 1) == []


async def test_a_dead_owners_live_turn_is_taken_over_and_ends_failed(store: RelayStore) -> None:
    await sync(store, A, run("s1"))
    await store.save_run(run("s2", phase="completed", updated=NOW + 3), NOW + 3, LEASE)
    assert await sync(store, B, now=NOW + LEASE - 1) == []
    at = NOW + LEASE + 3
    owned = await sync(store, B, now=at)
    assert shown(owned) == [("s1", "t1", "failed", B), ("s2", "t1", "completed", B)]
    assert [r.updated_at for r in owned] == [at, NOW + 3]
    # Taken once: a third replica finds nothing to take, and the old owner gets nothing back.
    assert await sync(store, C, now=at + 1) == []
    assert await sync(store, A, run("s1"), now=at + 2) == []


async def test_finished_turns_are_forgotten_after_the_retention(store: RelayStore) -> None:
    await store.save_run(run(phase="completed", updated=NOW), NOW, LEASE)
    assert await sync(store, A, now=NOW + RETENTION) != []
    assert await sync(store, A, now=NOW + RETENTION + 1) == []
    assert await store.run_states() == []


async def test_keep_alive_renews_and_tells_when_another_lease_ends(store: RelayStore) -> None:
    assert await store.keep_alive(A, NOW, LEASE) is None
    await sync(store, A, run())
    assert await store.keep_alive(A, NOW + 5, LEASE) is None
    assert await store.keep_alive(B, NOW + 6, LEASE) == NOW + 5 + LEASE
    assert (await store.run_states())[0].lease_until == NOW + 5 + LEASE
    # Claims held by others count too; one's own never do.
    await store.track_started(["prf_a"], NOW - 10)
    await store.record_started("prf_a", [("e1", NOW)], NOW)
    await store.claim_started("prf_a", C, NOW + 1, 3 * SECOND)
    assert await store.keep_alive(B, NOW + 7, LEASE) == NOW + 1 + 3 * SECOND
    await store.enqueue_deleted(
        "gone", "default", NOW, session_live=False, identity=None, scope=None
    )
    await store.claim_deleted(A, NOW + 1, 2 * SECOND)
    assert await store.keep_alive(B, NOW + 7, LEASE) == NOW + 1 + 2 * SECOND
    assert await store.keep_alive(A, NOW + 7, LEASE) == NOW + 1 + 3 * SECOND
    # A lease that already ended is no longer awaited.
    assert await store.keep_alive(B, NOW + 1 + 3 * SECOND, LEASE) == NOW + 7 + LEASE


async def test_run_records_check_themselves() -> None:
    with pytest.raises(InvalidInputError, match="phase"):
        run(phase="done")
    with pytest.raises(InvalidInputError, match="session_id"):
        run("x" * 192)
    with pytest.raises(InvalidInputError, match="owner"):
        run(owner="o" * 65)


async def test_sync_refuses_what_it_cannot_store(store: RelayStore) -> None:
    with pytest.raises(InvalidInputError, match="not owned"):
        await sync(store, A, run(owner=B))
    with pytest.raises(InvalidInputError, match="twice"):
        await sync(store, A, run(), run())
    with pytest.raises(InvalidInputError, match="live"):
        await store.sync_runs(A, "s1", NOW, lease_ms=LEASE, retention_ms=RETENTION)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="lease"):
        await store.keep_alive(A, NOW, 0)
    assert await store.run_states() == []


# ── deletion claims ───────────────────────────────────────────────────────────


async def test_a_claimed_deletion_is_delivered_by_one_owner_at_a_time(store: RelayStore) -> None:
    first = await enqueue(store, "d1", NOW)
    second = await enqueue(store, "d2", NOW + 1)
    assert [v.id for v in await store.claim_deleted(A, NOW, LEASE, 1)] == [first]
    assert [v.id for v in await store.claim_deleted(B, NOW, LEASE)] == [second]
    assert await store.claim_deleted(C, NOW + LEASE - 1, LEASE) == []
    # The owner claims its own again (a renewal); another owner takes it once the lease ends.
    assert [v.id for v in await store.claim_deleted(A, NOW + 5, LEASE)] == [first]
    assert [v.id for v in await store.claim_deleted(C, NOW + 5 + LEASE, LEASE)] == [first, second]
    assert await store.ack_deleted(first, NOW)
    assert [v.id for v in await store.claim_deleted(C, NOW + 6 + LEASE, LEASE)] == [second]
    assert [v.session_id for v in await store.pending_deleted()] == ["d2"]


async def test_claim_deleted_checks_its_arguments(store: RelayStore) -> None:
    await enqueue(store, "d1", NOW)
    for bad in ({"limit": 0}, {"limit": True}, {"lease_ms": -1}, {"owner": ""}):
        args = {"owner": A, "now_ms": NOW, "lease_ms": LEASE} | bad
        with pytest.raises(InvalidInputError):
            await store.claim_deleted(**args)  # type: ignore[arg-type]
    assert len(await store.claim_deleted(A, NOW, LEASE)) == 1


# ── orphan keys ───────────────────────────────────────────────────────────────


async def test_delete_key_removes_only_a_key_no_registration_names(store: RelayStore) -> None:
    named = await store.save_key("key-1", ed25519_pem())
    await store.save_config(make_config(named))
    orphan = await store.save_key("key-2", ed25519_pem())
    assert not await store.delete_key(named)
    assert await store.delete_key(orphan)
    assert not await store.delete_key(orphan)
    assert await store.load_key(named)
    config = await store.load_config()
    assert config is not None
    assert dataclasses.replace(config, generation=0) == make_config(named)


async def test_a_row_taken_while_its_old_owner_sends_it_waits_for_that_send(
    store: RelayStore,
) -> None:
    """B takes a session's row with a newer turn while A may still be sending the old one: the
    row tells B so until A releases its rows (or A's mark ends), then B marks it its own."""
    (mine,) = await sync(store, A, run(stream="t1"))
    assert (mine.sending_by, mine.sending_until) == (A, NOW + LEASE)
    assert not mine.sent_elsewhere(A, NOW)
    (taken,) = await sync(store, B, run(stream="t2", started=NOW + 1, owner=B), now=NOW + 2)
    assert taken.owner == B
    assert taken.sent_elsewhere(B, NOW + 2)
    await store.release_runs(A)
    (free,) = await sync(store, B, run(stream="t2", started=NOW + 1, owner=B), now=NOW + 3)
    assert not free.sent_elsewhere(B, NOW + 3)
    assert free.sending_by == B
    # A mark that ended frees the row without a release.
    await sync(store, C, run("s9", owner=C), now=NOW + 4)
    at = NOW + 5 + LEASE
    owned = await sync(store, A, run("s9", stream="t9", started=NOW + 9), now=at)
    (late,) = [r for r in owned if r.session_id == "s9"]
    assert not late.sent_elsewhere(A, at)
