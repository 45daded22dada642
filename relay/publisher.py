"""`RelayPublisher`: coalesces changes into signed complete snapshots, one per enrolled profile.

A port of Talaria Web 1.20's `RelayPublisher`. One pass of the loop, in order: copy the queued
views (and the deleted-session outbox), publish every profile's snapshot, send the views, then
announce newly started sessions. Failures back off and never block a turn. Every piece of state
that must outlive the process or be shared by replicas goes through `RelayStore`; what stays in
memory (terminal runs, queued views) is handed from one publisher to the next on a swap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from relay.client import RelayClient
from relay.errors import CorruptStateError, RelayHttpError, RelayPairingError
from relay.host import ActiveRun, Host, SessionMeta
from relay.presence import Presence
from relay.protocol import (
    MAX_ID,
    MAX_SNAPSHOT_STATES,
    STARTED_WINDOW_MS,
    TERMINAL_PHASES,
    TERMINAL_RETENTION_S,
    RelayState,
    capped_title,
    session_path,
    snapshot_body,
    snapshot_path,
    started_body,
    viewed_body,
)
from relay.store import DeletedScope, DeletedView, ProfileGrant, RelayConfig, RelayStore

HEARTBEAT_S = 60.0
# Announcements are claimed a few at a time, for long enough to send them all at the client timeout.
STARTED_BATCH = 16
STARTED_LEASE_MS = (STARTED_BATCH * 10 + 30) * 1000

Log = Callable[[str], None]


def backoff_delay(failures: int, uniform: Callable[[float, float], float]) -> float:
    """Seconds to wait after `failures` failures in a row: 5 s doubling, jittered, 300 s cap."""
    return min(5.0 * 2.0 ** min(failures - 1, 6) * uniform(0.8, 1.2), 300.0)


@dataclass(frozen=True, slots=True)
class Terminal:
    """A finished run, kept so its outcome outlives the run's teardown."""

    run: ActiveRun
    phase: str
    terminal_at: float


@dataclass(frozen=True, slots=True)
class View:
    """A viewed (or deleted) session to acknowledge after the snapshot that carries its outcome."""

    profile: str | None
    through: int
    deleted: DeletedView | None = None


