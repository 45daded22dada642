"""This replica's row in the fleet: made once, then brought up to date for each write.

The row goes out whole with every pass's write (`pass_write`), so the store learns the last pass
and the backoff without a call of its own; `keep_alive` renews its times between passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from relay.publishing.loop import LoopHealth
from relay.store.fleet import FleetMember, this_process


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else max(math.floor(seconds * 1000), 0)


@dataclass(frozen=True, slots=True)
class FleetRow:
    """The row of the service in this process (`owner`), built for `schema_head`."""

    base: FleetMember

    @classmethod
    def started(cls, owner: str, now_ms: int, until: int) -> FleetRow:
        # The code's schema head is a constant of the SQL schema; memory and JSON stores use it
        # too (a fleet row says what code runs, whatever the backend).
        from relay.store.sql.schema import HEAD_REVISION

        return cls(this_process(owner, HEAD_REVISION, now_ms, until))

    def at(self, now_ms: int, until: int, health: LoopHealth | None = None) -> FleetMember:
        """The row now: seen at `now_ms`, live until `until`, with the loop's last pass and its
        backoff (the failure's class name only)."""
        row = self.base.seen(now_ms, until)
        if health is None:
            return row
        backing_off = health.backoff_until is not None
        return replace(
            row,
            pass_at=_ms(health.last_pass),
            pass_outcome=health.last_outcome,
            backoff_until=_ms(health.backoff_until),
            backoff_class=(health.last_failure or "")[:64] or None if backing_off else None,
        )
