"""The run-state contract as plain Python, from the docstrings of `RunStates` and issue 15.

Written apart from `relay.store.rules.runs` (which the memory and JSON stores run): a session's
row holds its newest turn; a turn that ended stays ended; a live turn its owner stops listing
ends `failed`, as does a live turn whose owner's lease ran out (taken over); a finished row is
forgotten after the retention, but its turn is remembered a day, and no turn that is not newer
than the newest one the store accepted is ever stored again. Issue 33: a takeover's `failed` of a
live turn is corrected once by the same turn from the very owner it was taken from, when that one
says a different phase.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from relay.store import RunState, StartedEntry
from relay.store.requests import TURN_MEMORY_MS

Turn = tuple[int, str]


def turn_of(run: RunState) -> Turn:
    return (run.started_at, run.stream_id or "")


@dataclass
class RunModel:
    rows: dict[str, RunState] = field(default_factory=dict)
    # The turn of a pruned row, and when it was pruned, by session.
    remembered: dict[str, tuple[Turn, int]] = field(default_factory=dict)

    def _takes(self, run: RunState) -> bool:
        row = self.rows.get(run.session_id)
        if row is None:
            kept = self.remembered.get(run.session_id)
            return kept is None or turn_of(run) > kept[0]
        if turn_of(run) != turn_of(row):
            return turn_of(run) > turn_of(row)
        if row.terminal and row.taken_from == run.owner and row.phase != run.phase:
            return True  # the truth from the replica the turn was taken from, back
        return not row.terminal

    def save(self, run: RunState, until: int) -> bool:
        if not self._takes(run):
            return False
        row = self.rows.get(run.session_id)
        stored = replace(run, lease_until=until, sending_by=None, sending_until=0)
        if row is not None:  # whoever sends the row goes on sending it
            stored = replace(stored, sending_by=row.sending_by, sending_until=row.sending_until)
        self.rows[run.session_id] = stored
        return True

    def sync(
        self, owner: str, live: list[RunState], now: int, lease: int, retention: int
    ) -> list[RunState]:
        until = now + lease
        was_live = {s for s, r in self.rows.items() if r.owner == owner and not r.terminal}
        confirmed = {run.session_id for run in live if self.save(replace(run, owner=owner), until)}
        for sid in was_live - confirmed:
            row = self.rows[sid]
            if row.owner == owner and not row.terminal:
                self.rows[sid] = replace(row, phase="failed", updated_at=now, lease_until=until)
        for sid, row in self.rows.items():
            if row.owner == owner:
                self.rows[sid] = replace(row, lease_until=max(row.lease_until, until))
            elif row.lease_until <= now:
                ended = (
                    row
                    if row.terminal
                    else replace(row, phase="failed", updated_at=now, taken_from=row.owner)
                )
                self.rows[sid] = replace(ended, owner=owner, lease_until=until)
        for sid, row in list(self.rows.items()):
            if row.terminal and row.updated_at < max(now - retention, 0):
                kept = self.remembered.get(sid)
                if kept is None or kept[0] <= turn_of(row):
                    self.remembered[sid] = (turn_of(row), now)
                del self.rows[sid]
        horizon = max(now - max(TURN_MEMORY_MS, retention), 0)
        self.remembered = {s: k for s, k in self.remembered.items() if k[1] >= horizon}
        for sid, row in self.rows.items():
            if row.owner == owner and not row.sent_elsewhere(owner, now):
                self.rows[sid] = replace(row, sending_by=owner, sending_until=until)
        mine = [row for row in self.rows.values() if row.owner == owner]
        return sorted(mine, key=lambda row: (row.started_at, row.session_id))

    def release(self, owner: str) -> None:
        for sid, row in self.rows.items():
            if row.sending_by == owner:
                self.rows[sid] = replace(row, sending_by=None, sending_until=0)

    def keep_alive(
        self,
        owner: str,
        now: int,
        lease: int,
        started: Iterable[StartedEntry],
        claims: Iterable[tuple[str, int]],
    ) -> int | None:
        for sid, row in self.rows.items():
            if row.owner == owner:
                self.rows[sid] = replace(row, lease_until=max(row.lease_until, now + lease))
        ends = [r.lease_until for r in self.rows.values() if r.owner != owner]
        ends += [
            e.claimed_until
            for e in started
            if not e.sent and e.claimed_until is not None and e.claimed_by not in (None, owner)
        ]
        ends += [until for holder, until in claims if holder != owner]
        # Leases that ended within the last lease are still due (`Claim.watched_since`).
        return min((end for end in ends if end > now - lease), default=None)

    def states(self) -> list[RunState]:
        return [self.rows[sid] for sid in sorted(self.rows)]
