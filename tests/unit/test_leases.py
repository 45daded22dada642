"""The trust window of a lease: measured on the monotonic clock, never on the wall clock."""

from __future__ import annotations

import pytest

from relay.publishing.leases import Leases

pytestmark = pytest.mark.unit


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_lease_is_trusted_for_its_length_minus_a_request() -> None:
    """A 20 s lease asked for at t is trusted until t + 20 s minus the 10 s a send may take
    (half the lease at most), then no longer."""
    ticks = Ticks()
    leases = Leases("web/000000000000", 20_000, lambda: 0.0, ticks)
    asked = leases.asking()
    ticks.now += 9.9
    assert not leases.lapsing(asked)
    ticks.now += 0.2
    assert leases.lapsing(asked)


def test_the_wall_clock_does_not_open_or_shut_the_window() -> None:
    """A wall clock stepped an hour back or ahead changes nothing; a process frozen past the
    lease (the monotonic clock moved on) finds the window shut."""
    wall = [1_800_000_000.0]
    ticks = Ticks()
    leases = Leases("web/000000000000", 4_000, lambda: wall[0], ticks)
    asked = leases.asking()
    wall[0] -= 3600
    assert not leases.lapsing(asked)
    wall[0] += 7200
    assert not leases.lapsing(asked)
    ticks.now += 30
    assert leases.lapsing(asked)
