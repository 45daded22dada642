"""The `RelayStore` contract, run unchanged on every backend (memory, json, sqlite, postgres).

Each test states one rule of a method's docstring in `relay/store/contract.py` (or of issue 2, which
defines the semantics) and proves it through the public methods only. Times are fixed
milliseconds; nothing sleeps. What one store shows another open on the same URL, or a reopened
one, holds on the real backends only: each open of `memory://` is a new store (`PERSISTENT`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from backends import REAL, on
from key_support import ed25519_pem
from ledger_calls import mark_sent
from store_support import (
    IDENTITY_RE,
    KEY_ID,
    NOW,
    PUBLISHER,
    RELAY,
    SECOND,
    grant,
    make_config,
    saved_config,
)

from relay.errors import CorruptStateError, InvalidInputError, StaleConfigError
from relay.store import (
    DeletedScope,
    DeletedView,
    PresenceLease,
    ProfileGrant,
    RelayStore,
    StartedEntry,
    StartedScope,
    open_store,
    resolve,
)

DAY = 24 * 60 * 60 * SECOND


IDENTITY_A = "pfi_" + "a" * 32
IDENTITY_B = "pfi_" + "b" * 32
SCOPE = DeletedScope(url=RELAY, publisher_id=PUBLISHER, profile_id="prf_alpha")
OTHER_SCOPE = DeletedScope(url="https://other.example", publisher_id=PUBLISHER, profile_id="prf_x")

LEASE = 90 * SECOND
FENCE = 15 * 60 * SECOND
MAX_TABS = 256


# Reopening a store, or opening it twice: only a store kept outside the process can.
PERSISTENT = on(*REAL)


# ── helpers ───────────────────────────────────────────────────────────────────


async def entries(store: RelayStore, profile_id: str) -> list[tuple[str, int, bool]]:
    """The (session, started_at, sent) entries of one scope, in ledger order."""
    for scope in await store.started_ledger():
        if scope.profile_id == profile_id:
            return [(e.session_id, e.started_at, e.sent) for e in scope.entries]
    raise AssertionError(f"scope {profile_id} is not tracked")


async def floor_of(store: RelayStore, profile_id: str) -> int:
    scopes = {scope.profile_id: scope.floor for scope in await store.started_ledger()}
    return scopes[profile_id]


def claimed(items: list[StartedEntry]) -> list[tuple[str, str | None, int | None]]:
    return [(e.session_id, e.claimed_by, e.claimed_until) for e in items]


async def three_started(store: RelayStore, profile_id: str = "prf_a") -> None:
    """A tracked scope (floor NOW) with unsent s1, s2, s3 recorded out of order."""
    await store.track_started([profile_id], NOW)
    await store.record_started_scopes(
        {profile_id: [("s3", NOW + 3), ("s1", NOW + 1), ("s2", NOW + 2)]}, NOW + 10
    )


async def enqueue(
    store: RelayStore,
    session_id: str,
    now_ms: int,
    *,
    profile: str = "alpha",
    live: bool = False,
    identity: str | None = None,
    scope: DeletedScope | None = None,
) -> DeletedView:
    return await store.enqueue_deleted(
        session_id, profile, now_ms, session_live=live, identity=identity, scope=scope
    )


async def pending_by_session(store: RelayStore) -> dict[tuple[str, str], DeletedView]:
    return {(view.session_id, view.profile): view for view in await store.pending_deleted()}


async def presence(
    store: RelayStore,
    tab_id: str,
    seq: int,
    now_ms: int,
    *,
    active: bool = True,
    profile: str = "alpha",
    max_tabs: int = MAX_TABS,
) -> bool:
    return await store.apply_presence(
        profile, tab_id, seq, active, now_ms, lease_ms=LEASE, fence_ms=FENCE, max_tabs=max_tabs
    )


async def leases(store: RelayStore) -> list[tuple[str, str, int, bool]]:
    """(profile, tab, seq, active) of every stored lease, in the store's order."""
    return [(p.profile, p.tab_id, p.seq, p.active) for p in await store.presence_leases()]


async def snapshot(store: RelayStore, key_ref: str | None = None) -> dict[str, Any]:
    """Everything readable from the store (identities of the seeded profile only)."""
    config = await store.load_config()
    return {
        "config": config,
        "generation": None if config is None else config.generation,
        "key": None if key_ref is None else await store.load_key(key_ref),
        "identity": await store.profile_identity("alpha"),
        "floor": await store.revision_floor(),
        "ledger": await store.started_ledger(),
        "deleted": await store.pending_deleted(),
        "presence": await store.presence_leases(),
    }


async def seed(store: RelayStore) -> str:
    """Write something through every kind of method; return the saved key's reference."""
    config = await saved_config(store, ("alpha", "beta"))
    await store.profile_identity("alpha")
    await store.allocate_revisions(3, NOW)
    await store.track_started(["prf_alpha"], NOW)
    await store.record_started_scopes({"prf_alpha": [("s1", NOW + 1), ("s2", NOW + 2)]}, NOW + 5)
    await store.claim_started_scopes(["prf_alpha"], "owner-a", NOW + 6, 30 * SECOND, limit=1)
    await mark_sent(store, "prf_alpha", "s2")
    await enqueue(store, "gone-1", NOW + 7)
    await enqueue(store, "gone-2", NOW + 8, identity=IDENTITY_A, scope=SCOPE)
    await presence(store, "tab-0001", 1, NOW + 9)
    await presence(store, "tab-0002", 4, NOW + 10, active=False)
    return config.key_ref


# ── the handle ────────────────────────────────────────────────────────────────


async def test_display_url_is_the_url_it_was_opened_with(store: RelayStore, store_url: str) -> None:
    """`display_url` is the opened URL in its canonical form, which is what messages name."""
    assert store.display_url == resolve(store_url).display


async def test_clock_ms_is_the_servers_clock_or_none(store: RelayStore) -> None:
    """Postgres answers its server's clock (this machine's here: within 5 s of it, and moving
    on); a store on this host's clock answers None."""
    first = await store.clock_ms()
    if store.backend_name != "postgres":
        assert first is None
        return
    assert first is not None
    assert abs(first - time.time() * 1000) < 5000
    second = await store.clock_ms()
    assert second is not None
    assert second >= first


