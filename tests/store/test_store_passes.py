"""The contract of a publishing pass's one read (`pass_view`) and one write (`pass_write`).

Part of the contract suite: run on every backend, through the public methods only, at fixed
times. Each view answer is held to what the methods it stands for answer (a claim, a presence
query, the ledger), and the write to the run sync plus `allocate_revisions`.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from ledger_calls import mark_sent
from store_support import IDENTITY_RE, LEASE, NOW, RETENTION, SECOND, A, B, run, saved_config, shown

from relay.errors import CorruptStateError, InvalidInputError
from relay.protocol import MAX_SAFE_INTEGER
from relay.store import RelayStore, StateBatch

PROFILES = ["alpha", "beta"]
SCOPES = ["prf_a", "prf_b"]
TAB = "tab-aaaaaaaa"


async def view(store: RelayStore, owner: str = A, now: int = NOW) -> Any:
    return await store.pass_view(owner, PROFILES, SCOPES, now)


async def write(store: RelayStore, owner: str, *live: Any, now: int = NOW) -> Any:
    return await store.pass_write(owner, live, now, lease_ms=LEASE, retention_ms=RETENTION)


# ── the view ──────────────────────────────────────────────────────────────────


async def test_the_view_of_an_empty_store(store: RelayStore) -> None:
    """An empty store's view: no generation, no identities, no presence, every scope untracked."""
    seen = await view(store)
    assert seen.generation is None
    assert dict(seen.identities) == {"alpha": None, "beta": None}
    assert dict(seen.presence) == {"alpha": False, "beta": False}
    assert not seen.deleted
    assert seen.unsent == frozenset()
    assert seen.untracked == frozenset(SCOPES)


async def test_the_view_carries_the_clock_of_a_store_on_a_server_of_its_own(
    store: RelayStore,
) -> None:
    """Postgres's view brings its clock (the replicas' time base), read in the statement; a
    store on this host (SQLite, JSON, memory) none: this host's clock is its time base."""
    before = time.time()
    seen = await view(store)
    after = time.time()
    if store.backend_name == "postgres":
        assert seen.store_ms is not None
        # The test's server is on this host: one clock, to within the read.
        assert before * 1000 - 1 <= seen.store_ms <= after * 1000 + 1
    else:
        assert seen.store_ms is None


async def test_the_view_shows_the_registrations_generation(store: RelayStore) -> None:
    """The view carries the stored registration's generation, and a new one after a save."""
    config = await saved_config(store)
    loaded = await store.load_config()
    assert loaded is not None
    assert (await view(store)).generation == loaded.generation
    await store.save_config(config)
    again = await store.load_config()
    assert again is not None
    assert again.generation != loaded.generation
    assert (await view(store)).generation == again.generation


async def test_the_view_shows_stored_identities_and_mints_none(store: RelayStore) -> None:
    """The view shows stored identities and mints none for profiles without one."""
    identity = await store.profile_identity("alpha")
    seen = await view(store)
    assert dict(seen.identities) == {"alpha": identity, "beta": None}
    assert IDENTITY_RE.match(identity)
    assert await store.identities() == {"alpha": identity}


async def test_the_view_shows_presence_as_presence_active(store: RelayStore) -> None:
    """The view's presence is what `presence_active` says, lease end and revoke included."""
    await store.apply_presence(
        "beta", TAB, 1, True, NOW, lease_ms=90 * SECOND, fence_ms=0, max_tabs=8
    )
    assert dict((await view(store)).presence) == {"alpha": False, "beta": True}
    later = NOW + 90 * SECOND
    assert await store.presence_active("beta", later) is False
    assert dict((await view(store, now=later)).presence) == {"alpha": False, "beta": False}
    await store.apply_presence(
        "beta", TAB, 2, False, NOW + 1, lease_ms=90 * SECOND, fence_ms=0, max_tabs=8
    )
    assert dict((await view(store)).presence)["beta"] is False


