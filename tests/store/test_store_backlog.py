"""`RelayStore.backlog()`: the work waiting, counted in the store, on every backend alike."""

from __future__ import annotations

from collections import defaultdict

from relay.store import Backlog, RelayStore, Waiting

NOW = 1_800_000_000_000
LEASE = 20_000


async def expected(store: RelayStore) -> Backlog:
    """The same counts, made from the full reads (`started_ledger`, `pending_deleted`)."""
    unsent: dict[str, list[int]] = defaultdict(list)
    claims: dict[str, list[int]] = defaultdict(list)
    for scope in await store.started_ledger():
        for entry in scope.entries:
            if entry.sent:
                continue
            unsent[scope.profile_id].append(entry.started_at)
            if entry.claimed_by is not None and entry.claimed_until is not None:
                claims[entry.claimed_by].append(entry.claimed_until)
    deleted: dict[str, list[int]] = defaultdict(list)
    for view in await store.pending_deleted():
        deleted[view.profile].append(view.through)
    return Backlog(
        unsent={k: Waiting(len(v), min(v)) for k, v in unsent.items()},
        deleted={k: Waiting(len(v), min(v)) for k, v in deleted.items()},
        claims={k: Waiting(len(v), max(v)) for k, v in claims.items()},
    )


async def test_an_empty_store_has_no_backlog(store: RelayStore) -> None:
    """Nothing recorded: every group is empty."""
    assert await store.backlog() == Backlog()


async def test_the_backlog_counts_what_the_full_reads_hold(store: RelayStore) -> None:
    """Unsent announcements per scope (oldest start), claims per owner (latest end, sent ones
    left out) and deletions per profile (oldest `through`) equal the counts made from
    `started_ledger()` and `pending_deleted()`."""
    await store.track_started(["p1", "p2", "p3"], NOW - 3_600_000)
    seen = {
        "p1": [(f"a{i}", NOW - 60_000 + i) for i in range(5)],
        "p2": [(f"b{i}", NOW - 30_000 + i) for i in range(3)],
        "p3": [("c0", NOW - 10_000)],
    }
    await store.record_started_scopes(seen, NOW)
    claimed = await store.claim_started_scopes(["p1"], "web-1/aaaaaaaaaaaa", NOW, LEASE, 3)
    assert len(claimed) == 3
    await store.claim_started_scopes(["p2"], "web-2/bbbbbbbbbbbb", NOW + 5, LEASE, 1)
    # One of web-1's claimed entries is announced, and all of p3.
    await store.claim_started_scopes(
        [], "web-1/aaaaaaaaaaaa", NOW + 10, LEASE, sent=[("p1", "a0"), ("p3", "c0")]
    )
    for n, profile in enumerate(["default", "default", "work"]):
        await store.enqueue_deleted(
            f"gone-{n}", profile, NOW - 5_000 + n, session_live=False, identity=None, scope=None
        )
    found = await store.backlog()
    assert found == await expected(store)
    assert found.unsent == {"p1": Waiting(4, NOW - 60_000 + 1), "p2": Waiting(3, NOW - 30_000)}
    assert found.claims == {
        "web-1/aaaaaaaaaaaa": Waiting(2, NOW + LEASE),
        "web-2/bbbbbbbbbbbb": Waiting(1, NOW + 5 + LEASE),
    }
    assert found.deleted == {
        "default": Waiting(2, NOW - 5_000),
        "work": Waiting(1, NOW - 5_000 + 2),
    }