# ── config ────────────────────────────────────────────────────────────────────


async def test_config_absent_is_none(store: RelayStore) -> None:
    """A fresh store has no registration."""
    assert await store.load_config() is None


async def test_config_round_trip(store: RelayStore) -> None:
    """A saved config loads back equal, profiles sorted by name."""
    config = await saved_config(store, ("gamma", "alpha", "beta"))
    loaded = await store.load_config()
    assert loaded == config
    assert loaded is not None
    assert list(loaded.profiles) == ["alpha", "beta", "gamma"]
    assert loaded.profiles["beta"] == grant("beta")


async def test_config_profiles_replaced_wholesale(store: RelayStore) -> None:
    """Saving a config replaces the whole profile map: a profile it omits is gone."""
    first = await saved_config(store, ("alpha", "beta"))
    second = dataclasses.replace(first, profiles={"beta": grant("beta"), "gamma": grant("gamma")})
    await store.save_config(second)
    loaded = await store.load_config()
    assert loaded == second
    assert loaded is not None
    assert set(loaded.profiles) == {"beta", "gamma"}


async def test_config_generation_changes_on_every_save(store: RelayStore) -> None:
    """Each save gives the stored registration a new generation, even when nothing else changed."""
    config = await saved_config(store)
    generations = []
    for _ in range(3):
        loaded = await store.load_config()
        assert loaded is not None
        generations.append(loaded.generation)
        await store.save_config(config)
    assert len(set(generations)) == 3


async def test_config_load_is_stable_between_saves(store: RelayStore) -> None:
    """Loading does not change the generation; only saving does."""
    await saved_config(store)
    first = await store.load_config()
    second = await store.load_config()
    assert first is not None
    assert second is not None
    assert first.generation == second.generation


async def test_config_with_unsaved_key_is_refused(store: RelayStore) -> None:
    """A config whose key_ref was never returned by save_key is refused and nothing is stored."""
    with pytest.raises(InvalidInputError):
        await store.save_config(make_config("never-saved-key-ref"))
    assert await store.load_config() is None


INVALID_CONFIGS = {
    "empty-profiles": lambda c: dataclasses.replace(c, profiles={}),
    "url-not-http": lambda c: dataclasses.replace(c, url="ftp://relay.example"),
    "url-with-path": lambda c: dataclasses.replace(c, url="https://relay.example/api"),
    "url-not-url": lambda c: dataclasses.replace(c, url="not a url"),
    "publisher-not-origin": lambda c: dataclasses.replace(c, publisher_id="hermes"),
    "empty-key-id": lambda c: dataclasses.replace(c, key_id=""),
    "unsaved-key-ref": lambda c: dataclasses.replace(c, key_ref="never-saved-key-ref"),
    "grant-empty-identity": lambda c: dataclasses.replace(
        c, profiles={"alpha": ProfileGrant(identity="", profile_id="prf_alpha")}
    ),
    "grant-empty-profile-id": lambda c: dataclasses.replace(
        c, profiles={"alpha": ProfileGrant(identity=IDENTITY_A, profile_id="")}
    ),
    "empty-profile-name": lambda c: dataclasses.replace(c, profiles={"": grant("alpha")}),
}


@pytest.mark.parametrize("mutation", INVALID_CONFIGS.values(), ids=INVALID_CONFIGS.keys())
async def test_invalid_config_is_refused_and_stored_one_kept(
    store: RelayStore, mutation: Any
) -> None:
    """An invalid config raises InvalidInputError and the stored registration stays as it was."""
    config = await saved_config(store, ("alpha", "beta"))
    before = await store.load_config()
    assert before is not None
    with pytest.raises(InvalidInputError):
        await store.save_config(mutation(config))
    after = await store.load_config()
    assert after == config
    assert after is not None
    assert after.generation == before.generation


# ── keys ──────────────────────────────────────────────────────────────────────


async def test_key_round_trip(store: RelayStore) -> None:
    """save_key returns a non-empty reference under which load_key returns the same PEM."""
    pem = ed25519_pem()
    ref = await store.save_key(KEY_ID, pem)
    assert isinstance(ref, str)
    assert ref
    assert await store.load_key(ref) == pem


async def test_keys_do_not_collide(store: RelayStore) -> None:
    """Two keys saved under different ids keep different references and their own PEMs."""
    first, second = ed25519_pem(), ed25519_pem()
    first_ref = await store.save_key("key-1", first)
    second_ref = await store.save_key("key-2", second)
    assert first_ref != second_ref
    assert await store.load_key(first_ref) == first
    assert await store.load_key(second_ref) == second


@PERSISTENT
async def test_key_survives_reopen(store_url: str) -> None:
    """A saved key can be loaded by a store opened after the saving one closed."""
    pem = ed25519_pem()
    async with open_store(store_url) as first:
        ref = await first.save_key(KEY_ID, pem)
    async with open_store(store_url) as second:
        assert await second.load_key(ref) == pem


async def test_unknown_key_ref_is_corrupt_state(store: RelayStore) -> None:
    """Loading a reference nothing was saved under raises CorruptStateError."""
    await store.save_key(KEY_ID, ed25519_pem())
    with pytest.raises(CorruptStateError):
        await store.load_key("never-saved-key-ref")


# ── profile identities ────────────────────────────────────────────────────────


async def test_identity_format_and_stable(store: RelayStore) -> None:
    """profile_identity mints a pfi_<32 hex> once and returns the same value afterwards."""
    identity = await store.profile_identity("alpha")
    assert IDENTITY_RE.fullmatch(identity)
    assert await store.profile_identity("alpha") == identity


async def test_identity_differs_per_profile(store: RelayStore) -> None:
    """Different profiles get different identities."""
    assert await store.profile_identity("alpha") != await store.profile_identity("beta")


