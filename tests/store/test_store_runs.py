"""The contract of what replicas share beyond issue 2: run state, deletion claims, orphan keys.

Run on every backend, through the public methods only, at fixed times.
"""

from __future__ import annotations

import dataclasses

import pytest
from key_support import ed25519_pem
from store_support import LEASE, NOW, RETENTION, SECOND, A, B, C, make_config, run, shown, sync

from relay.errors import InvalidInputError
from relay.store import RelayStore, RunState, open_store
from relay.store.sql import migrate
from relay.store.url import resolve


async def save(store: RelayStore, turn: RunState, now: int) -> bool:
    """A pass of `turn`'s owner hosting only `turn`: whether the session's row is now that turn,
    in that phase."""
    await sync(store, turn.owner, turn, now=now)
    row = {r.session_id: r for r in await store.run_states()}.get(turn.session_id)
    stored = (row.stream_id, row.started_at, row.phase, row.updated_at) if row else None
    return stored == (turn.stream_id, turn.started_at, turn.phase, turn.updated_at)


async def enqueue(store: RelayStore, session: str, at: int) -> str:
    view = await store.enqueue_deleted(
        session, "default", at, session_live=False, identity=None, scope=None
    )
    return view.id


# ── run state ─────────────────────────────────────────────────────────────────


async def test_sync_stores_the_hosted_turns_and_returns_the_owned_rows(store: RelayStore) -> None:
    """A pass's write stores the owner's turns, leased for `LEASE`; it returns its own rows."""
    owned = await sync(store, A, run("s2", started=NOW + 1), run("s1"))
    assert shown(owned) == [("s1", "t1", "running", A), ("s2", "t1", "running", A)]
    assert all(r.lease_until == NOW + LEASE for r in owned)
    assert await sync(store, B) == []
    assert [r.session_id for r in await store.run_states()] == ["s1", "s2"]


async def test_a_newer_turn_replaces_the_row_wherever_it_runs(store: RelayStore) -> None:
    """A session's newer turn, hosted by another replica, replaces the row; the older never comes
    back."""
    await sync(store, A, run(stream="t1", started=NOW))
    owned_b = await sync(store, B, run(stream="t2", started=NOW + 5, owner=B), now=NOW + 10)
    assert shown(owned_b) == [("s1", "t2", "running", B)]
    # A still lists its older turn: it never overwrites the newer one, and A owns nothing.
    assert await sync(store, A, run(stream="t1", started=NOW), now=NOW + 20) == []
    assert shown(await store.run_states()) == [("s1", "t2", "running", B)]


async def test_a_finished_turn_stays_finished(store: RelayStore) -> None:
    """An outcome is kept over a later live listing of the same turn; a new turn replaces it."""
    done = run(phase="completed", updated=NOW + 7)
    assert await save(store, done, NOW + 7)
    # The turn is still listed live until its teardown: the outcome wins.
    owned = await sync(store, A, run(phase="running"), now=NOW + 8)
    assert shown(owned) == [("s1", "t1", "completed", A)]
    assert owned[0].updated_at == NOW + 7
    assert not await save(store, run(phase="cancelled"), NOW + 9)
    # A new turn of the same session replaces it.
    assert await save(store, run(stream="t2", started=NOW + 9), NOW + 9)


async def test_a_live_turn_updates_its_phase_and_title(store: RelayStore) -> None:
    """The owner's next write changes a live turn's phase and title."""
    await sync(store, A, run())
    owned = await sync(store, A, run(phase="waiting_for_approval", title="New"), now=NOW + 1)
    assert (owned[0].phase, owned[0].title) == ("waiting_for_approval", "New")


