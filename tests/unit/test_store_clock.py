"""A replica's reading of the store's clock: its time base, its offset, and what it logs."""

from __future__ import annotations

import logging

import pytest

from relay.publishing.clock import StoreClock
from relay.publishing.logs import Reporter

pytestmark = pytest.mark.unit

WALL = 1_800_000_000.0


class Clocks:
    """A wall clock and a monotonic one, both moved by the test."""

    def __init__(self) -> None:
        self.wall = WALL
        self.ticks = 50.0
        self.lines: list[str] = []

    def store_clock(self, lease_s: float = 20.0, follow: bool = True) -> StoreClock:
        report = Reporter(self.lines.append, logging.getLogger("test"))
        return StoreClock(
            lambda: self.wall, lease_s=lease_s, report=report, ticks=lambda: self.ticks,
            follow=follow,
        )  # fmt: skip

    def read(self, clock: StoreClock, store_s: float, round_trip_s: float = 0.002) -> None:
        """A read that took `round_trip_s`, the statement running mid-way at `store_s`."""
        sent = self.ticks
        self.ticks += round_trip_s
        self.wall += round_trip_s
        clock.read(sent, self.ticks, round(store_s * 1000))


def test_the_wall_clock_is_the_time_base_until_a_store_reports_its_own() -> None:
    """Before any reading, and on a store without a clock (None), time is the wall clock."""
    clocks = Clocks()
    clock = clocks.store_clock()
    assert clock.now_ms() == WALL * 1000
    clock.read(clocks.ticks, clocks.ticks, None)
    assert clock.offset_s is None
    assert clock.now_ms() == WALL * 1000


def test_time_is_the_stores_carried_forward_on_the_monotonic_clock() -> None:
    """A store 90 s behind this wall clock: time is the store's, and stays so when the wall
    clock is stepped; the offset is this wall clock minus the store's."""
    clocks = Clocks()
    clock = clocks.store_clock()
    clocks.read(clock, WALL - 90 + 0.001)
    assert clock.offset_s == pytest.approx(90, abs=0.002)
    clocks.ticks += 10
    clocks.wall += 10 + 3600  # stepped an hour meanwhile
    assert clock.now_ms() == pytest.approx((WALL - 90 + 10.002) * 1000, abs=2)


def test_the_stores_time_never_goes_back() -> None:
    """A newer, more certain reading 50 ms behind the older one: time stands still until it
    catches up, so nothing scheduled on the older reading finds itself early."""
    clocks = Clocks()
    clock = clocks.store_clock()
    clocks.read(clock, WALL + 0.001, round_trip_s=0.2)
    before = clock.now_ms()
    clocks.read(clock, WALL + 0.1015 - 0.05, round_trip_s=0.001)  # 50 ms behind the first
    assert clock.now_ms() == before
    clocks.ticks += 0.1
    assert clock.now_ms() == pytest.approx(before + 50, abs=2)


def test_a_reading_taken_over_a_slow_round_trip_does_not_replace_a_better_one() -> None:
    """A read that took 2 s is less certain than one of 2 ms a second earlier: it is kept out,
    unless it contradicts the better one (the store's clock was stepped)."""
    clocks = Clocks()
    clock = clocks.store_clock()
    clocks.read(clock, WALL + 0.001)
    clocks.read(clock, WALL + 0.002 + 0.5, round_trip_s=2.0)  # off by 0.5 s: within its error
    assert clock.offset_s == pytest.approx(0, abs=0.002)
    middle = clocks.wall + 1.0
    clocks.read(clock, middle + 120, round_trip_s=2.0)  # two minutes ahead: a step
    assert clock.offset_s == pytest.approx(-120, abs=0.01)


def test_a_large_offset_is_logged_once_per_level() -> None:
    """Above 1 s one WARNING, above half the lease one ERROR, back within 1 s one line; the
    same level read again logs nothing more."""
    clocks = Clocks()
    clock = clocks.store_clock(lease_s=20)
    clocks.read(clock, clocks.wall - 0.2)
    clocks.read(clock, clocks.wall - 3, round_trip_s=1)  # contradicts: taken
    clocks.read(clock, clocks.wall - 3)
    clocks.read(clock, clocks.wall + 12)
    clocks.read(clock, clocks.wall + 12)
    clocks.read(clock, clocks.wall)
    assert clocks.lines == [
        "[relay] This server's clock is 3.5s ahead of the store's: replicas compare leases on the"
        " store's clock, but check this server's time sync (NTP)",
        "[relay] This server's clock is 12.0s behind the store's, more than half the 20s lease:"
        " replicas compare leases on the store's clock, but check this server's time sync (NTP)",
        "[relay] This server's clock is within 1s of the store's",
    ]


def test_a_large_offset_is_noted_on_refused_signatures_and_follow_off_ignores_the_store() -> None:
    """Past 60 s a 401's line names the offset; with `follow=False` the store is not read."""
    clocks = Clocks()
    clock = clocks.store_clock()
    clocks.read(clock, clocks.wall - 30)
    assert clock.note() == ""
    clocks.read(clock, clocks.wall - 240)
    assert "this server's clock is 240.0s ahead of the store's" in clock.note()
    local = clocks.store_clock(follow=False)
    clocks.read(local, clocks.wall - 240)
    assert local.offset_s is None
    assert local.now_ms() == round(clocks.wall * 1000)