@PERSISTENT
async def test_identity_survives_reopen(store_url: str) -> None:
    """A minted identity is returned unchanged by a store opened after the minting one closed."""
    async with open_store(store_url) as first:
        identity = await first.profile_identity("alpha")
    async with open_store(store_url) as second:
        assert await second.profile_identity("alpha") == identity


@PERSISTENT
async def test_identity_shared_between_open_stores(store: RelayStore, store_url: str) -> None:
    """A second store open on the same URL sees the identity the first one minted."""
    identity = await store.profile_identity("alpha")
    async with open_store(store_url) as other:
        assert await other.profile_identity("alpha") == identity


async def test_forget_identity_mints_new_one(store: RelayStore) -> None:
    """After forget_profile_identity the profile gets a new identity; other profiles keep theirs."""
    alpha = await store.profile_identity("alpha")
    beta = await store.profile_identity("beta")
    await store.forget_profile_identity("alpha")
    renewed = await store.profile_identity("alpha")
    assert IDENTITY_RE.fullmatch(renewed)
    assert renewed != alpha
    assert await store.profile_identity("beta") == beta


async def test_forget_identity_without_one_is_noop(store: RelayStore) -> None:
    """Forgetting a profile that never had an identity succeeds and mints nothing for others."""
    beta = await store.profile_identity("beta")
    await store.forget_profile_identity("alpha")
    assert await store.profile_identity("beta") == beta


# ── revisions ─────────────────────────────────────────────────────────────────


async def test_revision_floor_starts_at_zero(store: RelayStore) -> None:
    """A fresh store has handed out no revision."""
    assert await store.revision_floor() == 0


async def test_allocate_starts_at_now(store: RelayStore) -> None:
    """Fresh: the first revision is now, the rest follow by one, and the floor is the last."""
    assert await store.allocate_revisions(3, NOW) == [NOW, NOW + 1, NOW + 2]
    assert await store.revision_floor() == NOW + 2


async def test_allocate_jumps_to_now_when_clock_is_ahead(store: RelayStore) -> None:
    """When now is above the floor the next batch starts at now."""
    await store.allocate_revisions(2, NOW)
    assert await store.allocate_revisions(2, NOW + 1000) == [NOW + 1000, NOW + 1001]
    assert await store.revision_floor() == NOW + 1001


async def test_allocate_continues_from_floor_when_floor_is_ahead(store: RelayStore) -> None:
    """When the floor is at or above now the next batch starts at floor + 1."""
    await store.allocate_revisions(5, NOW + 1000)
    assert await store.allocate_revisions(3, NOW) == [NOW + 1005, NOW + 1006, NOW + 1007]
    assert await store.allocate_revisions(1, NOW + 1007) == [NOW + 1008]
    assert await store.revision_floor() == NOW + 1008


async def test_allocate_from_time_zero(store: RelayStore) -> None:
    """With now = 0 and no floor the first revision is floor + 1 = 1."""
    assert await store.allocate_revisions(2, 0) == [1, 2]


async def test_allocate_zero_is_empty(store: RelayStore) -> None:
    """Allocating zero revisions returns [] and leaves the floor alone."""
    await store.allocate_revisions(2, NOW)
    assert await store.allocate_revisions(0, NOW + 50) == []
    assert await store.revision_floor() == NOW + 1


async def test_allocate_negative_count_is_refused(store: RelayStore) -> None:
    """A negative count raises InvalidInputError and the floor does not move."""
    await store.allocate_revisions(1, NOW)
    with pytest.raises(InvalidInputError):
        await store.allocate_revisions(-1, NOW + 10)
    assert await store.revision_floor() == NOW


@PERSISTENT
async def test_allocate_survives_reopen(store_url: str) -> None:
    """The floor is durable: a reopened store continues above every revision handed out."""
    async with open_store(store_url) as first:
        assert await first.allocate_revisions(3, NOW + 500) == [NOW + 500, NOW + 501, NOW + 502]
    async with open_store(store_url) as second:
        assert await second.revision_floor() == NOW + 502
        assert await second.allocate_revisions(1, NOW) == [NOW + 503]


@PERSISTENT
async def test_allocate_shared_between_open_stores(store: RelayStore, store_url: str) -> None:
    """Two stores open on one URL draw from one counter."""
    async with open_store(store_url) as other:
        first = await store.allocate_revisions(2, NOW)
        second = await other.allocate_revisions(2, NOW)
        third = await store.allocate_revisions(1, NOW)
    assert first + second + third == [NOW, NOW + 1, NOW + 2, NOW + 3, NOW + 4]


# ── started ledger ────────────────────────────────────────────────────────────


async def test_started_ledger_empty(store: RelayStore) -> None:
    """A fresh store tracks no scope."""
    assert await store.started_ledger() == []


async def test_track_started_sets_floor_once(store: RelayStore) -> None:
    """track_started gives a floor of now only to scopes that have none."""
    await store.track_started(["prf_b", "prf_a"], NOW)
    await store.track_started(["prf_a", "prf_c"], NOW + 5)
    assert await store.started_ledger() == [
        StartedScope("prf_a", NOW),
        StartedScope("prf_b", NOW),
        StartedScope("prf_c", NOW + 5),
    ]


async def test_track_started_keeps_entries(store: RelayStore) -> None:
    """Tracking an already tracked scope again leaves its floor and entries alone."""
    await store.track_started(["prf_a"], NOW)
    await store.record_started_scopes({"prf_a": [("s1", NOW + 1)]}, NOW + 1)
    await store.track_started(["prf_a"], NOW + 100)
    assert await floor_of(store, "prf_a") == NOW
    assert await entries(store, "prf_a") == [("s1", NOW + 1, False)]


async def test_record_started_adds_unsent_entries(store: RelayStore) -> None:
    """Recorded sessions are stored unsent and unclaimed, oldest first."""
    await three_started(store)
    ledger = await store.started_ledger()
    assert ledger == [
        StartedScope(
            "prf_a",
            NOW,
            (
                StartedEntry("prf_a", "s1", NOW + 1),
                StartedEntry("prf_a", "s2", NOW + 2),
                StartedEntry("prf_a", "s3", NOW + 3),
            ),
        )
    ]