async def test_the_view_shows_deletions_the_owner_would_claim(store: RelayStore) -> None:
    """`deleted` is whether this owner would claim a queued deletion now (not while another holds
    it)."""
    queued = await store.enqueue_deleted(
        "gone", "alpha", NOW, session_live=False, identity=None, scope=None
    )
    assert (await view(store, A)).deleted
    assert [v.id for v in await store.claim_deleted(B, NOW, LEASE)] == [queued.id]
    # B holds it: A would claim nothing until the lease ends; B would renew it.
    assert not (await view(store, A)).deleted
    assert (await view(store, B)).deleted
    assert (await view(store, A, now=NOW + LEASE)).deleted
    assert await store.ack_deleted(queued.id, queued.through)
    assert not (await view(store, B)).deleted


async def test_the_view_shows_scopes_with_announcements_the_owner_would_claim(
    store: RelayStore,
) -> None:
    """`unsent` names scopes with entries this owner would claim; `untracked`, scopes without a
    ledger."""
    await store.track_started(["prf_a"], NOW)
    seen = await view(store)
    assert seen.untracked == frozenset({"prf_b"})
    assert seen.unsent == frozenset()
    await store.record_started_scopes({"prf_a": [("s1", NOW + 1)]}, NOW + 2)
    assert (await view(store, A)).unsent == frozenset({"prf_a"})
    assert await store.claim_started_scopes(["prf_a"], B, NOW + 2, LEASE)
    assert (await view(store, A, now=NOW + 3)).unsent == frozenset()
    assert (await view(store, B, now=NOW + 3)).unsent == frozenset({"prf_a"})
    assert (await view(store, A, now=NOW + 2 + LEASE)).unsent == frozenset({"prf_a"})
    await mark_sent(store, "prf_a", "s1")
    assert (await view(store, B, now=NOW + 3)).unsent == frozenset()


async def test_the_view_answers_only_what_it_was_asked(store: RelayStore) -> None:
    """Profiles and scopes not asked about are left out of the view."""
    await store.profile_identity("gamma")
    await store.track_started(["prf_c"], NOW)
    await store.record_started_scopes({"prf_c": [("s1", NOW + 1)]}, NOW + 2)
    seen = await store.pass_view(A, ["alpha"], ["prf_a"], NOW + 3)
    assert dict(seen.identities) == {"alpha": None}
    assert list(seen.presence) == ["alpha"]
    assert seen.unsent == frozenset()
    assert seen.untracked == frozenset({"prf_a"})


async def test_the_view_changes_nothing(store: RelayStore) -> None:
    """Reading the view claims, mints and tracks nothing."""
    await store.track_started(["prf_a"], NOW)
    await store.record_started_scopes({"prf_a": [("s1", NOW + 1)]}, NOW + 2)
    await store.enqueue_deleted("gone", "alpha", NOW, session_live=False, identity=None, scope=None)
    before = (await store.started_ledger(), await store.pending_deleted())
    await view(store, A, now=NOW + 3)
    assert (await store.started_ledger(), await store.pending_deleted()) == before
    # Nothing was claimed for A: B still takes both.
    assert await store.claim_started_scopes(["prf_a"], B, NOW + 3, LEASE)
    assert await store.claim_deleted(B, NOW + 3, LEASE)
    assert await store.identities() == {}


# ── the write ─────────────────────────────────────────────────────────────────


async def test_the_write_syncs_and_allocates_one_revision_per_owned_row(
    store: RelayStore,
) -> None:
    """The write syncs the turns and allocates one revision per owned row, marked as sending."""
    written = await write(store, A, run("s2", started=NOW + 1), run("s1"), now=NOW + 5)
    assert shown(list(written.runs)) == [("s1", "t1", "running", A), ("s2", "t1", "running", A)]
    assert list(written.revisions) == [NOW + 5, NOW + 6]
    assert await store.revision_floor() == NOW + 6
    assert [r.sending_by for r in written.runs] == [A, A]
    assert list(written.runs) == await store.run_states()


async def test_the_write_ends_dropped_turns_and_takes_over_dead_owners_rows(
    store: RelayStore,
) -> None:
    """A turn the owner drops ends `failed`; a dead owner's rows are taken over with newer
    revisions."""
    await write(store, A, run("s1"), run("s2", started=NOW + 1))
    # A drops s2 without an outcome; B's lease on nothing; then B takes A's rows over.
    written = await write(store, A, run("s1"), now=NOW + 1)
    assert shown(list(written.runs)) == [("s1", "t1", "running", A), ("s2", "t1", "failed", A)]
    taken = await write(store, B, now=NOW + 1 + LEASE)
    assert shown(list(taken.runs)) == [("s1", "t1", "failed", B), ("s2", "t1", "failed", B)]
    assert len(taken.revisions) == 2
    assert taken.revisions[0] > written.revisions[-1]


