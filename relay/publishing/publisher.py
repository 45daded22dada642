"""`RelayPublisher`: coalesces changes into signed complete snapshots, one per enrolled profile.

A port of Talaria Web 1.20's: a pass copies the queued views (and deleted outbox), publishes each
profile's snapshot, sends the views, then announces new sessions; failures back off and never
block a turn. Shared or lasting state is in `RelayStore`; what stays in memory (terminal runs,
queued views) is handed from one publisher to the next on a swap.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from relay import metrics, tracing
from relay.client import RelayClient
from relay.errors import (
    CorruptStateError,
    RelayHttpError,
    RelayPairingError,
    RelayRequestError,
    StoreUnavailableError,
)
from relay.host import ActiveRun, Host
from relay.logfields import fields, of_error
from relay.presence import Presence
from relay.protocol import RelayState, snapshot_body, snapshot_path
from relay.publishing import fanout, states
from relay.publishing.announcements import Announcements
from relay.publishing.clock import StoreClock
from relay.publishing.fingerprint import public_fingerprint
from relay.publishing.fleet import Membership
from relay.publishing.leases import Leases
from relay.publishing.levels import Levels
from relay.publishing.logs import Log, Reporter, Sender, Swallowed
from relay.publishing.loop import LoopHealth, PassLoop, PassRecord
from relay.publishing.options import PublisherOptions
from relay.publishing.outbox import Outbox, View
from relay.publishing.runs import HostedRuns
from relay.publishing.signing import Signer
from relay.publishing.states import Terminal
from relay.publishing.storewatch import STORE_WAIT_SHARE, StoreWatch
from relay.store import ProfileGrant, RelayConfig
from relay.store.contract import (
    Backlogs,
    DeletedOutbox,
    Fleet,
    LeaseWatch,
    Passes,
    Registration,
    Revisions,
    RunStates,
    StartedLedger,
)
from relay.store.records import PassRows, PassView

__all__ = ["Accepted", "PublisherStore", "RelayPublisher"]
# The name predates this module's move into `publishing/`; operators filter on it.
logger = logging.getLogger("relay.publisher")
# What a relay that refuses viewed acknowledgements or session-started events (404) means.
VIEWED_UNSUPPORTED = "Live Activities clear only from the app"
STARTED_UNSUPPORTED = "devices refresh on their own schedule"


@dataclass(frozen=True, slots=True)
class Accepted:
    """A profile's last snapshot the relay accepted from this publisher (the operator page)."""

    at: float
    revision: int | None
    states: int


class PublisherStore(
    Registration,
    Revisions,
    StartedLedger,
    DeletedOutbox,
    RunStates,
    LeaseWatch,
    Passes,
    Fleet,
    Backlogs,
    Protocol,
):
    """Every aggregate a publisher reads or writes: all but presence (`Presence` reads that)."""