async def test_a_turn_its_host_drops_without_an_outcome_ends_failed(store: RelayStore) -> None:
    """A live turn its owner no longer lists ends as `failed` once, as of that sync, and stays
    the session's row; a row that ended before is left as it is."""
    await sync(store, A, run("s1"), run("s2"), run("s3", phase="completed", updated=NOW))
    owned = await sync(store, A, run("s2"), now=NOW + 1)
    assert shown(owned) == [
        ("s1", "t1", "failed", A),
        ("s2", "t1", "running", A),
        ("s3", "t1", "completed", A),
    ]
    assert [r.updated_at for r in owned] == [NOW + 1, NOW, NOW]
    # Listed again (a host that lost it for a pass), the ended turn stays ended.
    again = await sync(store, A, run("s1"), run("s2"), now=NOW + 2)
    assert shown(again)[0] == ("s1", "t1", "failed", A)
    assert again[0].updated_at == NOW + 1


async def test_leases_are_renewed_while_the_owner_syncs(store: RelayStore) -> None:
    """Each write of the owner renews its leases, so another replica takes nothing over."""
    await sync(store, A, run())
    owned = await sync(store, A, run(), now=NOW + LEASE - 1)
    assert owned[0].lease_until == NOW + 2 * LEASE - 1
    assert await sync(store, B, now=NOW + LEASE + 1) == []


async def test_a_dead_owners_live_turn_is_taken_over_and_ends_failed(store: RelayStore) -> None:
    """Once the owner's lease ends, one replica takes its rows: a live turn as `failed`, once."""
    await sync(store, A, run("s1"), run("s2", phase="completed", updated=NOW + 3), now=NOW + 3)
    assert await sync(store, B, now=NOW + LEASE - 1) == []
    at = NOW + LEASE + 3
    owned = await sync(store, B, now=at)
    assert shown(owned) == [("s1", "t1", "failed", B), ("s2", "t1", "completed", B)]
    assert [r.updated_at for r in owned] == [at, NOW + 3]
    # Taken once: a third replica finds nothing to take, and a restarted old owner (a new
    # incarnation: the turn died with the old one) gets nothing back.
    assert await sync(store, C, now=at + 1) == []
    assert await sync(store, A + "-again", run("s1", owner=A + "-again"), now=at + 2) == []
    assert shown(await store.run_states())[0] == ("s1", "t1", "failed", B)


# ── the truth wins once the cut replica is back (issue 33) ────────────────────


async def taken_over(store: RelayStore) -> int:
    """A's live turn of s1, taken over by B at its lease's end (A silent, not dead): when."""
    await sync(store, A, run("s1"))
    at = NOW + LEASE + 1
    assert shown(await sync(store, B, now=at)) == [("s1", "t1", "failed", B)]
    return at


async def test_the_replica_a_turn_was_taken_from_corrects_it_once(store: RelayStore) -> None:
    """Back from a silent network, still running the taken turn, A's true phase replaces the
    takeover's `failed` once, with a new revision; B no longer publishes it; the turn then ends
    as A says."""
    at = await taken_over(store)
    failed = await store.pass_write(B, [], at + 1, lease_ms=LEASE, retention_ms=RETENTION)
    back = await store.pass_write(A, [run("s1")], at + 2, lease_ms=LEASE, retention_ms=RETENTION)
    assert shown(list(back.runs)) == [("s1", "t1", "running", A)]
    assert back.runs[0].taken_from is None
    assert back.revisions[0] > failed.revisions[0]
    assert await sync(store, B, now=at + 3) == []
    done = run("s1", phase="completed", updated=at + 4)
    assert shown(await sync(store, A, done, now=at + 4)) == [("s1", "t1", "completed", A)]


async def test_a_turn_that_ended_during_the_cut_ends_as_it_truly_did(store: RelayStore) -> None:
    """A turn that completed on A while A was cut off replaces the takeover's `failed`, once:
    a later different outcome of the same turn is refused."""
    at = await taken_over(store)
    done = run("s1", phase="completed", updated=at - 5)
    assert await save(store, done, at + 1)
    assert not await save(store, run("s1", phase="cancelled", updated=at + 2), at + 2)