def load_key(pem: str) -> Ed25519PrivateKey:
    key = load_pem_private_key(pem.encode(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise CorruptStateError("Talaria publisher key must be an Ed25519 private key")
    return key


class RelayPublisher:
    """Publishes one registration's profiles; `await initialize()` before anything else."""

    def __init__(
        self,
        config: RelayConfig,
        *,
        store: RelayStore,
        host: Host,
        client: RelayClient,
        presence: Presence,
        owner: str,
        clock: Callable[[], float] = time.time,
        log: Log | None = None,
        uniform: Callable[[float, float], float] = random.uniform,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        background: bool = True,
    ) -> None:
        self.config = config
        self._store = store
        self._host = host
        self._client = client
        self._presence = presence
        # Who claims started announcements: shared by a service's publishers, so a swap keeps them.
        self._owner = owner
        self._clock = clock
        self._log = log or logging.getLogger("relay").info
        self._uniform = uniform
        self._new_id = new_id
        self._key: Ed25519PrivateKey | None = None
        self.terminal: dict[str, Terminal] = {}
        self.views: dict[str, View] = {}
        self._disabled: set[str] = set()
        self._alert_eligibility = True
        self._viewed_unsupported_logged = False
        self._started_unsupported_logged = False
        self._failures = 0
        self._dirty = False
        self._stopped = False
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._background = background
        self._passing = asyncio.Lock()
        self._identities: dict[str, str | None] | None = None
        # Sightings this publisher has recorded: a steady pass writes none of them again.
        self._recorded: dict[tuple[str, str], int] = {}

    async def initialize(self) -> None:
        """Load the key; start the started-ledger floors now, so the chat that wakes us is new."""
        self._key = load_key(await self._store.load_key(self.config.key_ref))
        with contextlib.suppress(Exception):  # the first pass tracks them instead
            await self._track_started()

    def inherit(self, previous: RelayPublisher) -> None:
        """Carry unpublished terminal runs and queued views from the publisher being replaced."""
        self.terminal.update(previous.terminal)
        self.views.update(previous.views)

    # ── lifecycle ─────────────────────────────────────────────────────────────

    async def start(self, publish_initial: bool = True) -> None:
        if self._loop is not None or self._stopped:
            return
        if self._background:
            self._loop = asyncio.create_task(self._run(), name="talaria-relay-publisher")
        if publish_initial or await self._store.pending_deleted():
            self.changed()

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    def changed(self) -> None:
        """Something to publish: wake the loop (changes coalesce into one pass)."""
        self._dirty = True
        self._wake.set()

    def note_terminal(self, run: ActiveRun, phase: str) -> None:
        sid = run.session_id.strip()
        if not sid:
            return
        self.terminal[sid] = Terminal(run, phase, self._clock())
        self.changed()

    def mark_viewed(self, session_id: str, profile: str | None) -> None:
        """Queue an acknowledgement, sent after the snapshot carrying the session's outcome."""
        self.views[session_id] = View(profile, self._now_ms())
        self.changed()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def _run(self) -> None:
        while not self._stopped:
            if not self._dirty:
                await self._sleep(HEARTBEAT_S)
            if self._stopped:
                return
            # A change from here on wakes the next sleep; one from before is in this pass.
            self._wake.clear()
            self._dirty = False
            delay = await self.run_once()
            if delay is not None:
                await self._sleep(delay)
                if not self._stopped:
                    self._dirty = True

    async def run_once(self) -> float | None:
        """One pass, now; the seconds to back off for after a failure, else None.

        Without a background loop (`background=False`) this is how passes happen.
        """
        async with self._passing:
            try:
                await self._pass()
            except RelayHttpError as error:
                if error.retryable:
                    return self._failed(error)
                self._log(
                    f"[relay] Talaria relay publisher stopped after permanent HTTP {error.status}"
                )
                self._stopped = True
            except Exception as error:  # any failure backs off; none may end the loop
                return self._failed(error)
            return None

    async def _pass(self) -> None:
        await self._follow_registration()
        # Each profile's identity is read once a pass, however many steps ask for it.
        self._identities = {}
        try:
            ready = list(self.views.items())
            ready += [(v.session_id, View(v.profile, v.through, v)) for v in await self._deleted()]
            await self.publish_snapshot(isolate_permanent=True)
            await self._flush_views(ready)
            await self.publish_started()
        finally:
            self._identities = None
        if self._failures:
            self._log("[relay] Talaria relay snapshot recovered")
        self._failures = 0

    def _failed(self, error: Exception) -> float:
        self._failures += 1
        delay = backoff_delay(self._failures, self._uniform)
        state = "failed" if self._failures == 1 else "still failing"
        self._log(f"[relay] Talaria relay snapshot {state} ({error}); retrying in {delay:.1f}s")
        return delay

    async def _follow_registration(self) -> None:
        """Adopt a registration another replica saved (a new key or profile) before publishing."""
        latest = await self._store.load_config()
        # Another relay is another registration: the service swaps publishers for that.
        if (
            latest is not None
            and latest.generation != self.config.generation
            and latest.url == self.config.url
        ):
            self._key = load_key(await self._store.load_key(latest.key_ref))
            self.config = latest

    # ── snapshots ─────────────────────────────────────────────────────────────

    async def publish_snapshot(self, *, isolate_permanent: bool = False) -> None:
        """Publish every profile; with isolation a permanent error disables only that profile."""
        retryable: RelayHttpError | None = None
        for profile, grant in self.config.profiles.items():
            if not await self._publishes(profile, grant):
                continue
            try:
                await self._publish_profile_snapshot(profile, grant.profile_id)
            except RelayHttpError as error:
                if not isolate_permanent:
                    raise
                if error.retryable:
                    retryable = retryable or error
                    continue
                self._disabled.add(grant.profile_id)
                self._log(
                    f"[relay] Talaria relay disabled profile after permanent HTTP {error.status}"
                )
        if retryable is not None:
            raise retryable

    async def publish_profile(self, profile_id: str, expected_identity: str) -> None:
        """The validation publish of a newly enrolled profile."""
        for profile, grant in self.config.profiles.items():
            if grant.profile_id != profile_id:
                continue
            current = await self._identity(profile)
            if grant.identity != expected_identity or current != expected_identity:
                raise RelayPairingError("Hermes profile changed during relay enrollment", 409)
            await self._publish_profile_snapshot(profile, profile_id)
            return
        raise RelayPairingError("Talaria Relay profile enrollment is unavailable", 502)

    async def _publish_profile_snapshot(self, profile: str, profile_id: str) -> None:
        states = await self.build_states(profile)
        try:
            await self._put_snapshot(profile_id, states, with_eligibility=True)
        except RelayHttpError as error:
            if error.retryable or all(state.alert_eligible for state in states):
                raise
            # A relay that predates alertEligible rejects the field: resend without it, for good.
            await self._put_snapshot(profile_id, states, with_eligibility=False)
            self._alert_eligibility = False
            self._log(
                f"[relay] Talaria relay rejected alertEligible (HTTP {error.status}); "
                "publishing alert-eligible snapshots only"
            )

    async def _put_snapshot(
        self, profile_id: str, states: list[RelayState], *, with_eligibility: bool
    ) -> None:
        body = snapshot_body(f"webui:{self._new_id()}", states, with_eligibility=with_eligibility)
        await self._put(snapshot_path(self.config.publisher_id, profile_id), body)

    async def build_states(self, profile: str) -> list[RelayState]:
        """One row per session of `profile` with a live or recently finished run."""
        now = self._clock()
        cutoff = now - TERMINAL_RETENTION_S
        self.terminal = {s: t for s, t in self.terminal.items() if t.terminal_at >= cutoff}
        latest: dict[str, ActiveRun] = {}
        for run in await self._host.active_runs():
            sid = run.session_id.strip()
            if run.health_only or not sid:
                continue
            if sid not in latest or run.started_at > latest[sid].started_at:
                latest[sid] = run
        rows: list[tuple[str, ActiveRun, Terminal | None]] = [
            (sid, run, None) for sid, run in latest.items()
        ]
        rows += [(sid, t.run, t) for sid, t in self.terminal.items() if sid not in latest]
        eligible = not await self._presence.active(profile) if self._alert_eligibility else True
        drafts: list[tuple[str, str | None, str, str, int]] = []
        for sid, run, terminal in rows:
            meta = await self._meta(sid)
            if meta is None or not self._host.profiles_match(meta.profile, profile):
                continue
            phase = terminal.phase if terminal else "running"
            if phase not in TERMINAL_PHASES and meta.approval_pending:
                phase = "waiting_for_approval"
            if phase == "running" and meta.clarify_pending:
                phase = "waiting_for_input"
            if phase == "running" and run.phase.endswith("starting"):
                phase = "starting"
            # A finished run keeps the instant it ended, so a viewer of that turn covers it.
            updated_at = math.floor((terminal.terminal_at if terminal else now) * 1000)
            title = capped_title(meta.title if meta.title and meta.title.strip() else None)
            stream = run.stream_id or None
            if len(sid) <= MAX_ID and (stream is None or len(stream) <= MAX_ID):
                drafts.append((sid, stream, title, phase, updated_at))
        # The relay takes 500 rows at most: keep the most recent.
        drafts.sort(key=lambda draft: -draft[4])
        drafts = drafts[:MAX_SNAPSHOT_STATES]
        revisions = await self._store.allocate_revisions(len(drafts), math.floor(now * 1000))
        states = [
            RelayState(sid, stream, revision, title, phase, updated_at, eligible)
            for (sid, stream, title, phase, updated_at), revision in zip(
                drafts, revisions, strict=True
            )
        ]
        # An eventId over the relay's limit would fail the whole snapshot: leave that row out.
        return [state for state in states if len(state.event_id) <= MAX_ID]

    async def _meta(self, session_id: str) -> SessionMeta | None:
        try:
            return await self._host.session_meta(session_id)
        except Exception:  # one unreadable session must not sink the snapshot
            return None

    async def _publishes(self, profile: str, grant: ProfileGrant) -> bool:
        """Whether the profile is still the one enrolled (not recreated) and not disabled."""
        if grant.identity and await self._identity(profile) != grant.identity:
            return False
        return grant.profile_id not in self._disabled

    async def _identity(self, profile: str) -> str | None:
        """The profile's identity, None when the profile is gone or its identity unreadable."""
        if self._identities is not None and profile in self._identities:
            return self._identities[profile]
        identity = None
        if await self._host.profile_available(profile):
            with contextlib.suppress(CorruptStateError):
                identity = await self._store.profile_identity(profile)
        if self._identities is not None:
            self._identities[profile] = identity
        return identity

    # ── viewed acknowledgements and the deleted outbox ────────────────────────

    async def _deleted(self) -> list[DeletedView]:
        """The outbox, bound once to this registration's scope, minus sessions that still exist."""
        views = await self._store.pending_deleted()
        bound = 0
        for profile in {view.profile for view in views if view.scope is None}:
            grant = self.config.profiles.get(profile)
            if grant is not None and await self._publishes(profile, grant):
                bound += await self._store.bind_deleted(profile, grant.identity, self._scope(grant))
        if bound:
            views = await self._store.pending_deleted()
        # A staged deletion must not clear a session that survived a failed removal.
        return [view for view in views if not await self._host.session_exists(view.session_id)]

    def _scope(self, grant: ProfileGrant) -> DeletedScope:
        return DeletedScope(self.config.url, self.config.publisher_id, grant.profile_id)

    async def _flush_views(self, ready: list[tuple[str, View]]) -> None:
        """Send the views queued before the snapshot just published."""
        for sid, view in ready:
            if view.deleted and await self._host.session_exists(sid):
                continue
            answered = False
            for profile, grant in self.config.profiles.items():
                if not self._host.profiles_match(view.profile, profile):
                    continue
                if not await self._publishes(profile, grant):
                    continue
                if view.deleted and (
                    view.deleted.identity != grant.identity
                    or view.deleted.scope != self._scope(grant)
                ):
                    continue
                path = session_path(self.config.publisher_id, grant.profile_id, sid, "viewed")
                try:
                    await self._put(path, viewed_body(view.through))
                except RelayHttpError as error:
                    if error.retryable:
                        raise
                    self._rejected_view(error.status)
                answered = True
            if view.deleted:
                # A permanent refusal is final too: resending it every pass would never end.
                if answered:
                    await self._store.ack_deleted(view.deleted.id, view.through)
            elif self.views.get(sid) is view:
                del self.views[sid]

    def _rejected_view(self, status: int) -> None:
        if status != 404:
            self._log(f"[relay] Talaria relay rejected a viewed acknowledgement (HTTP {status})")
        elif not self._viewed_unsupported_logged:
            self._viewed_unsupported_logged = True
            self._log(
                "[relay] Talaria relay does not support viewed acknowledgements (HTTP 404); "
                "Live Activities clear only from the app"
            )

    # ── session-started announcements ─────────────────────────────────────────

    async def _track_started(self) -> None:
        scopes = [grant.profile_id for grant in self.config.profiles.values()]
        await self._store.track_started(scopes, self._now_ms())

    async def _observe_started(self) -> list[tuple[str, ProfileGrant]]:
        """Record every messageful session started in a publishing profile; those profiles."""
        publishing = [
            (profile, grant)
            for profile, grant in self.config.profiles.items()
            if await self._publishes(profile, grant)
        ]
        try:
            index = list(await self._host.session_index())
        except Exception:  # no resident index: announce Agent sessions only
            index = []
        await self._track_started()
        self._forget_old_sightings()
        for profile, grant in publishing:
            try:
                agent = list(await self._host.agent_sessions(profile))
            except Exception:  # an unreadable Agent store announces nothing
                agent = []
            # A compressed Agent chat keeps its lineage root's id and start: not a new session.
            seen = [
                (row.session_id, row.created_at)
                for row in index
                if row.message_count > 0 and self._host.profiles_match(row.profile, profile)
            ]
            seen += [(row.lineage_root_id or row.id, row.started_at) for row in agent]
            sightings = [
                (sid, ms)
                for sid, at in seen
                if (ms := _ms(at)) is not None and (grant.profile_id, sid) not in self._recorded
            ]
            if sightings:
                await self._store.record_started(grant.profile_id, sightings, self._now_ms())
                self._recorded.update(((grant.profile_id, sid), ms) for sid, ms in sightings)
        return publishing

    def _forget_old_sightings(self) -> None:
        """Sightings past the ledger's window would be pruned anyway: keep memory bounded."""
        cutoff = self._now_ms() - STARTED_WINDOW_MS
        self._recorded = {key: ms for key, ms in self._recorded.items() if ms >= cutoff}

    async def publish_started(self) -> None:
        """Announce each newly seen session once, oldest first, to its own profile's scope.

        Each claimed batch is marked sent in one transaction, so a pass that announces S sessions
        costs O(profiles + S / STARTED_BATCH) transactions.
        """
        for _, grant in await self._observe_started():
            while entries := await self._store.claim_started(
                grant.profile_id, self._owner, self._now_ms(), STARTED_LEASE_MS, STARTED_BATCH
            ):
                done: list[str] = []
                try:
                    for entry in entries:
                        await self._announce(grant.profile_id, entry.session_id, entry.started_at)
                        done.append(entry.session_id)
                finally:
                    # What went out stays sent even when a later one of the batch failed.
                    if done:
                        await self._store.mark_started_sent(grant.profile_id, *done)

    async def _announce(self, profile_id: str, session_id: str, started_at: int) -> None:
        """Send one announcement; a permanent refusal counts as done, a retryable one raises."""
        path = session_path(self.config.publisher_id, profile_id, session_id, "started")
        body = started_body(self.config.publisher_id, profile_id, session_id, started_at)
        try:
            await self._put(path, body)
        except RelayHttpError as error:
            if error.retryable:
                raise  # the entry stays unsent, to go again under the same eventId
            if error.status != 404:
                self._log(
                    f"[relay] Talaria relay rejected a session-started event (HTTP {error.status})"
                )
            elif not self._started_unsupported_logged:
                self._started_unsupported_logged = True
                self._log(
                    "[relay] Talaria relay does not support session-started events (HTTP 404); "
                    "devices refresh on their own schedule"
                )

    # ── helpers ───────────────────────────────────────────────────────────────

    async def _put(self, path: str, body: bytes) -> None:
        if self._key is None:
            raise RuntimeError("RelayPublisher.initialize() was not awaited")
        await self._client.put(path, body, key=self._key, key_id=self.config.key_id)

    def _now_ms(self) -> int:
        return math.floor(self._clock() * 1000)


def _ms(seconds: float) -> int | None:
    """Seconds to whole milliseconds; None for a time that is not a finite number."""
    try:
        return math.floor(float(seconds) * 1000)
    except (TypeError, ValueError, OverflowError):
        return None
