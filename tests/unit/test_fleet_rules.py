"""The fleet's rules on its document: rows from newer releases are read, corrupt ones named,
dead ones forgotten after a day."""

from __future__ import annotations

import pytest

from relay.errors import CorruptStateError, InvalidInputError
from relay.store.fleet import FORGET_MS, FleetMember
from relay.store.rules import fleet

NOW = 1_800_000_000_000


def member(owner: str = "web/0123456789ab", seen: int = NOW) -> FleetMember:
    return FleetMember(owner, "1.0.0", "0007", "node-a", 42, seen - 5_000, seen, seen + 20_000)


def test_a_row_from_a_newer_release_is_read() -> None:
    """Fields this code does not know are left out, not rejected."""
    rows = {"web/0123456789ab": {**member().document(), "zone": "eu-west", "weight": 3}}
    assert fleet.members(rows) == [member()]


def test_a_corrupt_row_is_named() -> None:
    """A row that is not a member is a CorruptStateError naming its owner."""
    for bad in ({"owner": "x"}, "text", {**member("x").document(), "pid": -1}):
        with pytest.raises(CorruptStateError, match="fleet row 'x'"):
            fleet.members({"x": bad})


def test_recording_forgets_rows_unseen_for_a_day_and_keeps_unreadable_ones() -> None:
    """A row last seen more than FORGET_MS before a recording goes; one without a time stays."""
    old = member("old/0123456789ab", seen=NOW - FORGET_MS - 1)
    recent = member("recent/0123456789ab", seen=NOW - FORGET_MS + 1)
    rows = {m.owner: m.document() for m in (old, recent)} | {"odd": {"seen_at": "x"}}
    fleet.record(rows, member())
    assert sorted(rows) == ["odd", "recent/0123456789ab", "web/0123456789ab"]


def test_renew_moves_seen_and_live_until() -> None:
    """Renewing a row moves its times; renewing a missing owner changes nothing."""
    rows = {"web/0123456789ab": member().document()}
    fleet.renew(rows, "web/0123456789ab", NOW + 1_000, NOW + 21_000)
    fleet.renew(rows, "gone/0123456789ab", NOW, NOW)
    (found,) = fleet.members(rows)
    assert (found.seen_at, found.live_until, found.live(NOW + 20_999)) == (
        NOW + 1_000,
        NOW + 21_000,
        True,
    )


def test_a_member_checks_itself() -> None:
    """An owner past 64 characters or a negative pid is refused when the record is made."""
    with pytest.raises(InvalidInputError, match="owner"):
        member("x" * 65)
    with pytest.raises(InvalidInputError, match="pid"):
        FleetMember("w/1", "1", "0007", "h", -1, 0, 0, 0)