async def test_record_started_tracks_untracked_scope_first(store: RelayStore) -> None:
    """Recording an untracked scope gives it floor = now first, so earlier sessions are dropped."""
    await store.record_started_scopes(
        {"prf_new": [("before", NOW - 1), ("at", NOW), ("after", NOW + 1)]}, NOW
    )
    assert await floor_of(store, "prf_new") == NOW
    assert await entries(store, "prf_new") == [("at", NOW, False), ("after", NOW + 1, False)]


async def test_record_started_ignores_sessions_before_floor(store: RelayStore) -> None:
    """Sessions started before the scope's floor are never recorded."""
    await store.track_started(["prf_a"], NOW)
    await store.record_started_scopes({"prf_a": [("old", NOW - 1), ("edge", NOW)]}, NOW + 1000)
    assert await entries(store, "prf_a") == [("edge", NOW, False)]


async def test_record_started_ignores_sessions_outside_window(store: RelayStore) -> None:
    """Sessions started more than 24 h before now are never recorded, even above the floor."""
    await store.track_started(["prf_a"], NOW)
    now = NOW + 2 * DAY
    seen = [("stale", now - DAY - 1), ("edge", now - DAY), ("fresh", now)]
    await store.record_started_scopes({"prf_a": seen}, now)
    assert await entries(store, "prf_a") == [("edge", now - DAY, False), ("fresh", now, False)]


async def test_record_started_prunes_as_time_moves(store: RelayStore) -> None:
    """Entries older than now - 24 h are pruned by a later record, sent or not."""
    await store.track_started(["prf_a"], NOW)
    await store.record_started_scopes(
        {"prf_a": [("early", NOW + 1), ("sent", NOW + 2), ("late", NOW + DAY)]}, NOW + DAY
    )
    await mark_sent(store, "prf_a", "sent")
    await store.record_started_scopes({"prf_a": []}, NOW + DAY + 3)
    assert await entries(store, "prf_a") == [("late", NOW + DAY, False)]
    assert await floor_of(store, "prf_a") == NOW


async def test_record_started_skips_invalid_sightings(store: RelayStore) -> None:
    """Ids are trimmed; empty or >191-char ids and unsafe times are skipped; first sighting wins."""
    await store.track_started(["prf_a"], NOW)
    seen: list[tuple[Any, Any]] = [
        ("x" * 191, NOW),
        ("y" * 192, NOW),
        ("", NOW),
        ("   ", NOW),
        ("  padded\t", NOW + 1),
        ("dup", NOW + 2),
        ("dup", NOW + 3),
        (" " + "z" * 191 + " ", NOW + 4),
        ("unsafe", 2**53),
        ("fraction", NOW + 0.5),
        ("flag", True),
        ("text", str(NOW + 5)),
        ("missing", None),
    ]
    await store.record_started_scopes({"prf_a": seen}, NOW)
    assert await entries(store, "prf_a") == [
        ("x" * 191, NOW, False),
        ("padded", NOW + 1, False),
        ("dup", NOW + 2, False),
        ("z" * 191, NOW + 4, False),
    ]


async def test_record_started_never_duplicates(store: RelayStore) -> None:
    """Recording a known session again keeps its original started_at and sent flag."""
    await store.track_started(["prf_a"], NOW)
    await store.record_started_scopes({"prf_a": [("s1", NOW + 1), ("s2", NOW + 2)]}, NOW + 2)
    await mark_sent(store, "prf_a", "s1")
    await store.record_started_scopes(
        {"prf_a": [("s1", NOW + 5), ("s2", NOW + 6), (" s2 ", NOW + 7)]}, NOW + 10
    )
    assert await entries(store, "prf_a") == [("s1", NOW + 1, True), ("s2", NOW + 2, False)]


async def test_record_started_keeps_claim(store: RelayStore) -> None:
    """Recording a claimed session again does not release its claim."""
    await three_started(store)
    await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 20, 1000)
    await store.record_started_scopes({"prf_a": [("s1", NOW + 1)]}, NOW + 30)
    assert await store.claim_started_scopes(["prf_a"], "owner-b", NOW + 40, 1000) == []


async def test_started_ledger_ordering(store: RelayStore) -> None:
    """The ledger lists scopes by profile id and each scope's entries oldest first."""
    await store.track_started(["prf_b", "prf_a"], NOW)
    await store.record_started_scopes({"prf_b": [("b2", NOW + 2), ("b1", NOW + 1)]}, NOW + 3)
    await store.record_started_scopes(
        {"prf_a": [("a3", NOW + 3), ("a1", NOW + 1), ("a2", NOW + 2)]}, NOW + 3
    )
    ledger = await store.started_ledger()
    assert [scope.profile_id for scope in ledger] == ["prf_a", "prf_b"]
    assert [e.session_id for e in ledger[0].entries] == ["a1", "a2", "a3"]
    assert [e.session_id for e in ledger[1].entries] == ["b1", "b2"]
    assert all(e.profile_id == scope.profile_id for scope in ledger for e in scope.entries)


async def test_claim_started_oldest_first_with_lease(store: RelayStore) -> None:
    """A claim returns the unsent entries oldest first, leased to the owner until now + lease."""
    await three_started(store)
    until = NOW + 20 + 1000
    got = await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 20, 1000)
    assert claimed(got) == [
        ("s1", "owner-a", until),
        ("s2", "owner-a", until),
        ("s3", "owner-a", until),
    ]
    assert [(e.profile_id, e.started_at, e.sent) for e in got] == [
        ("prf_a", NOW + 1, False),
        ("prf_a", NOW + 2, False),
        ("prf_a", NOW + 3, False),
    ]
    (scope,) = await store.started_ledger()
    assert claimed(list(scope.entries)) == claimed(got)


async def test_claim_started_blocks_other_owner_until_lease_ends(store: RelayStore) -> None:
    """Another owner gets nothing while the lease holds and everything once claimed_until <= now."""
    await three_started(store)
    await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 20, 1000)
    assert await store.claim_started_scopes(["prf_a"], "owner-b", NOW + 1019, 1000) == []
    got = await store.claim_started_scopes(["prf_a"], "owner-b", NOW + 1020, 1000)
    assert claimed(got) == [(s, "owner-b", NOW + 2020) for s in ("s1", "s2", "s3")]
    assert await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 1021, 1000) == []


