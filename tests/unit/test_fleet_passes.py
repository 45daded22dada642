"""The fleet row's ring of passes: a character a minute over the last hour, ending at `pass_at`."""

from __future__ import annotations

from relay.publishing.fleet import FleetRow
from relay.publishing.loop import LoopHealth, PassRecord
from relay.store.fleet_passes import SLOT_MS, SLOTS, Pass, encode, hour, valid

T = 1_000 * SLOT_MS  # a minute's start


def test_each_minute_keeps_its_worst_pass() -> None:
    """A minute with a failed pass is `f` whatever else it held."""
    ring = encode([Pass(T, True), Pass(T + 1, False), Pass(T + SLOT_MS, True)], T + SLOT_MS)
    assert ring == "fo"


def test_a_backoff_fills_the_minutes_without_a_pass() -> None:
    """Minutes a backoff spans without a pass are `b`."""
    ring = encode(
        [Pass(T, False, T + 3 * SLOT_MS), Pass(T + 3 * SLOT_MS + 5, True)], T + 3 * SLOT_MS
    )
    assert ring == "fbbo"


def test_the_ring_holds_an_hour_at_most_and_nothing_without_a_pass() -> None:
    """The ring keeps the last 60 minutes, none without a pass; bad rings are not valid."""
    passes = [Pass(T + minute * SLOT_MS, True) for minute in range(90)]
    ring = encode(passes, T + 89 * SLOT_MS)
    assert (len(ring), valid(ring)) == (SLOTS, True)
    assert encode(passes, None) == ""
    assert not valid("o" * (SLOTS + 1))
    assert not valid("x")


def test_the_hour_up_to_now_pads_the_minutes_since_the_last_pass() -> None:
    """`hour` pads the minutes since the last pass with `.`, and hides a minute ahead of now."""
    shown = hour("of", T + SLOT_MS, T + 3 * SLOT_MS + 10)
    assert shown == "." * (SLOTS - 4) + "of.."
    assert hour("", None, T) == "." * SLOTS
    # A row ahead of this clock: its latest minute is not shown yet.
    assert hour("of", T + SLOT_MS, T) == "." * (SLOTS - 1) + "o"


def test_the_publishers_row_carries_its_offset_and_ring_on_the_stores_clock() -> None:
    """A publisher's fleet row carries its clock offset and its passes as minutes of the store's
    clock."""
    row = FleetRow.started("w/0123456789ab", T, T + 20_000)
    wall = (T + 2 * SLOT_MS) / 1000 + 2.0  # this host is 2 s ahead of the store
    health = LoopHealth(
        failures=0,
        last_success=wall,
        backoff_until=None,
        last_pass=wall,
        last_outcome="ok",
        last_failure=None,
        last_failure_status=None,
        stopped=False,
    )
    recent = [PassRecord(wall - 2 * 60, "failed", wall - 60), PassRecord(wall, "ok")]
    member = row.at(T + 2 * SLOT_MS, T + 3 * SLOT_MS, health, offset_s=2.0, recent=recent)
    assert (member.clock_offset_ms, member.pass_at, member.passes) == (2000, T + 2 * SLOT_MS, "fbo")
    assert row.at(T, T + 1, offset_s=None).clock_offset_ms is None