async def test_a_correction_never_overwrites_a_newer_turn(store: RelayStore) -> None:
    """Once the session has a newer turn, the cut replica's true phase of the old one is refused."""
    at = await taken_over(store)
    newer = run("s1", stream="t2", started=NOW + 5, owner=C)
    assert shown(await sync(store, C, newer, now=at + 1)) == [("s1", "t2", "running", C)]
    assert await sync(store, A, run("s1", phase="completed", updated=at), now=at + 2) == []
    assert shown(await store.run_states()) == [("s1", "t2", "running", C)]


async def test_only_the_replica_it_was_taken_from_corrects_it(store: RelayStore) -> None:
    """Another replica offering the same turn leaves the `failed`; a second takeover (B's own
    lease ended) keeps whom the turn was first taken from, and A still corrects it."""
    at = await taken_over(store)
    assert await sync(store, C, run("s1", owner=C), now=at + 1) == []
    assert shown(await sync(store, C, now=at + LEASE + 1)) == [("s1", "t1", "failed", C)]
    (row,) = await store.run_states()
    assert row.taken_from == A
    back = await sync(store, A, run("s1"), now=at + LEASE + 2)
    assert shown(back) == [("s1", "t1", "running", A)]


async def test_the_same_failed_phase_corrects_nothing(store: RelayStore) -> None:
    """A replica that says its taken turn failed too changes nothing: no row comes back to it."""
    at = await taken_over(store)
    assert await sync(store, A, run("s1", phase="failed", updated=at - 1), now=at + 1) == []
    assert shown(await store.run_states()) == [("s1", "t1", "failed", B)]


async def test_finished_turns_are_forgotten_after_the_retention(store: RelayStore) -> None:
    """A finished turn is kept for the retention, then dropped."""
    await sync(store, A, run(phase="completed", updated=NOW))
    assert await sync(store, A, now=NOW + RETENTION) != []
    assert await sync(store, A, now=NOW + RETENTION + 1) == []
    assert await store.run_states() == []


async def test_a_dropped_newest_turn_lets_no_older_turn_back(store: RelayStore) -> None:
    """B's newest turn vanishes from B without an outcome while A still runs the turn it
    superseded: the row ends `failed` on B's turn, and A's older turn is refused for good."""
    await sync(store, A, run(stream="t1", started=NOW))
    await sync(store, B, run(stream="t2", started=NOW + 5, owner=B), now=NOW + 6)
    assert shown(await sync(store, B, now=NOW + 7)) == [("s1", "t2", "failed", B)]
    assert await sync(store, A, run(stream="t1", started=NOW), now=NOW + 8) == []
    assert not await save(store, run(stream="t1", phase="completed"), NOW + 9)
    assert shown(await store.run_states()) == [("s1", "t2", "failed", B)]


async def test_a_restart_under_the_same_name_takes_over_the_old_incarnations_turns(
    store: RelayStore,
) -> None:
    """web-1's process dies hosting the newest turn; its next incarnation hosts nothing and
    leaves the old rows alone until their lease ends, then ends them `failed` once. Meanwhile
    and after, other replicas' older turns and remembered outcomes never take the row."""
    old, new = "web-1/0a1b2c3d4e5f", "web-1/6a7b8c9d0e1f"
    await sync(store, A, run(stream="t1", started=NOW))
    await sync(store, B, run(stream="t2", phase="completed", started=NOW + 1, owner=B))
    await sync(store, old, run(stream="t3", started=NOW + 2, owner=old), now=NOW + 3)
    assert await sync(store, new, now=NOW + 4) == []
    assert shown(await store.run_states()) == [("s1", "t3", "running", old)]
    at = NOW + 3 + LEASE
    assert shown(await sync(store, new, now=at)) == [("s1", "t3", "failed", new)]
    for owner, turn in ((A, run(stream="t1")), (B, run(stream="t2", started=NOW + 1, owner=B))):
        assert await sync(store, owner, turn, now=at + 1) == []
    assert not await save(
        store, run(stream="t2", phase="completed", started=NOW + 1, owner=B), at + 2
    )
    (row,) = await store.run_states()
    assert (row.stream_id, row.phase, row.owner, row.updated_at) == ("t3", "failed", new, at)