async def test_claim_started_owner_reclaims_its_own(store: RelayStore) -> None:
    """The owner of a live lease can claim its entries again, extending the lease."""
    await three_started(store)
    await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 20, 1000)
    got = await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 30, 1000)
    assert claimed(got) == [(s, "owner-a", NOW + 1030) for s in ("s1", "s2", "s3")]


async def test_claim_started_limit(store: RelayStore) -> None:
    """A limit claims only the oldest entries; the rest stay claimable by another owner."""
    await three_started(store)
    assert [
        e.session_id
        for e in await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 20, 1000, limit=2)
    ] == [
        "s1",
        "s2",
    ]
    assert [
        e.session_id for e in await store.claim_started_scopes(["prf_a"], "owner-b", NOW + 20, 1000)
    ] == ["s3"]
    assert await store.claim_started_scopes(["prf_a"], "owner-c", NOW + 20, 1000) == []


async def test_claim_started_skips_sent_entries(store: RelayStore) -> None:
    """Sent entries are never claimed, even after their lease ended."""
    await three_started(store)
    await mark_sent(store, "prf_a", "s1")
    got = await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 20, 1000)
    assert [e.session_id for e in got] == ["s2", "s3"]
    await mark_sent(store, "prf_a", "s2")
    later = await store.claim_started_scopes(["prf_a"], "owner-b", NOW + 5000, 1000)
    assert [e.session_id for e in later] == ["s3"]


async def test_claim_started_is_per_scope(store: RelayStore) -> None:
    """A claim only returns entries of its own scope; an unknown scope gives nothing."""
    await three_started(store, "prf_a")
    await store.track_started(["prf_b"], NOW)
    await store.record_started_scopes({"prf_b": [("b1", NOW + 1)]}, NOW + 10)
    got = await store.claim_started_scopes(["prf_b"], "owner-a", NOW + 20, 1000)
    assert [(e.profile_id, e.session_id) for e in got] == [("prf_b", "b1")]
    assert await store.claim_started_scopes(["prf_unknown"], "owner-a", NOW + 20, 1000) == []


async def test_marks_set_sent(store: RelayStore) -> None:
    """A claim's `sent` marks set sent on that one entry only."""
    await three_started(store)
    await mark_sent(store, "prf_a", "s2")
    assert await entries(store, "prf_a") == [
        ("s1", NOW + 1, False),
        ("s2", NOW + 2, True),
        ("s3", NOW + 3, False),
    ]


async def test_a_mark_of_a_missing_entry_is_a_noop(store: RelayStore) -> None:
    """Marking an entry that is not (or no longer) in the ledger changes nothing."""
    await three_started(store)
    before = await store.started_ledger()
    await mark_sent(store, "prf_a", "pruned-meanwhile")
    await mark_sent(store, "prf_unknown", "s1")
    assert await store.started_ledger() == before


async def test_record_started_scopes_records_each_scope(store: RelayStore) -> None:
    """Several scopes at once: each as one scope alone would be, a new one tracked at now."""
    await store.track_started(["prf_a"], NOW)
    await store.record_started_scopes({"prf_a": [("early", NOW + 1)]}, NOW + 1)
    now = NOW + DAY + 2
    await store.record_started_scopes(
        {
            "prf_a": [("late", now), ("stale", now - DAY - 1), ("", now)],
            "prf_new": [("before", now - 1), ("at", now), ("at", now + 1)],
        },
        now,
    )
    assert await entries(store, "prf_a") == [("late", now, False)]
    assert await floor_of(store, "prf_a") == NOW
    assert await entries(store, "prf_new") == [("at", now, False)]
    assert await floor_of(store, "prf_new") == now


async def test_record_started_scopes_keeps_sent_and_claims(store: RelayStore) -> None:
    """Recording known sessions again in several scopes changes none of them."""
    await three_started(store, "prf_a")
    await three_started(store, "prf_b")
    await mark_sent(store, "prf_a", "s1")
    await store.claim_started_scopes(["prf_b"], "owner-a", NOW + 20, 1000)
    before = await store.started_ledger()
    again = [("s1", NOW + 5), ("s2", NOW + 6)]
    await store.record_started_scopes({"prf_a": again, "prf_b": again}, NOW + 30)
    assert await store.started_ledger() == before


async def test_claim_started_scopes_goes_scope_by_scope_in_the_order_listed(
    store: RelayStore,
) -> None:
    """One claim over several scopes takes them in the order listed, each oldest first, up to
    the limit; an unlisted scope is left alone and an unknown one gives nothing."""
    for scope in ("prf_a", "prf_b", "prf_c"):
        await three_started(store, scope)
    got = await store.claim_started_scopes(
        ["prf_b", "prf_unknown", "prf_a"], "owner-a", NOW + 20, 1000, limit=4
    )
    assert [(e.profile_id, e.session_id) for e in got] == [
        ("prf_b", "s1"),
        ("prf_b", "s2"),
        ("prf_b", "s3"),
        ("prf_a", "s1"),
    ]
    assert {(e.claimed_by, e.claimed_until) for e in got} == {("owner-a", NOW + 1020)}
    rest = await store.claim_started_scopes(["prf_a", "prf_b"], "owner-b", NOW + 20, 1000)
    assert [(e.profile_id, e.session_id) for e in rest] == [("prf_a", "s2"), ("prf_a", "s3")]
    (scope_c,) = [scope for scope in await store.started_ledger() if scope.profile_id == "prf_c"]
    assert all(e.claimed_by is None for e in scope_c.entries)


