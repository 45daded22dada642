"""`identities()` and `merge_state()`: how state copied from another store is folded in."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from relay.errors import InvalidInputError
from relay.store import (
    DeletedScope,
    DeletedView,
    PresenceLease,
    RelayStore,
    StartedEntry,
    StartedScope,
    StateBatch,
)

NOW = 1_800_000_000_000
IDENTITY = "pfi_" + "1" * 32
OTHER = "pfi_" + "2" * 32
SCOPE = DeletedScope("https://relay.example", "https://hermes.example", "prf_a")


async def snapshot(store: RelayStore) -> tuple[object, ...]:
    return (
        await store.identities(),
        await store.revision_floor(),
        await store.started_ledger(),
        await store.pending_deleted(),
        await store.presence_leases(),
    )


async def test_identities_lists_without_minting(store: RelayStore) -> None:
    """`identities()` returns what was minted and mints nothing itself."""
    assert await store.identities() == {}
    minted = await store.profile_identity("default")
    assert await store.identities() == {"default": minted}


async def test_merge_adds_identities_but_never_replaces_one(store: RelayStore) -> None:
    """A profile without an identity takes the copied one; one that has an identity keeps it."""
    mine = await store.profile_identity("default")
    await store.merge_state(StateBatch(identities={"default": IDENTITY, "work": OTHER}))
    assert await store.identities() == {"default": mine, "work": OTHER}


async def test_merge_keeps_the_larger_revision_floor(store: RelayStore) -> None:
    """The floor ends at the larger of both, so no revision is ever handed out twice."""
    await store.allocate_revisions(1, NOW)
    await store.merge_state(StateBatch(revision_floor=NOW - 5))
    assert await store.revision_floor() == NOW
    await store.merge_state(StateBatch(revision_floor=NOW + 5))
    assert await store.revision_floor() == NOW + 5


async def test_merge_unions_the_ledger_and_keeps_sent_entries_sent(store: RelayStore) -> None:
    """Scopes keep the lower floor; entries are unioned; sent stays sent; claims stay behind."""
    await store.track_started(["prf_a"], NOW + 10)
    await store.record_started_scopes({"prf_a": [("mine", NOW + 20), ("both", NOW + 30)]}, NOW + 40)
    incoming = StartedScope(
        "prf_a",
        NOW,
        (
            StartedEntry("prf_a", "both", NOW + 30, sent=True),
            StartedEntry("prf_a", "theirs", NOW + 35, claimed_by="x", claimed_until=NOW + 99),
        ),
    )
    await store.merge_state(StateBatch(started=(incoming,)))
    (scope,) = await store.started_ledger()
    assert scope.floor == NOW
    assert [(e.session_id, e.sent, e.claimed_by) for e in scope.entries] == [
        ("mine", False, None),
        ("both", True, None),
        ("theirs", False, None),
    ]


async def test_merge_keeps_deletion_ids_and_bindings(store: RelayStore) -> None:
    """A new deletion keeps its id; a queued one keeps its own id, takes the later `through`."""
    queued = await store.enqueue_deleted(
        "s1", "default", NOW, session_live=False, identity=None, scope=None
    )
    copied = DeletedView("copied-id", "s1", "default", NOW + 5, IDENTITY, SCOPE)
    fresh = DeletedView("fresh-id", "s2", "default", NOW + 1, None, None)
    await store.merge_state(StateBatch(deleted=(copied, fresh)))
    views = {view.session_id: view for view in await store.pending_deleted()}
    assert views["s1"] == DeletedView(queued.id, "s1", "default", NOW + 5, IDENTITY, SCOPE)
    assert views["s2"] == fresh


async def test_merge_takes_the_lease_with_the_higher_sequence(store: RelayStore) -> None:
    """A copied lease replaces a stored one only when its sequence is higher."""
    await store.apply_presence(
        "default", "tab-aaaa", 5, True, NOW, lease_ms=90_000, fence_ms=900_000, max_tabs=256
    )
    older = PresenceLease("default", "tab-aaaa", 4, False, NOW + 1, NOW + 1)
    other = PresenceLease("work", "tab-bbbb", 1, True, NOW + 90_000, NOW)
    await store.merge_state(StateBatch(presence=(older, other)))
    leases = {(lease.profile, lease.seq) for lease in await store.presence_leases()}
    assert leases == {("default", 5), ("work", 1)}


async def test_merging_the_same_batch_twice_changes_nothing(store: RelayStore) -> None:
    """Merging is idempotent, so an interrupted import can simply run again."""
    batch = StateBatch(
        identities={"default": IDENTITY},
        revision_floor=NOW,
        started=(StartedScope("prf_a", NOW, (StartedEntry("prf_a", "s1", NOW + 1),)),),
        deleted=(DeletedView("d1", "s9", "default", NOW, None, None),),
        presence=(PresenceLease("default", "tab-aaaa", 1, True, NOW + 90_000, NOW),),
    )
    await store.merge_state(batch)
    once = await snapshot(store)
    await store.merge_state(batch)
    assert await snapshot(store) == once


@pytest.mark.parametrize(
    "make_batch",
    [
        lambda: StateBatch(identities={"default": "bogus"}),
        lambda: StateBatch(revision_floor=-1),
        lambda: StateBatch(
            started=(StartedScope("prf_a", NOW, (StartedEntry("prf_b", "s", NOW),)),)
        ),
        lambda: StateBatch(
            started=(StartedScope("prf_a", NOW, (StartedEntry("prf_a", "x" * 192, NOW),)),)
        ),
        lambda: StateBatch(deleted=(DeletedView("", "s", "default", NOW),)),
        lambda: StateBatch(presence=(PresenceLease("default", "t" * 65, 1, True, NOW, NOW),)),
    ],
)
async def test_an_invalid_batch_changes_nothing(
    store: RelayStore, make_batch: Callable[[], StateBatch]
) -> None:
    """A batch with any invalid record cannot even be built, so nothing is written."""
    await store.profile_identity("default")
    before = await snapshot(store)
    with pytest.raises(InvalidInputError):
        await store.merge_state(make_batch())
    assert await snapshot(store) == before