async def test_a_pruned_sessions_older_turns_stay_refused(store: RelayStore) -> None:
    """Retention forgets the row of a session's newest turn while an older turn of it still
    runs on A and B remembers an older outcome: neither becomes the row, even a day later; a
    newer turn does."""
    await sync(store, A, run(stream="t1", started=NOW))
    await sync(store, B, run(stream="t2", phase="cancelled", started=NOW + 1, owner=B))
    await sync(store, C, run(stream="t3", started=NOW + 2, owner=C), now=NOW + 3)
    done = run(stream="t3", phase="completed", started=NOW + 2, updated=NOW + 4, owner=C)
    await sync(store, C, done, now=NOW + 4)
    later = NOW + 5 + RETENTION
    assert await sync(store, C, now=later) == []
    assert await store.run_states() == []
    for at in (later + 1, later + 20 * 3600 * SECOND):
        assert await sync(store, A, run(stream="t1"), now=at) == []
        assert not await save(
            store, run(stream="t2", phase="cancelled", started=NOW + 1, owner=B), at
        )
        assert not await save(
            store, run(stream="t3", phase="completed", started=NOW + 2, owner=C), at
        )
        assert await store.run_states() == []
    newer = run(stream="t4", started=later + 2, owner=B)
    assert await save(store, newer, later + 2)
    assert shown(await store.run_states()) == [("s1", "t4", "running", B)]


async def test_a_pruned_turn_is_remembered_for_a_day(store: RelayStore) -> None:
    """A pruned session's turn is remembered a day from its pruning, then forgotten."""
    await sync(store, A, run(phase="completed", updated=NOW))
    pruned = NOW + RETENTION + 1
    await sync(store, A, now=pruned)
    day = 24 * 3600 * SECOND
    assert await sync(store, B, run(stream="t0", started=NOW - 1, owner=B), now=pruned + day) == []
    await sync(store, C, now=pruned + day + 1)
    assert await save(store, run(stream="t0", started=NOW - 1, owner=B), pruned + day + 2)


async def test_keep_alive_renews_and_tells_when_another_lease_ends(store: RelayStore) -> None:
    """`keep_alive` renews the owner's leases and returns when another owner's next lease ends."""
    assert await store.keep_alive(A, NOW, LEASE) is None
    await sync(store, A, run())
    assert await store.keep_alive(A, NOW + 5, LEASE) is None
    assert await store.keep_alive(B, NOW + 6, LEASE) == NOW + 5 + LEASE
    assert (await store.run_states())[0].lease_until == NOW + 5 + LEASE
    # Claims held by others count too; one's own never do.
    await store.track_started(["prf_a"], NOW - 10)
    await store.record_started_scopes({"prf_a": [("e1", NOW)]}, NOW)
    await store.claim_started_scopes(["prf_a"], C, NOW + 1, 3 * SECOND)
    assert await store.keep_alive(B, NOW + 7, LEASE) == NOW + 1 + 3 * SECOND
    await store.enqueue_deleted(
        "gone", "default", NOW, session_live=False, identity=None, scope=None
    )
    await store.claim_deleted(A, NOW + 1, 2 * SECOND)
    assert await store.keep_alive(B, NOW + 7, LEASE) == NOW + 1 + 2 * SECOND
    assert await store.keep_alive(A, NOW + 7, LEASE) == NOW + 1 + 3 * SECOND
    # A lease that ended within the last lease is still due (a replica whose clock runs behind
    # the taker's may have found it not yet ended); one that ended before is no longer awaited.
    assert await store.keep_alive(B, NOW + 1 + 3 * SECOND, LEASE) == NOW + 1 + 2 * SECOND
    assert await store.keep_alive(B, NOW + 3 + 2 * SECOND + LEASE, LEASE) == NOW + 1 + 3 * SECOND
    assert await store.keep_alive(B, NOW + 9 + 2 * LEASE, LEASE) is None


