"""This replica's row in the fleet: recorded when it starts, sent whole with every pass's write
(`pass_write`: no call of its own), renewed by `keep_alive`, no longer live once it stops."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from relay.errors import RelayError, StoreError
from relay.logfields import of_error
from relay.publishing.clock import StoreClock
from relay.publishing.leases import Leases
from relay.publishing.logs import Reporter
from relay.publishing.loop import LoopHealth, PassLoop, PassRecord
from relay.store import fleet_passes
from relay.store.contract import Fleet
from relay.store.fleet import CLASS_LIMIT, FleetMember, this_process


def _ms(seconds: float | None, offset: float = 0.0) -> int | None:
    """Unix seconds of this host's wall clock, `offset` ahead of the store's, as the store's ms."""
    return None if seconds is None else max(math.floor((seconds - offset) * 1000), 0)


@dataclass(frozen=True, slots=True)
class FleetRow:
    """The row of the service in this process (`owner`), built for `schema_head`."""

    base: FleetMember

    @classmethod
    def started(cls, owner: str, now_ms: int, until: int) -> FleetRow:
        # The code's schema head is a constant of the SQL schema; memory and JSON stores use it
        # too (a fleet row says what code runs, whatever the backend).
        from relay.store.migrations import HEAD

        return cls(this_process(owner, HEAD, now_ms, until))

    def at(
        self,
        now_ms: int,
        until: int,
        health: LoopHealth | None = None,
        *,
        offset_s: float | None = None,
        recent: Sequence[PassRecord] = (),
    ) -> FleetMember:
        """The row now: seen at `now_ms`, live until `until`, with the loop's last pass and
        backoff, the clock offset `offset_s` and the last hour of `recent` (oldest first) as its
        ring, moved by the offset from this host's wall clock onto the store's."""
        row = self.base.seen(now_ms, until)
        offset = offset_s or 0.0
        row = replace(row, clock_offset_ms=None if offset_s is None else round(offset_s * 1000))
        if health is None:
            return row
        # `RelayHttpError 503`: the failure's class, and the relay's HTTP status when it answered
        # (never a message: the row is read by every replica's page).
        named = health.last_failure or ""
        if health.last_failure_status is not None:
            named = f"{named[: CLASS_LIMIT - 4]} {health.last_failure_status}"
        pass_at = _ms(health.last_pass, offset)
        passes = []
        # Only the passes of the ring's hour are looked at (at most a few hundred).
        for one in reversed(recent):
            at = _ms(one.at, offset) or 0
            if pass_at is None or at < pass_at - fleet_passes.SLOTS * fleet_passes.SLOT_MS:
                break
            passes.append(
                fleet_passes.Pass(at, one.outcome == "ok", _ms(one.backoff_until, offset))
            )
        return replace(
            row,
            pass_at=pass_at,
            pass_outcome=health.last_outcome,
            backoff_until=_ms(health.backoff_until, offset),
            backoff_class=None if health.backoff_until is None else named[:CLASS_LIMIT] or None,
            passes="" if pass_at is None else fleet_passes.encode(passes, pass_at),
        )


@dataclass(eq=False)
class Membership:
    """This replica in the fleet, for its publisher: `record` once started, `member` for each
    write, `leave` when stopped. A failure never stops publishing: each write carries the row."""

    store: Fleet
    leases: Leases
    time: StoreClock
    loop: PassLoop
    report: Reporter
    _row: FleetRow | None = field(default=None, init=False)

    def inherit(self, previous: Membership) -> None:
        """A swapped-in publisher keeps the row started when the service did."""
        self._row = previous._row or self._row

    async def record(self) -> None:
        now_ms = self.leases.now_ms()
        until = now_ms + self.leases.lease_ms
        self._row = FleetRow.started(self.leases.owner, now_ms, until)
        try:
            await self.store.record_member(self._row.at(now_ms, until, offset_s=self.time.offset_s))
        except RelayError as error:
            self.report.warning(
                f"[relay] could not record this replica in the fleet ({error}); its next pass will",
                of_error("fleet_unrecorded", error),
            )

    def member(self, now_ms: int, until: int | None = None) -> FleetMember | None:
        """The row now (`FleetRow.at`); None before `record`."""
        if self._row is None:
            return None
        return self._row.at(
            now_ms,
            now_ms + self.leases.lease_ms if until is None else until,
            self.loop.health(),
            offset_s=self.time.offset_s,
            recent=self.loop.recent(),
        )

    async def failed(self, error: BaseException) -> None:
        """A pass failed and its backoff begins: the row goes out now, so every replica's page
        shows it backing off while it waits, not once the wait is over. Not when the store is
        what failed (the write would only wait out its timeout again; the next pass's write
        carries the row), and a failure of this write is not told either."""
        member = self.member(self.leases.now_ms())
        if member is None or isinstance(error, StoreError):
            return
        with contextlib.suppress(RelayError):
            await self.store.record_member(member)

    async def leave(self) -> None:
        """Stopped: the row stops counting as live now (kept a day for `status`)."""
        now_ms = self.leases.now_ms()
        member = self.member(now_ms, until=now_ms)
        if member is not None:
            with contextlib.suppress(RelayError):  # it stops counting when its lease ends anyway
                await self.store.record_member(member)