async def test_claim_started_scopes_leases_each_entry_of_its_own_scope(store: RelayStore) -> None:
    """A session id in two scopes is two entries: another owner's lease on one does not keep the
    other from a claim, nor does a claim of one take the other over."""
    await three_started(store, "prf_a")
    await three_started(store, "prf_b")
    await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 20, 1000, limit=1)
    got = await store.claim_started_scopes(["prf_a", "prf_b"], "owner-b", NOW + 30, 1000, limit=3)
    assert [(e.profile_id, e.session_id) for e in got] == [
        ("prf_a", "s2"),
        ("prf_a", "s3"),
        ("prf_b", "s1"),
    ]
    (scope_a, _) = await store.started_ledger()
    assert claimed(list(scope_a.entries))[0] == ("s1", "owner-a", NOW + 1020)
    # The owner renews its own claims; once the lease ended, another owner takes them over.
    mine = await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 40, 1000)
    assert claimed(mine) == [("s1", "owner-a", NOW + 1040)]
    taken = await store.claim_started_scopes(["prf_a"], "owner-b", NOW + 1040, 1000)
    assert claimed(taken) == [(s, "owner-b", NOW + 2040) for s in ("s1", "s2", "s3")]


async def test_claim_started_scopes_marks_sent_then_claims(store: RelayStore) -> None:
    """The pairs in `sent` are marked sent (and unclaimed) before the claim, so it skips them;
    a pair of an unknown entry changes nothing."""
    await three_started(store, "prf_a")
    await three_started(store, "prf_b")
    first = await store.claim_started_scopes(["prf_a", "prf_b"], "owner-a", NOW + 20, 1000, 2)
    assert [(e.profile_id, e.session_id) for e in first] == [("prf_a", "s1"), ("prf_a", "s2")]
    sent = [("prf_a", "s1"), ("prf_a", "s2"), ("prf_b", "gone")]
    got = await store.claim_started_scopes(
        ["prf_a", "prf_b"], "owner-a", NOW + 30, 1000, 2, sent=sent
    )
    assert [(e.profile_id, e.session_id) for e in got] == [("prf_a", "s3"), ("prf_b", "s1")]
    assert await entries(store, "prf_a") == [
        ("s1", NOW + 1, True),
        ("s2", NOW + 2, True),
        ("s3", NOW + 3, False),
    ]
    (scope_a, _) = await store.started_ledger()
    assert claimed(list(scope_a.entries))[:2] == [("s1", None, None), ("s2", None, None)]


async def test_claim_started_scopes_without_scopes_only_marks(store: RelayStore) -> None:
    """With no scope listed the call marks its pairs sent and claims nothing."""
    await three_started(store, "prf_a")
    await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 20, 1000)
    got = await store.claim_started_scopes([], "owner-b", NOW + 30, 1000, sent=[("prf_a", "s2")])
    assert got == []
    (scope,) = await store.started_ledger()
    assert claimed(list(scope.entries)) == [
        ("s1", "owner-a", NOW + 1020),
        ("s2", None, None),
        ("s3", "owner-a", NOW + 1020),
    ]
    assert [e.sent for e in scope.entries] == [False, True, False]


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.record_started_scopes([("prf_a", [("s1", NOW)])], NOW),
        lambda s: s.record_started_scopes({"": [("s1", NOW)]}, NOW),
        lambda s: s.record_started_scopes({"prf_a": [("s1", NOW)]}, -1),
        lambda s: s.claim_started_scopes("prf_a", "owner-a", NOW, 1000),
        lambda s: s.claim_started_scopes(["prf_a"], "", NOW, 1000),
        lambda s: s.claim_started_scopes(["prf_a"], "owner-a", NOW, 1000, 0),
        lambda s: s.claim_started_scopes(["prf_a"], "owner-a", NOW, 1000, sent=["s1"]),
        lambda s: s.claim_started_scopes([], "owner-a", NOW, 1000, sent=[("prf_a", "")]),
    ],
    ids=[
        "record-not-mapping",
        "record-empty-scope",
        "record-negative-now",
        "claim-scopes-text",
        "claim-empty-owner",
        "claim-zero-limit",
        "claim-sent-not-pairs",
        "claim-sent-empty-session",
    ],
)
async def test_started_scopes_calls_refuse_bad_input(store: RelayStore, call: Any) -> None:
    """A malformed argument is an InvalidInputError and changes nothing."""
    await three_started(store)
    await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 20, 1000, limit=1)
    before = await store.started_ledger()
    with pytest.raises(InvalidInputError):
        await call(store)
    assert await store.started_ledger() == before


# ── deleted outbox ────────────────────────────────────────────────────────────


async def test_enqueue_deleted_returns_view(store: RelayStore) -> None:
    """enqueue_deleted returns the queued entry with a non-empty id and through = now."""
    view = await enqueue(store, "gone", NOW, identity=IDENTITY_A, scope=SCOPE)
    assert view.id
    assert (view.session_id, view.profile, view.through) == ("gone", "alpha", NOW)
    assert (view.identity, view.scope) == (IDENTITY_A, SCOPE)
    assert await store.pending_deleted() == [view]


async def test_enqueue_deleted_again_keeps_entry(store: RelayStore) -> None:
    """Re-queuing a dead session keeps the entry's id, through, identity and scope."""
    first = await enqueue(store, "gone", NOW)
    again = await enqueue(store, "gone", NOW + 50, identity=IDENTITY_A, scope=SCOPE)
    assert again == first
    assert await store.pending_deleted() == [first]


async def test_enqueue_deleted_live_raises_through(store: RelayStore) -> None:
    """A live re-queue raises through to now and keeps the id, identity and scope."""
    first = await enqueue(store, "gone", NOW, identity=IDENTITY_A, scope=SCOPE)
    again = await enqueue(
        store, "gone", NOW + 50, live=True, identity=IDENTITY_B, scope=OTHER_SCOPE
    )
    assert again == dataclasses.replace(first, through=NOW + 50)
    assert await store.pending_deleted() == [again]


async def test_enqueue_deleted_never_lowers_through(store: RelayStore) -> None:
    """A live re-queue with an earlier clock leaves through where it was."""
    first = await enqueue(store, "gone", NOW + 50)
    again = await enqueue(store, "gone", NOW, live=True)
    assert again == first
    assert await store.pending_deleted() == [first]


