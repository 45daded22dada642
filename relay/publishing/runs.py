"""This replica's side of run state: the turns it hosts, told to the store every pass (which
decides the rows it publishes), and what the store cannot know: each turn's outcome until
published, and what each hosted turn was last offered as."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from relay.errors import RelayError
from relay.host import ActiveRun, Host
from relay.protocol import REQUEST_TIMEOUT_S, TERMINAL_RETENTION_S
from relay.publishing import states
from relay.publishing.leases import Leases
from relay.publishing.logs import Swallowed
from relay.publishing.states import Terminal
from relay.publishing.storewatch import StoreWatch
from relay.store import RunState
from relay.store.contract import LeaseWatch, Passes, RunStates
from relay.store.fleet import FleetMember
from relay.store.records import PassRows

# How often a replica looks whether another one has finished sending a row it took over.
SENDING_POLL_S = 0.05


class RunStore(RunStates, LeaseWatch, Passes, Protocol):
    """The aggregates this side reads and writes."""


@dataclass(eq=False)
class HostedRuns:
    """The turns this replica hosts, their outcomes, and its leases on their rows."""

    store: RunStore
    host: Host
    leases: Leases
    swallowed: Swallowed
    watch: StoreWatch
    # Outcomes not yet published, by session: kept for the retention, as upstream.
    terminal: dict[str, Terminal] = field(default_factory=dict, init=False)
    # What each hosted session's turn was last offered as: re-offered while its metadata is
    # unreadable, since a live turn left out of a sync ends as failed.
    offered: dict[str, RunState] = field(default_factory=dict, init=False)
    # This replica's fleet row at a time, carried by each pass's write (the publisher's).
    fleet_row: Callable[[int], FleetMember | None] = lambda now_ms: None
    # When the last write asked for the leases on the rows it returned (`Leases.asking`).
    _asked: float = field(default=-math.inf, init=False)

    def inherit(self, previous: HostedRuns) -> None:
        self.terminal.update(previous.terminal)
        self.offered.update(previous.offered)

    def ended(self, run: ActiveRun, phase: str) -> None:
        self.terminal[run.session_id.strip()] = Terminal(run, phase, self.leases.clock())

    async def sync(self) -> PassRows:
        """Tell the others what this replica hosts; the rows it publishes (its own, taken over),
        each with a revision, in the pass's one write. A row taken from a replica still sending
        it waits for that send (a request's time at most), so the relay never gets its older
        turn last; each try allocates revisions anew (a gap: revisions only have to rise)."""
        now = self.leases.clock()
        self.terminal = states.retained(self.terminal, now)
        hosted = []
        owner = self.leases.owner
        offered: dict[str, RunState] = {}
        for row in states.session_runs(await self.host.active_runs(), self.terminal):
            # One unreadable session must not sink the snapshot.
            meta = await self.swallowed.call(
                "session_meta",
                partial(self.host.session_meta, row.session_id),
                None,
                "sessions without metadata are left out of snapshots",
            )
            if meta is not None:
                run = states.run_state(row, meta, owner, now)
            else:
                run = states.same_turn(self.offered.get(row.session_id), row)
            if run is not None:
                hosted.append(run)
                offered[run.session_id] = run
        self.offered = offered
        clock = asyncio.get_running_loop().time
        give_up = clock() + REQUEST_TIMEOUT_S + 1
        while True:
            now_ms = self.leases.now_ms()
            self._asked = self.leases.asking()
            written = await self.watch.call(
                self.store.pass_write(
                    owner,
                    hosted,
                    now_ms,
                    lease_ms=self.leases.lease_ms,
                    retention_ms=TERMINAL_RETENTION_S * 1000,
                    member=self.fleet_row(now_ms),
                )
            )
            if clock() >= give_up or not any(r.sent_elsewhere(owner, now_ms) for r in written.runs):
                return written
            await asyncio.sleep(SENDING_POLL_S)

    def lapsing(self) -> bool:
        """Whether the rows of the last write may have been taken by another replica by the time a
        request started now ends: past their trust window, they are not sent (`Leases`)."""
        return self.leases.lapsing(self._asked)

    async def release(self) -> None:
        # Unreleased, the rows wait for their lease instead: slower for another replica, no loss.
        with contextlib.suppress(RelayError):
            await self.watch.call(self.store.release_runs(self.leases.owner))

    async def keep_alive(self) -> float | None:
        """Renew this replica's runs; seconds until another replica's lease ends, if one does."""
        now_ms = self.leases.now_ms()
        ends = await self.watch.call(
            self.store.keep_alive(self.leases.owner, now_ms, self.leases.lease_ms)
        )
        # A millisecond past the end: the pass then finds the lease ended, not about to end.
        return None if ends is None else (max(ends - now_ms, 0) + 1) / 1000