async def test_an_acknowledged_deletion_leaves_no_claim_to_wait_for(store: RelayStore) -> None:
    """Its claim ends with the entry (memory and JSON kept it, found by the state machine)."""
    view = await store.enqueue_deleted(
        "gone", "default", NOW, session_live=False, identity=None, scope=None
    )
    assert await store.claim_deleted(A, NOW, 2 * SECOND)
    assert await store.ack_deleted(view.id, view.through)
    assert await store.keep_alive(B, NOW, LEASE) is None


async def test_run_records_check_themselves() -> None:
    """A `RunState` with a bad phase, an overlong id or an overlong owner is refused when made."""
    with pytest.raises(InvalidInputError, match="phase"):
        run(phase="done")
    with pytest.raises(InvalidInputError, match="session_id"):
        run("x" * 192)
    with pytest.raises(InvalidInputError, match="owner"):
        run(owner="o" * 65)


async def test_sync_refuses_what_it_cannot_store(store: RelayStore) -> None:
    """Another owner's row, a session twice, a non-list or a zero lease is refused; nothing is
    stored."""
    with pytest.raises(InvalidInputError, match="not owned"):
        await sync(store, A, run(owner=B))
    with pytest.raises(InvalidInputError, match="twice"):
        await sync(store, A, run(), run())
    with pytest.raises(InvalidInputError, match="live"):
        await store.pass_write(A, "s1", NOW, lease_ms=LEASE, retention_ms=RETENTION)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="lease"):
        await store.keep_alive(A, NOW, 0)
    assert await store.run_states() == []


# ── deletion claims ───────────────────────────────────────────────────────────


async def test_a_claimed_deletion_is_delivered_by_one_owner_at_a_time(store: RelayStore) -> None:
    """A claimed deletion goes to one owner until its lease ends; it renews, an ack ends it."""
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
    """Bad limits, leases and owners are refused; the deletion stays claimable."""
    await enqueue(store, "d1", NOW)
    for bad in ({"limit": 0}, {"limit": True}, {"lease_ms": -1}, {"owner": ""}):
        args = {"owner": A, "now_ms": NOW, "lease_ms": LEASE} | bad
        with pytest.raises(InvalidInputError):
            await store.claim_deleted(**args)  # type: ignore[arg-type]
    assert len(await store.claim_deleted(A, NOW, LEASE)) == 1


# ── orphan keys ───────────────────────────────────────────────────────────────


async def test_delete_key_removes_only_a_key_no_registration_names(store: RelayStore) -> None:
    """Only an orphan key is deleted; the registration's key and config stay as they were."""
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


@pytest.mark.postgres
async def test_a_database_at_0009_keeps_a_takeovers_failed(pg_database: str) -> None:
    """During a rollout this code runs on 0009 (no `taken_from`): takeovers work as before, and
    the failed stays; after `migrate` the same store code corrects the next one."""
    await migrate.upgrade(resolve(pg_database), "0009")
    store = await open_store(pg_database)
    try:
        at = await taken_over(store)
        assert await sync(store, A, run("s1"), now=at + 1) == []
        assert shown(await store.run_states()) == [("s1", "t1", "failed", B)]
    finally:
        await store.close()
    await migrate.upgrade(resolve(pg_database))
    store = await open_store(pg_database)
    try:
        later = run("s2", started=NOW + 1)
        await sync(store, A, later, now=NOW + 2 * LEASE)
        assert shown(await sync(store, B, now=NOW + 3 * LEASE + 1))[-1][2] == "failed"
        back = await sync(store, A, later, now=NOW + 3 * LEASE + 2)
        assert shown(back) == [("s2", "t1", "running", A)]
    finally:
        await store.close()