async def test_enqueue_deleted_per_profile(store: RelayStore) -> None:
    """The same session under another profile is a separate entry."""
    alpha = await enqueue(store, "gone", NOW)
    beta = await enqueue(store, "gone", NOW + 1, profile="beta")
    assert alpha.id != beta.id
    assert await store.pending_deleted() == [alpha, beta]


async def test_pending_deleted_ordered_by_through(store: RelayStore) -> None:
    """pending_deleted lists entries oldest through first, whatever the queuing order."""
    await enqueue(store, "s-30", NOW + 30)
    await enqueue(store, "s-10", NOW + 10)
    await enqueue(store, "s-20", NOW + 20)
    await enqueue(store, "s-10", NOW + 40, live=True)
    assert [v.session_id for v in await store.pending_deleted()] == ["s-20", "s-30", "s-10"]


async def test_bind_deleted_binds_matching_unscoped_entries(store: RelayStore) -> None:
    """bind_deleted binds the profile's unscoped entries of no or this identity and counts them."""
    unbound = await enqueue(store, "s-none", NOW)
    same = await enqueue(store, "s-same", NOW + 1, identity=IDENTITY_A)
    other = await enqueue(store, "s-other", NOW + 2, identity=IDENTITY_B)
    bound = await enqueue(store, "s-bound", NOW + 3, identity=IDENTITY_A, scope=OTHER_SCOPE)
    beta = await enqueue(store, "s-beta", NOW + 4, profile="beta")
    assert await store.bind_deleted("alpha", IDENTITY_A, SCOPE) == 2
    assert await store.pending_deleted() == [
        dataclasses.replace(unbound, identity=IDENTITY_A, scope=SCOPE),
        dataclasses.replace(same, scope=SCOPE),
        other,
        bound,
        beta,
    ]


async def test_bind_deleted_never_rebinds(store: RelayStore) -> None:
    """An entry bound once keeps its scope when bound again to another scope."""
    await enqueue(store, "s-none", NOW)
    assert await store.bind_deleted("alpha", IDENTITY_A, SCOPE) == 1
    before = await store.pending_deleted()
    assert await store.bind_deleted("alpha", IDENTITY_A, OTHER_SCOPE) == 0
    assert await store.bind_deleted("alpha", IDENTITY_B, OTHER_SCOPE) == 0
    assert await store.pending_deleted() == before


async def test_bind_deleted_with_nothing_to_bind(store: RelayStore) -> None:
    """Binding a profile with no entries returns 0."""
    await enqueue(store, "s-beta", NOW, profile="beta")
    assert await store.bind_deleted("alpha", IDENTITY_A, SCOPE) == 0


async def test_ack_deleted_removes_matching_entry(store: RelayStore) -> None:
    """An ack with the entry's id and through removes that entry only and returns True."""
    first = await enqueue(store, "gone-1", NOW)
    second = await enqueue(store, "gone-2", NOW + 1)
    assert await store.ack_deleted(first.id, first.through) is True
    assert await store.pending_deleted() == [second]


async def test_ack_deleted_twice_or_unknown_is_false(store: RelayStore) -> None:
    """Acking an entry already removed, or an id never queued, returns False."""
    view = await enqueue(store, "gone", NOW)
    assert await store.ack_deleted(view.id, view.through) is True
    assert await store.ack_deleted(view.id, view.through) is False
    assert await store.ack_deleted("no-such-view", NOW) is False


async def test_ack_deleted_with_stale_through_keeps_entry(store: RelayStore) -> None:
    """After a live re-queue raised through, an ack of the old through removes nothing."""
    first = await enqueue(store, "gone", NOW)
    raised = await enqueue(store, "gone", NOW + 50, live=True)
    assert await store.ack_deleted(first.id, first.through) is False
    assert await store.pending_deleted() == [raised]
    assert await store.ack_deleted(raised.id, raised.through) is True
    assert await store.pending_deleted() == []


async def test_enqueue_after_ack_queues_again(store: RelayStore) -> None:
    """Once acknowledged, a session deleted again is queued as a new entry."""
    first = await enqueue(store, "gone", NOW)
    await store.ack_deleted(first.id, first.through)
    again = await enqueue(store, "gone", NOW + 100)
    assert again.through == NOW + 100
    assert await store.pending_deleted() == [again]


# ── presence leases ───────────────────────────────────────────────────────────


async def test_presence_apply_and_query(store: RelayStore) -> None:
    """An applied active update makes the profile present until its lease ends."""
    assert await store.presence_active("alpha", NOW) is False
    assert await presence(store, "tab-0001", 1, NOW) is True
    assert await store.presence_leases() == [
        PresenceLease("alpha", "tab-0001", 1, True, expires_at=NOW + LEASE, updated_at=NOW)
    ]
    assert await store.presence_active("alpha", NOW) is True
    assert await store.presence_active("alpha", NOW + LEASE - 1) is True
    assert await store.presence_active("alpha", NOW + LEASE + 1) is False


async def test_presence_higher_seq_renews(store: RelayStore) -> None:
    """A higher seq is applied and renews the lease from its own now."""
    await presence(store, "tab-0001", 1, NOW)
    assert await presence(store, "tab-0001", 5, NOW + 60 * SECOND) is True
    assert await store.presence_leases() == [
        PresenceLease(
            "alpha",
            "tab-0001",
            5,
            True,
            expires_at=NOW + 60 * SECOND + LEASE,
            updated_at=NOW + 60 * SECOND,
        )
    ]
    assert await store.presence_active("alpha", NOW + LEASE + 1) is True


async def test_presence_equal_or_lower_seq_ignored(store: RelayStore) -> None:
    """An update whose seq is not above the stored one returns False and changes nothing."""
    await presence(store, "tab-0001", 5, NOW)
    before = await store.presence_leases()
    assert await presence(store, "tab-0001", 5, NOW + 10, active=False) is False
    assert await presence(store, "tab-0001", 4, NOW + 20, active=False) is False
    assert await presence(store, "tab-0001", 0, NOW + 30) is False
    assert await store.presence_leases() == before
    assert await store.presence_active("alpha", NOW + 30) is True


