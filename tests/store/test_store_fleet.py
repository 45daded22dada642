"""The contract of the fleet (`record_member`, `fleet`, and the row riding on `keep_alive` and
`pass_write`), on every backend, through the public methods only, at fixed times."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from databases import behind_the_store
from sqlalchemy import text
from store_support import LEASE, NOW, RETENTION, SECOND, A, B

from relay.errors import CorruptStateError, InvalidInputError
from relay.store import RelayStore, open_store
from relay.store.fleet import FORGET_MS, FleetMember
from relay.store.sql import migrate
from relay.store.url import resolve


def member(owner: str = A, seen: int = NOW, **changes: object) -> FleetMember:
    row = FleetMember(
        owner, "1.2.3", "0007", "node-a", 4242, seen - 60 * SECOND, seen, seen + LEASE
    )
    return replace(row, **changes)  # type: ignore[arg-type]


async def test_an_empty_fleet(store: RelayStore) -> None:
    """A store without members lists an empty fleet."""
    assert await store.fleet() == []


async def test_a_recorded_member_is_listed_and_replaced_by_its_next_row(store: RelayStore) -> None:
    """A recorded member is listed by owner, and its next row replaces the first."""
    await store.record_member(member())
    await store.record_member(member(B))
    again = member(seen=NOW + SECOND, pass_at=NOW, pass_outcome="ok")  # noqa: S106
    await store.record_member(again)
    assert await store.fleet() == [again, member(B)]


async def test_keep_alive_renews_the_owners_row(store: RelayStore) -> None:
    """`keep_alive` moves the owner's `seen_at` and `live_until`, and no one else's."""
    await store.record_member(member())
    await store.record_member(member(B))
    await store.keep_alive(A, NOW + 5 * SECOND, LEASE)
    mine, other = await store.fleet()
    assert (mine.seen_at, mine.live_until) == (NOW + 5 * SECOND, NOW + 5 * SECOND + LEASE)
    assert other == member(B)


async def test_a_pass_write_carries_the_whole_row(store: RelayStore) -> None:
    """A pass's write stores the whole fleet row it carries, backoff included."""
    await store.record_member(member())
    row = member(
        seen=NOW + SECOND,
        pass_at=NOW,
        pass_outcome="backoff",  # noqa: S106
        backoff_until=NOW + 30 * SECOND,
        backoff_class="RelayUnreachableError",
    )
    await store.pass_write(A, [], NOW + SECOND, lease_ms=LEASE, retention_ms=RETENTION, member=row)
    assert await store.fleet() == [row]


async def test_a_pass_write_refuses_another_owners_row(store: RelayStore) -> None:
    """A pass's write carrying another owner's fleet row is refused, and nothing is stored."""
    with pytest.raises(InvalidInputError, match="fleet row"):
        await store.pass_write(A, [], NOW, lease_ms=LEASE, retention_ms=RETENTION, member=member(B))
    assert await store.fleet() == []


async def test_rows_unseen_for_a_day_go_when_a_member_records_itself(store: RelayStore) -> None:
    """Rows unseen for `FORGET_MS` are dropped when a member records itself."""
    await store.record_member(member(B, seen=NOW))
    await store.record_member(member("c/0123456789ab", seen=NOW + 1))
    await store.record_member(member(seen=NOW + FORGET_MS + 1))
    assert [found.owner for found in await store.fleet()] == sorted([A, "c/0123456789ab"])


async def test_a_member_is_live_until_its_lease_ends(store: RelayStore) -> None:
    """A member is live until `live_until`, not at it."""
    await store.record_member(member())
    (found,) = await store.fleet()
    assert found.live(NOW + LEASE - 1)
    assert not found.live(NOW + LEASE)


@pytest.mark.backends("sqlite", "postgres", "json")
async def test_a_corrupt_row_is_named_and_never_stops_a_pass(
    store: RelayStore, store_url: str
) -> None:
    """A row that is not a member is a CorruptStateError naming it; the owner's own writes go on
    (its next row replaces it)."""
    await store.record_member(member())
    await store.record_member(member(B))
    if store_url.startswith("json"):
        path = Path(store_url.removeprefix("json://")) / "talaria-relay-fleet.json"
        document = json.loads(path.read_text())
        document["fleet"][B]["pid"] = "many"
        path.write_text(json.dumps(document))
    else:
        await behind_the_store(
            store_url, text(f"UPDATE relay_fleet SET pid = -5 WHERE owner = '{B}'")
        )
    with pytest.raises(CorruptStateError, match=f"fleet row '{B}'"):
        await store.fleet()
    await store.pass_write(A, [], NOW, lease_ms=LEASE, retention_ms=RETENTION, member=member())
    await store.keep_alive(A, NOW + SECOND, LEASE)
    await store.record_member(member(B, seen=NOW + SECOND))
    assert [found.owner for found in await store.fleet()] == [A, B]


