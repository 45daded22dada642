"""A clock that stands still until told to move, for tests and the bench."""

from __future__ import annotations

from dataclasses import dataclass

# A fixed instant (2027-01-15 08:00 UTC): runs that start here produce the same revisions and
# timestamps every time.
START = 1_800_000_000.0


@dataclass
class Clock:
    """Unix seconds that move only when the caller says; pass it as `clock=` to `MemoryHost`,
    `DevRelay` and `RelayService`."""

    now: float = START

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