async def test_presence_revoke_keeps_tombstone(store: RelayStore) -> None:
    """A revoke ends presence and its tombstone stops a later lower-seq renew from reviving it."""
    await presence(store, "tab-0001", 1, NOW)
    assert await presence(store, "tab-0001", 3, NOW + 1, active=False) is True
    assert await store.presence_active("alpha", NOW + 1) is False
    assert await presence(store, "tab-0001", 2, NOW + 2) is False
    assert await store.presence_active("alpha", NOW + 2) is False
    assert await leases(store) == [("alpha", "tab-0001", 3, False)]
    assert await presence(store, "tab-0001", 4, NOW + 3) is True
    assert await store.presence_active("alpha", NOW + 3) is True


async def test_presence_fenced_until_forgotten(store: RelayStore) -> None:
    """An expired entry fences lower seqs until expires + fence; after that a low seq applies."""
    await presence(store, "tab-0001", 5, NOW)
    assert await presence(store, "tab-0001", 1, NOW + LEASE + 1) is False
    assert await presence(store, "tab-0001", 1, NOW + LEASE + FENCE - 1) is False
    later = NOW + LEASE + FENCE + 1
    assert await presence(store, "tab-0001", 1, later) is True
    assert await store.presence_leases() == [
        PresenceLease("alpha", "tab-0001", 1, True, expires_at=later + LEASE, updated_at=later)
    ]
    assert await store.presence_active("alpha", later) is True


async def test_presence_evicts_least_recently_updated(store: RelayStore) -> None:
    """Past max_tabs entries the least recently updated one is evicted (and forgotten)."""
    assert await presence(store, "tab-000A", 1, NOW, max_tabs=2) is True
    assert await presence(store, "tab-000B", 1, NOW + 1, max_tabs=2) is True
    assert await presence(store, "tab-000A", 2, NOW + 2, max_tabs=2) is True
    assert await presence(store, "tab-000C", 1, NOW + 3, max_tabs=2) is True
    assert [tab for _, tab, _, _ in await leases(store)] == ["tab-000C", "tab-000A"]
    assert await presence(store, "tab-000B", 1, NOW + 4, max_tabs=2) is True
    assert [tab for _, tab, _, _ in await leases(store)] == ["tab-000B", "tab-000C"]


async def test_presence_is_per_profile(store: RelayStore) -> None:
    """One profile's lease does not make another profile present, and any active tab suffices."""
    await presence(store, "tab-0001", 1, NOW, profile="alpha")
    await presence(store, "tab-0002", 1, NOW, profile="alpha", active=False)
    await presence(store, "tab-0003", 1, NOW, profile="beta", active=False)
    assert await store.presence_active("alpha", NOW + 1) is True
    assert await store.presence_active("beta", NOW + 1) is False
    assert await store.presence_active("gamma", NOW + 1) is False


async def test_presence_same_tab_per_profile(store: RelayStore) -> None:
    """The same tab id under two profiles is two entries with their own seqs."""
    assert await presence(store, "tab-0001", 5, NOW, profile="alpha") is True
    assert await presence(store, "tab-0001", 1, NOW + 1, profile="beta") is True
    assert sorted(await leases(store)) == [
        ("alpha", "tab-0001", 5, True),
        ("beta", "tab-0001", 1, True),
    ]


async def test_presence_leases_most_recent_first(store: RelayStore) -> None:
    """presence_leases lists every entry, expired or not, most recently updated first."""
    await presence(store, "tab-000A", 1, NOW)
    await presence(store, "tab-000B", 1, NOW + 2, profile="beta")
    await presence(store, "tab-000C", 1, NOW + 1, active=False)
    assert [(p.tab_id, p.updated_at) for p in await store.presence_leases()] == [
        ("tab-000B", NOW + 2),
        ("tab-000C", NOW + 1),
        ("tab-000A", NOW),
    ]


# ── durability ────────────────────────────────────────────────────────────────


@PERSISTENT
async def test_every_write_survives_reopen(store_url: str) -> None:
    """Everything written is read back unchanged by a store opened after the writer closed."""
    async with open_store(store_url) as first:
        key_ref = await seed(first)
        before = await snapshot(first, key_ref)
    async with open_store(store_url) as second:
        assert await snapshot(second, key_ref) == before
        assert (await second.allocate_revisions(1, NOW))[0] == before["floor"] + 1


@PERSISTENT
async def test_writes_visible_to_other_open_store(store: RelayStore, store_url: str) -> None:
    """A second store open on the same URL reads what the first one wrote, and vice versa."""
    key_ref = await seed(store)
    async with open_store(store_url) as other:
        assert await snapshot(other, key_ref) == await snapshot(store, key_ref)
        await mark_sent(other, "prf_alpha", "s1")
        oldest = (await other.pending_deleted())[0]
        assert await other.ack_deleted(oldest.id, oldest.through) is True
    assert await entries(store, "prf_alpha") == [("s1", NOW + 1, True), ("s2", NOW + 2, True)]
    assert [v.session_id for v in await store.pending_deleted()] == ["gone-2"]


# ── save_config with an expected generation ───────────────────────────────────


async def test_save_config_expecting_none_stored_refuses_an_existing_one(store: RelayStore) -> None:
    """`expected_generation=0` saves only where no registration is stored yet."""
    first = await saved_config(store)
    second = make_config(first.key_ref, ("alpha", "beta"))
    with pytest.raises(StaleConfigError):
        await store.save_config(second, expected_generation=0)
    assert await store.load_config() == first


async def test_save_config_saves_over_the_generation_it_read(store: RelayStore) -> None:
    """A save expecting the stored generation succeeds; one expecting an older one does nothing."""
    first = await saved_config(store)
    read = await store.load_config()
    assert read is not None
    updated = make_config(first.key_ref, ("alpha", "beta"))
    await store.save_config(updated, expected_generation=read.generation)
    with pytest.raises(StaleConfigError):
        await store.save_config(first, expected_generation=read.generation)
    assert await store.load_config() == updated