@pytest.mark.backends("json")
async def test_a_row_from_a_newer_release_is_read(store: RelayStore, store_url: str) -> None:
    """Fields this code does not know are left out, the row read all the same."""
    await store.record_member(member(B))
    path = Path(store_url.removeprefix("json://")) / "talaria-relay-fleet.json"
    document = json.loads(path.read_text())
    document["fleet"][B]["zone"] = "eu-west"
    path.write_text(json.dumps(document))
    assert await store.fleet() == [member(B)]


async def test_the_clock_offset_and_the_passes_ride_on_every_write(store: RelayStore) -> None:
    """`record_member` and `pass_write` store the offset (either sign) and the passes."""
    first = member(clock_offset_ms=-1234, passes="o.fb")
    await store.record_member(first)
    assert await store.fleet() == [first]
    later = member(seen=NOW + SECOND, pass_at=NOW, clock_offset_ms=15, passes="o" * 60)
    await store.pass_write(
        A, [], NOW + SECOND, lease_ms=LEASE, retention_ms=RETENTION, member=later
    )
    await store.keep_alive(A, NOW + 2 * SECOND, LEASE)
    (found,) = await store.fleet()
    assert (found.clock_offset_ms, found.passes) == (15, "o" * 60)


@pytest.mark.parametrize("passes", ["o" * 61, "ok", "O"])
def test_passes_are_bounded_and_of_four_marks(passes: str) -> None:
    """A passes ring longer than an hour or with marks other than `o`, `f`, `b`, `.` is refused."""
    with pytest.raises(InvalidInputError, match="passes"):
        member(passes=passes)


@pytest.mark.backends("sqlite", "postgres", "json")
async def test_a_row_from_before_0009_reads_without_offset_or_passes(
    store: RelayStore, store_url: str
) -> None:
    """A row an older release wrote (no such fields, NULL columns): no offset, no passes."""
    await store.record_member(member(B, clock_offset_ms=7, passes="o"))
    if store_url.startswith("json"):
        path = Path(store_url.removeprefix("json://")) / "talaria-relay-fleet.json"
        document = json.loads(path.read_text())
        del document["fleet"][B]["clock_offset_ms"], document["fleet"][B]["passes"]
        path.write_text(json.dumps(document))
    else:
        await behind_the_store(
            store_url,
            text(
                f"UPDATE relay_fleet SET clock_offset_ms = NULL, passes = NULL WHERE owner = '{B}'"
            ),
        )
    assert await store.fleet() == [member(B)]


@pytest.mark.backends("sqlite", "postgres", "json")
async def test_corrupt_passes_are_named(store: RelayStore, store_url: str) -> None:
    """A stored passes ring that is not one is a `CorruptStateError` naming row and field."""
    await store.record_member(member(B))
    if store_url.startswith("json"):
        path = Path(store_url.removeprefix("json://")) / "talaria-relay-fleet.json"
        document = json.loads(path.read_text())
        document["fleet"][B]["passes"] = "xyz"
        path.write_text(json.dumps(document))
    else:
        await behind_the_store(
            store_url, text(f"UPDATE relay_fleet SET passes = 'xyz' WHERE owner = '{B}'")
        )
    with pytest.raises(CorruptStateError, match=f"fleet row '{B}'.*passes"):
        await store.fleet()


@pytest.mark.postgres
async def test_a_database_at_0008_gets_rows_without_offset_or_passes(pg_database: str) -> None:
    """During a rollout this code runs on 0008: its rows go in (and out) without the columns."""
    await migrate.upgrade(resolve(pg_database), "0008")
    store = await open_store(pg_database)
    try:
        await store.record_member(member(clock_offset_ms=9, passes="of"))
        row = member(seen=NOW + SECOND, pass_at=NOW, clock_offset_ms=9, passes="o")
        await store.pass_write(
            A, [], NOW + SECOND, lease_ms=LEASE, retention_ms=RETENTION, member=row
        )
        assert await store.fleet() == [replace(row, clock_offset_ms=None, passes="")]
    finally:
        await store.close()
    # To 0009, where the columns come: 0010 is a contract step, refused while that row is live.
    await migrate.upgrade(resolve(pg_database), "0009")
    store = await open_store(pg_database)
    try:
        (found,) = await store.fleet()
        assert (found.clock_offset_ms, found.passes) == (None, "")
    finally:
        await store.close()
