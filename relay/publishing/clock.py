"""One time base for every replica: the store's clock, as this replica reads it (docs/clock.md).

Instants one replica writes and another compares (lease and claim ends, takeovers, the started
ledger, presence, the viewed `through`) are on the store's clock, read with each pass's one read
and carried forward on this host's monotonic clock, so a wall clock stepped meanwhile changes
nothing; SQLite, JSON and memory stores live on this host and use its wall clock. The offset
(this wall clock minus the store's) is logged once past 1 s (WARNING) and half the lease (ERROR).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from relay import metrics
from relay.logfields import fields
from relay.publishing.logs import Reporter

# The offsets that are reported: above 1 s (a broken time sync), above half a lease (where wall
# clocks would have made leases lie), and the one a relay's 401 is likely about.
WARN_S = 1.0
SIGNATURE_NOTE_S = 60.0
# How fast two good clocks drift apart at most (100 ppm): what an older reading loses per second.
_DRIFT = 1e-4


def ticks() -> float:
    """Seconds on a clock nobody sets that counts a suspend (CLOCK_BOOTTIME, else monotonic)."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


@dataclass(frozen=True, slots=True)
class Reading:
    """The store's time `store_ms` at `at` (`ticks`), to within `error_ms`; and the offset then:
    this replica's wall clock minus the store's, in seconds."""

    store_ms: int
    at: float
    error_ms: float
    offset_s: float

    def now_ms(self, now: float) -> float:
        return self.store_ms + (now - self.at) * 1000


@dataclass(eq=False)
class StoreClock:
    """This replica's reading of the store's clock; `wall` until a store reports one.
    `follow=False` keeps `wall` as the time base even on Postgres (a test moving it by hand)."""

    wall: Callable[[], float] = time.time
    _: KW_ONLY
    lease_s: float
    report: Reporter
    ticks: Callable[[], float] = ticks
    follow: bool = True
    # Whether a store was read for its clock yet (whether or not it keeps one).
    asked: bool = field(default=False, init=False)
    _reading: Reading | None = field(default=None, init=False)
    _latest: int = field(default=0, init=False)
    _level: int = field(default=0, init=False)  # 0: within WARN_S, 1: above it, 2: above half
    _gauge: metrics.Gauge = field(default_factory=lambda: metrics.Gauge("clock_offset"), init=False)

    @property
    def offset_s(self) -> float | None:
        """This replica's wall clock minus the store's, in seconds, as last read; None until a
        store that keeps its own clock (Postgres) has reported it."""
        return None if self._reading is None else self._reading.offset_s

    def time(self) -> float:
        """Now, in Unix seconds of the store's clock."""
        return self.now_ms() / 1000

    def now_ms(self) -> int:
        """Now, in Unix milliseconds of the store's clock; on it, never earlier than before."""
        if self._reading is None:
            return math.floor(self.wall() * 1000)
        # A newer reading may put the store's time a few ms behind what an older one said: time
        # then stands still until it catches up. A takeover pass scheduled for the end of a lease
        # must not find itself before that end (and the lease no longer reported as to come).
        self._latest = max(math.floor(self._reading.now_ms(self.ticks())), self._latest)
        return self._latest

    def read(self, sent: float, received: float, store_ms: int | None) -> None:
        """A store read sent at `sent` and answered at `received` (`ticks`) said its clock was
        `store_ms` (None: it has none). The middle of the round trip is taken, to within half of
        it; a reading is kept while it stays more certain than a newer one, unless the newer one
        contradicts it (the store's clock was stepped)."""
        self.asked = True
        if store_ms is None or not self.follow:
            return
        middle = (sent + received) / 2
        wall = self.wall() - (received - middle)
        new = Reading(store_ms, middle, (received - sent) * 500, wall - store_ms / 1000)
        old = self._reading
        if old is not None:
            known = old.error_ms + (middle - old.at) * 1000 * _DRIFT
            apart = abs(old.now_ms(middle) - store_ms)
            if new.error_ms > known and apart <= known + new.error_ms:
                return
        self._reading = new
        self._gauge.set(round(new.offset_s * 1000))
        self._tell(new.offset_s)

    def note(self) -> str:
        """What a refused signature may be about: this replica's offset when it is large."""
        offset = self.offset_s
        if offset is None or abs(offset) < SIGNATURE_NOTE_S:
            return ""
        return f"this server's clock is {_apart(offset)} the store's (the other replicas' time)"

    def _tell(self, offset: float) -> None:
        """Log a change of level once: above 1 s, above half the lease, back within 1 s."""
        size = abs(offset)
        level = 2 if size > self.lease_s / 2 else 1 if size > WARN_S else 0
        if level == self._level:
            return
        previous, self._level = self._level, level
        if level == 2:
            self.report.error(
                f"[relay] This server's clock is {_apart(offset)} the store's, more than half "
                f"the {self.lease_s:g}s lease: replicas compare leases on the store's clock, "
                "but check this server's time sync (NTP)",
                fields("clock_offset_beyond_lease", clock_offset_s=offset),
            )
        elif level == 1 and previous == 0:
            self.report.warning(
                f"[relay] This server's clock is {_apart(offset)} the store's: replicas "
                "compare leases on the store's clock, but check this server's time sync (NTP)",
                fields("clock_offset_large", clock_offset_s=offset),
            )
        elif level == 0:
            self.report.info(
                f"[relay] This server's clock is within {WARN_S:g}s of the store's",
                fields("clock_offset_normal", clock_offset_s=offset),
            )


def offset_text(offset_s: float) -> str:
    """A replica's clock against the store's, as `status` and the operator page say it: `0.4 s
    ahead of the store`, `2.0 s behind the store`, `in step with the store` (within 50 ms)."""
    if abs(offset_s) < 0.05:
        return "in step with the store"
    side = "ahead of" if offset_s > 0 else "behind"
    return f"{abs(offset_s):.1f} s {side} the store"


def _apart(offset: float) -> str:
    # The log's own form ("3.5s ahead of the store's"): its lines keep the words they had.
    direction = "ahead of" if offset > 0 else "behind"
    return f"{abs(offset):.1f}s {direction}"
