"""Session-started announcements: every replica records the sessions it sees in the shared
ledger, which hands each unsent entry to one claimer at a time, so a session is announced once,
oldest first, to its own profile's scope."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

from relay.host import AgentSessionRow, Host, IndexRow
from relay.protocol import STARTED_WINDOW_MS, session_path, started_body
from relay.publishing.leases import Leases
from relay.publishing.logs import Sender, Swallowed
from relay.store import ProfileGrant, RelayConfig
from relay.store.contract import StartedLedger
from relay.store.records import PassView

# Announcements are claimed a batch at a time; a claim is renewed while its batch is still going
# out. Each batch costs one transaction (its mark, with the next claim), so bigger is cheaper, up
# to what one lease can send.
STARTED_BATCH = 64


@dataclass(eq=False)
class Announcements:
    """One publisher's side of the started ledger; `leases` name its claims."""

    store: StartedLedger
    host: Host
    send: Sender
    leases: Leases
    swallowed: Swallowed
    # Sightings this publisher has recorded: a steady pass writes none of them again.
    _recorded: dict[tuple[str, str], int] = field(default_factory=dict, init=False)

    async def track(self, config: RelayConfig) -> None:
        """Start (or keep) the ledger floor of every enrolled profile."""
        scopes = [grant.profile_id for grant in config.profiles.values()]
        await self.store.track_started(scopes, self.leases.now_ms())

    async def publish(
        self,
        config: RelayConfig,
        publishing: list[tuple[str, ProfileGrant]],
        view: PassView | None = None,
    ) -> None:
        """Announce each newly seen session of the `publishing` profiles once, oldest first.

        One claim covers every profile, and each batch sent is marked in the transaction that
        claims the next: S sessions cost ⌈S / STARTED_BATCH⌉ + 2 transactions whatever the number
        of profiles, none open while a batch goes out. With the pass's `view`, only scopes with
        unsent or newly recorded entries are claimed from, and floors set only where it found none.
        """
        recorded = await self._observe(config, publishing, view is None or bool(view.untracked))
        if view is not None:
            publishing = [
                (profile, grant)
                for profile, grant in publishing
                if grant.profile_id in view.unsent or grant.profile_id in recorded
            ]
        if not publishing:
            return
        profiles = {grant.profile_id: profile for profile, grant in publishing}
        scopes = list(profiles)
        leases = self.leases
        done: list[tuple[str, str]] = []
        try:
            while True:
                asked = leases.asking()
                entries = await self.store.claim_started_scopes(
                    scopes, leases.owner, leases.now_ms(), leases.lease_ms, STARTED_BATCH, sent=done
                )
                done = []
                if not entries:
                    return
                for entry in entries:
                    if leases.lapsing(asked):
                        break  # claim the rest again: another replica may hold them by now
                    # A permanent refusal counts as done; a retryable one raises, and the entry
                    # stays unsent, to go again under the same eventId.
                    pid, sid = entry.profile_id, entry.session_id
                    path = session_path(config.publisher_id, pid, sid, "started")
                    body = started_body(config.publisher_id, pid, sid, entry.started_at)
                    await self.send(path, body, profiles[pid])
                    done.append((pid, sid))
                if not done:
                    # The claim itself outlasted its window (a frozen process, a store that slow):
                    # the next pass claims again rather than this one spinning on it.
                    return
        finally:
            # What went out stays sent even when a later one of the batch failed.
            if done:
                await self.store.claim_started_scopes(
                    (), leases.owner, leases.now_ms(), leases.lease_ms, sent=done
                )

    async def _observe(
        self, config: RelayConfig, publishing: list[tuple[str, ProfileGrant]], track: bool
    ) -> set[str]:
        """Record every messageful session started in a publishing profile, in one transaction;
        the scopes that got new sightings. `track`: start the floors of scopes without a ledger
        first."""
        index: list[IndexRow] = await self.swallowed.call(
            "session_index", self._index, [], "announcing Agent sessions only"
        )
        if track:
            await self.track(config)
        # Sightings past the ledger's window would be pruned anyway: keep memory bounded.
        cutoff = self.leases.now_ms() - STARTED_WINDOW_MS
        self._recorded = {key: ms for key, ms in self._recorded.items() if ms >= cutoff}
        seen: dict[str, list[tuple[str, int]]] = {}
        for profile, grant in publishing:
            agent: list[AgentSessionRow] = await self.swallowed.call(
                "agent_sessions", partial(self._agent, profile), [], "announcing no Agent session"
            )
            # A compressed Agent chat keeps its lineage root's id and start: not a new session.
            found = [
                (row.session_id, row.created_at)
                for row in index
                if row.message_count > 0 and self.host.profiles_match(row.profile, profile)
            ]
            found += [(row.lineage_root_id or row.id, row.started_at) for row in agent]
            sightings = [
                (sid, ms)
                for sid, at in found
                if (ms := _ms(at)) is not None and (grant.profile_id, sid) not in self._recorded
            ]
            if sightings:
                seen.setdefault(grant.profile_id, []).extend(sightings)
        if seen:
            await self.store.record_started_scopes(seen, self.leases.now_ms())
            for profile_id, sightings in seen.items():
                self._recorded.update(((profile_id, sid), ms) for sid, ms in sightings)
        return set(seen)

    # Copied inside the swallowed call: a host's lazy or shared sequence is read once, there, and
    # its failure while read is the host's, reported as such.
    async def _index(self) -> list[IndexRow]:
        return list(await self.host.session_index())

    async def _agent(self, profile: str) -> list[AgentSessionRow]:
        return list(await self.host.agent_sessions(profile))


def _ms(seconds: float) -> int | None:
    """Seconds to whole milliseconds; None for a time that is not a finite number."""
    try:
        return math.floor(float(seconds) * 1000)
    except (TypeError, ValueError, OverflowError):
        return None