async def test_the_write_continues_from_a_floor_ahead_of_the_clock(store: RelayStore) -> None:
    """Revisions continue from a floor ahead of the clock, never below it."""
    await store.allocate_revisions(3, NOW + 100)
    written = await write(store, A, run("s1"), now=NOW)
    assert list(written.revisions) == [NOW + 103]
    assert await store.revision_floor() == NOW + 103


async def test_the_write_without_rows_allocates_nothing(store: RelayStore) -> None:
    """A write without rows leaves the floor where it was."""
    await store.allocate_revisions(1, NOW)
    written = await write(store, A, now=NOW + 50)
    assert written.runs == ()
    assert len(written.revisions) == 0
    assert await store.revision_floor() == NOW


async def test_the_write_past_the_cap_changes_nothing(store: RelayStore) -> None:
    """A write whose revisions would pass 2^53-1 is refused whole; one that fits still goes in."""
    await write(store, A, run("s1"))
    before = await store.run_states()
    await store.merge_state(StateBatch(revision_floor=MAX_SAFE_INTEGER - 1))
    with pytest.raises(CorruptStateError, match="2\\^53-1"):
        await write(store, A, run("s1"), run("s2"), now=NOW + 1)
    assert await store.run_states() == before
    assert await store.revision_floor() == MAX_SAFE_INTEGER - 1
    # One row still fits.
    written = await write(store, A, run("s1"), now=NOW + 2)
    assert list(written.revisions) == [MAX_SAFE_INTEGER]


# ── bad input ─────────────────────────────────────────────────────────────────


BAD_VIEWS = {
    "owner empty": lambda s: s.pass_view("", PROFILES, SCOPES, NOW),
    "owner too long": lambda s: s.pass_view("o" * 65, PROFILES, SCOPES, NOW),
    "profiles a string": lambda s: s.pass_view(A, "alpha", SCOPES, NOW),
    "profile empty": lambda s: s.pass_view(A, [""], SCOPES, NOW),
    "scope not text": lambda s: s.pass_view(A, PROFILES, [7], NOW),
    "now negative": lambda s: s.pass_view(A, PROFILES, SCOPES, -1),
    "now past 2^53": lambda s: s.pass_view(A, PROFILES, SCOPES, 2**53),
}
BAD_WRITES = {
    "owner empty": lambda s: s.pass_write("", [], NOW, lease_ms=LEASE, retention_ms=RETENTION),
    "run of another owner": lambda s: s.pass_write(
        A, [run(owner=B)], NOW, lease_ms=LEASE, retention_ms=RETENTION
    ),
    "a session twice": lambda s: s.pass_write(
        A, [run(), run()], NOW, lease_ms=LEASE, retention_ms=RETENTION
    ),
    "not a run": lambda s: s.pass_write(A, ["s1"], NOW, lease_ms=LEASE, retention_ms=RETENTION),
    "lease zero": lambda s: s.pass_write(A, [], NOW, lease_ms=0, retention_ms=RETENTION),
    "retention negative": lambda s: s.pass_write(A, [], NOW, lease_ms=LEASE, retention_ms=-1),
}


@pytest.mark.parametrize(
    "call",
    [*BAD_VIEWS.values(), *BAD_WRITES.values()],
    ids=[
        *(f"view: {name}" for name in BAD_VIEWS),
        *(f"write: {name}" for name in BAD_WRITES),
    ],
)
async def test_bad_input_is_refused_and_nothing_changes(store: RelayStore, call: Any) -> None:
    """Each bad view or write argument is an `InvalidInputError`, and the rows and floor stay."""
    await write(store, A, run("s1"))
    before = (await store.run_states(), await store.revision_floor())
    with pytest.raises(InvalidInputError):
        await call(store)
    assert (await store.run_states(), await store.revision_floor()) == before