class RelayPublisher:
    """Publishes one registration's profiles; `await initialize()` before anything else."""

    def __init__(
        self,
        config: RelayConfig,
        *,
        store: PublisherStore,
        host: Host,
        client: RelayClient,
        presence: Presence,
        owner: str,
        clock: Callable[[], float] = time.time,
        log: Log | None = None,
        options: PublisherOptions | None = None,
        store_clock: StoreClock | None = None,
        store_watch: StoreWatch | None = None,
    ) -> None:
        """`clock`: this process's wall clock; `store_clock`, `store_watch`: the replicas' time
        base and the store's answers (a service's publishers share both; by default their own)."""
        self._options = options = options or PublisherOptions()
        lease_s = options.lease_s
        self._store = store
        self._host = host
        self._presence = presence
        self._clock = clock
        self._report = Reporter(log, logger, owner)
        # Only what this process saw, for the operator page: why a profile was disabled (by
        # profile_id) and each profile's last accepted snapshot (by profile name).
        self.disabled: dict[str, str] = {}
        self.accepted: dict[str, Accepted] = {}
        self._alert_eligibility = True
        self._identities: dict[str, str | None] | None = None
        self._swallowed = Swallowed(self._report)
        self._time = store_clock or StoreClock(clock, lease_s=lease_s, report=self._report)
        self._signer = Signer(config, store, client, self._time)
        # The owner names this replica's claims and runs: shared by a service's publishers, so a
        # swap keeps them.
        self._leases = Leases(owner, math.ceil(lease_s * 1000), self._time.time, self._time.ticks)
        watch = self._watch = store_watch or StoreWatch(STORE_WAIT_SHARE * lease_s, self._report)
        self._runs = HostedRuns(store, host, self._leases, self._swallowed, watch)
        self._loop = PassLoop(
            self._pass,
            report=self._report,
            uniform=options.uniform,
            poll=self._runs.keep_alive,
            poll_s=self._leases.poll_s,
            heartbeat_s=options.heartbeat_s,
            clock=clock,
        )
        self._fleet = Membership(store, self._leases, self._time, self._loop, self._report)
        self._runs.fleet_row = self._fleet.member
        self._loop.on_backoff = self._fleet.failed
        sender = functools.partial(Sender, self._signer.put, self._report)
        viewed = sender("acknowledgements", "viewed acknowledgement", VIEWED_UNSUPPORTED)
        self._outbox = Outbox(store, host, viewed, self._leases, self._publishes)
        started = sender("announcements", "session-started event", STARTED_UNSUPPORTED)
        self._announcements = Announcements(store, host, started, self._leases, self._swallowed)
        # A pass's one read, and its one write: the rows this replica publishes, and the
        # revisions allocated for them, handed out as the profiles' states are built.
        self._view: PassView | None = None
        self._rows: PassRows | None = None
        self._revisions: Iterator[int] = iter(())
        self._levels = Levels(store)

    @property
    def config(self) -> RelayConfig:
        """The registration published (another replica's newer one once adopted)."""
        return self._signer.config

    def key_fingerprint(self, ref: str) -> str | None:
        """The public fingerprint of the key this publisher signs with, if it is `ref`'s (None
        before `initialize`): shown without opening the stored key again."""
        key, config = self._signer.key, self._signer.config
        if key is None or config.key_ref != ref:
            return None
        return public_fingerprint(key.public_key())

    @property
    def terminal(self) -> dict[str, Terminal]:
        """Turn outcomes kept until published (the retention), by session."""
        return self._runs.terminal

    @property
    def views(self) -> dict[str, View]:
        """Viewed sessions queued for acknowledgement."""
        return self._outbox.views

    async def initialize(self) -> None:
        """Load the key; start the started-ledger floors now, so the chat that wakes us is new."""
        await self._signer.load()
        with contextlib.suppress(Exception):  # the first pass tracks them, and reports a failure
            if not self._time.asked:
                # The store's clock first (one read, once a process): a floor set on a wall clock
                # minutes ahead would hide the sessions started meanwhile.
                await self._read_view(following=False)
            await self._announcements.track(self.config)
        await self._fleet.record()

    def inherit(self, previous: RelayPublisher) -> None:
        """Carry unpublished terminal runs and queued views from the publisher being replaced."""
        self._runs.inherit(previous._runs)
        self._fleet.inherit(previous._fleet)
        self.views.update(previous.views)
        self.accepted.update(previous.accepted)

    async def start(self, publish_initial: bool = True) -> None:
        if self._loop.running or self._loop.stopped:
            return
        if self._options.background:
            self._loop.start()
        if publish_initial or await self._store.pending_deleted():
            self.changed()

    async def stop(self) -> None:
        await self._loop.stop()
        self._levels.clear()
        await self._fleet.leave()

    def recent_passes(self) -> tuple[PassRecord, ...]:
        """This publisher's last passes, for the operator page's strip."""
        return self._loop.recent()

    def health(self) -> LoopHealth:
        return self._loop.health()

    def changed(self) -> None:
        self._loop.changed()

    async def flush(self) -> None:
        await self._loop.flush()

    def note_terminal(self, run: ActiveRun, phase: str) -> None:
        if run.session_id.strip():
            self._runs.ended(run, phase)
            self.changed()

    def mark_viewed(self, session_id: str, profile: str | None) -> None:
        """Queue an acknowledgement, sent after the snapshot carrying the session's outcome."""
        # On the store's clock: it covers turn ends other replicas stamped on it.
        self.views[session_id] = View(profile, self._time.now_ms())
        self.changed()

    async def run_once(self) -> float | None:
        """One pass, now (how passes happen with `background=False`); the backoff, or None."""
        return await self._loop.run_once()

    async def _pass(self) -> None:
        """One read (what changed, what work waits), the host's answers, one write (the runs and
        their revisions), the snapshots, the release of the rows' sending marks; claims and
        their sends only where the read found work, or this pass just recorded some."""
        self._view = await self._read_view()
        # Each profile's identity is read once a pass, however many steps ask for it.
        self._identities = {}
        try:
            ready = await self._outbox.ready(self.config, claim=self._view.deleted)
            await self._write()
            try:
                await self.publish_snapshot(isolate_permanent=True)
            finally:
                await self._runs.release()
            await self._outbox.flush(self.config, ready)
            await self.publish_started()
            await self._levels.sample()
        finally:
            self._identities = None
            self._view, self._rows, self._revisions = None, None, iter(())
            self._swallowed.settle()

    async def _write(self) -> None:
        self._rows = await self._runs.sync()
        self._revisions = iter(self._rows.revisions)

    async def _read_view(self, following: bool = True) -> PassView:
        """The pass's view; after adopting another replica's registration, that one's."""
        grants, owner, sent = self.config.profiles, self._leases.owner, self._time.ticks()
        scopes = [grant.profile_id for grant in grants.values()]
        reading = self._store.pass_view(owner, list(grants), scopes, self._leases.now_ms())
        view = await self._watch.call(reading)
        self._time.read(sent, self._time.ticks(), view.store_ms)
        if following and view.generation not in (None, self.config.generation):
            return await self._read_view(False) if await self._signer.follow() else view
        return view

    async def publish_snapshot(self, *, isolate_permanent: bool = False) -> None:
        """Publish every profile: all states built, then the PUTs side by side (`fanout`), each
        attempted whatever the others do. Without isolation the earliest failed profile's error
        is raised; with it a permanent refusal disables its profile alone, and the failure
        asking the longest Retry-After backs off the publisher."""
        # No store call is in flight while the PUTs are.
        built = await self._build_all()
        if self._runs.lapsing():
            # Frozen or held up past the rows' leases since they were written: another replica
            # may publish some of them by now. Write again; what the store says now is sent.
            if self._rows is not None:  # in a pass; outside one, each build writes anew
                await self._write()
            built = await self._build_all()
            if self._runs.lapsing():
                raise StoreUnavailableError(
                    "Relay store answered too slowly to trust the run leases it gave "
                    f"({self._leases.lease_ms / 1000:g}s); no snapshot was sent"
                )
        tracing.annotate(
            {"relay.profiles": len(built), "relay.states": sum(len(one[2]) for one in built)}
        )
        outcomes = await fanout.attempt_all(
            [functools.partial(self._send_snapshot, *one) for one in built]
        )
        failed = [
            (profile, profile_id, error)
            for (profile, profile_id, _), error in zip(built, outcomes, strict=True)
            if error is not None
        ]
        if failed and not isolate_permanent:
            raise failed[0][2]
        # A permanent refusal disables its profile alone; anything else backs off the publisher.
        backoff: list[Exception] = []
        for profile, profile_id, error in failed:
            if not isinstance(error, RelayHttpError) or error.retryable:
                backoff.append(error)
                continue
            status = error.status
            self.disabled[profile_id] = f"the relay refused its snapshot for good (HTTP {status})"
            line = f"[relay] Talaria relay disabled profile {profile} after permanent HTTP {status}"
            if status == 401 and (note := self._time.note()):
                line += (
                    f"; {note}: the relay refuses signatures more than 300s off its own clock, "
                    "check this server's clock (NTP)"
                )
            # The error names its profile (`_put_snapshot`).
            self._report.error(line, of_error("profile_disabled", error))
        if backoff:
            raise fanout.longest_wait(backoff)

    async def _build_all(self) -> list[tuple[str, str, list[RelayState]]]:
        return [
            (profile, grant.profile_id, await self.build_states(profile))
            for profile, grant in await self._publishing()
        ]

    async def publish_profile(self, profile_id: str, expected_identity: str) -> None:
        """The validation publish of a newly enrolled profile."""
        grants = self.config.profiles.items()
        profile = next((name for name, g in grants if g.profile_id == profile_id), None)
        if profile is None:
            raise RelayPairingError("Talaria Relay profile enrollment is unavailable", 502)
        grant = self.config.profiles[profile]
        current = await self._identity(profile)
        if grant.identity != expected_identity or current != expected_identity:
            raise RelayPairingError("Hermes profile changed during relay enrollment", 409)
        try:
            await self._send_snapshot(profile, profile_id, await self.build_states(profile))
        finally:
            await self._runs.release()

    async def _send_snapshot(self, profile: str, profile_id: str, built: list[RelayState]) -> None:
        """One profile's snapshot; sent again without alertEligible if the relay refuses it."""
        # Read at the send: the states may have been built before a send found it refused.
        eligibility = self._alert_eligibility
        try:
            await self._put_snapshot(profile, profile_id, built, with_eligibility=eligibility)
        except RelayHttpError as error:
            if error.retryable or not eligibility or all(s.alert_eligible for s in built):
                raise
            # A relay that predates alertEligible rejects the field: resend without it, for good.
            await self._put_snapshot(profile, profile_id, built, with_eligibility=False)
            self._alert_eligibility = False
            self._report.warning(
                f"[relay] Talaria relay rejected alertEligible for profile {profile} "
                f"(HTTP {error.status}); publishing alert-eligible snapshots only",
                fields("alert_eligibility_rejected", profile=profile, status=error.status),
            )

    async def _put_snapshot(
        self, profile: str, profile_id: str, built: list[RelayState], *, with_eligibility: bool
    ) -> None:
        body = snapshot_body(
            f"webui:{self._options.new_id()}", built, with_eligibility=with_eligibility
        )
        try:
            await self._signer.put(snapshot_path(self.config.publisher_id, profile_id), body)
        except RelayRequestError as error:
            metrics.count("snapshots", error)
            error.profile = error.profile or profile
            raise
        metrics.count("snapshots", None)
        newest = max((state.revision for state in built), default=None)
        self.accepted[profile] = Accepted(self._clock(), newest, len(built))

    async def build_states(self, profile: str) -> list[RelayState]:
        """One row per session of `profile` whose newest turn this replica publishes."""
        written, allocated = self._rows, self._revisions
        if written is None:  # outside a pass: a write of its own
            written = await self._runs.sync()
            allocated = iter(written.revisions)
        rows = [run for run in written.runs if self._host.profiles_match(run.profile, profile)]
        active = self._alert_eligibility and await self._presence.active(profile, self._view)
        now_ms = self._leases.now_ms()
        planned = states.drafts(rows, now_ms)
        revisions = list(itertools.islice(allocated, len(planned)))
        if len(revisions) < len(planned):  # a row shown under two profiles takes two
            revisions += await self._store.allocate_revisions(len(planned) - len(revisions), now_ms)
        return states.states(planned, revisions, eligible=not active)

    async def _publishing(self) -> list[tuple[str, ProfileGrant]]:
        profiles = self.config.profiles.items()
        return [
            (profile, grant) for profile, grant in profiles if await self._publishes(profile, grant)
        ]

    async def _publishes(self, profile: str, grant: ProfileGrant) -> bool:
        """Whether the profile is still the one enrolled (not recreated) and not disabled."""
        if grant.identity and await self._identity(profile) != grant.identity:
            return False
        return grant.profile_id not in self.disabled

    async def _identity(self, profile: str) -> str | None:
        """The profile's identity, None when the profile is gone or its identity unreadable."""
        if self._identities is not None and profile in self._identities:
            return self._identities[profile]
        identity = None
        if await self._host.profile_available(profile):
            if self._view is not None:
                identity = self._view.identities.get(profile)
            if identity is None:  # none stored yet (or unreadable): mint it, as upstream
                with contextlib.suppress(CorruptStateError):
                    identity = await self._store.profile_identity(profile)
        if self._identities is not None:
            self._identities[profile] = identity
        return identity

    async def publish_started(self) -> None:
        """Announce each newly seen session once, oldest first, to its own profile's scope."""
        await self._announcements.publish(self.config, await self._publishing(), self._view)
