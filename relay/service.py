"""`RelayService`: the relay side of a web app: pairing, the current publisher, its swaps.

A port of Talaria Web 1.20's `RelayService`. The web app builds one with its store and `Host`,
awaits `start()`, and calls `changed()` whenever its session list changes. Used before `start()`,
every method but `health()`, `unpair()` and `stop()` raises `ServiceNotStartedError`: a call
that would otherwise be dropped without a word (upstream's silence cost a newcomer an hour).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, TypedDict

import httpx

from relay.client import RelayClient
from relay.errors import (
    CorruptStateError,
    InvalidInputError,
    KeyPassphraseError,
    RelayError,
    RelayPairingError,
    ServiceNotStartedError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from relay.health import Health, StoreProbe
from relay.host import Host
from relay.logfields import fields, of_error
from relay.operator.facts import Gatherer, Own
from relay.pairing import Pairing
from relay.presence import Presence
from relay.protocol import DEFAULT_RELAY_URL, TERMINAL_PHASES
from relay.publishing.clock import StoreClock
from relay.publishing.leases import incarnation
from relay.publishing.logs import Log, Reporter
from relay.publishing.options import PublisherOptions
from relay.publishing.publisher import RelayPublisher
from relay.publishing.storewatch import STORE_WAIT_SHARE, StoreWatch
from relay.store import RelayConfig, RelayStore, checks
from relay.store.records import OWNER_LIMIT
from relay.unpairing import unpair

logger = logging.getLogger("relay.service")


class ServiceOptions(TypedDict, total=False):
    """`RelayService`'s keywords, as `ThreadedRelayService` passes them on (so mypy checks them)."""

    relay_url: str | None
    allow_insecure_loopback: bool
    http: httpx.AsyncClient | None
    clock: Callable[[], float]
    log: Log | None
    owner: str | None
    publishing: PublisherOptions | None
    store_time: bool


class RelayService:
    """Owns the current publisher and the pairing state machine."""

    def __init__(
        self,
        store: RelayStore,
        host: Host,
        *,
        relay_url: str | None = None,
        allow_insecure_loopback: bool = False,
        http: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.time,
        log: Log | None = None,
        owner: str | None = None,
        publishing: PublisherOptions | None = None,
        store_time: bool = True,
    ) -> None:
        """`owner` names this replica in the store (a fresh id by default; a name gets a suffix
        unique to this process, see `incarnation`); `publishing` is how its publishers pace
        themselves (`PublisherOptions`). Replicas compare leases on the store's clock (Postgres's;
        docs/clock.md); `store_time=False` keeps `clock` as the time base instead: for a test that
        moves `clock` by hand (`relay.testing.Clock`)."""
        self.store = store
        self.host = host
        self._http = http
        self._clock = clock
        self._log = log
        if publishing is not None and not isinstance(publishing, PublisherOptions):
            raise InvalidInputError("publishing takes a PublisherOptions(lease_s=…, heartbeat_s=…)")
        self.publishing = publishing or PublisherOptions()
        # One owner of claims and runs across this service's publishers: this process's id.
        self.owner_name = None if owner is None else checks.text("owner", owner, OWNER_LIMIT)
        self.owner = uuid.uuid4().hex if owner is None else incarnation(owner)
        self._report = Reporter(log, logger, self.owner)
        # The time base shared with the other replicas (the store's clock): one for every
        # publisher of this service, so a swap keeps what it measured.
        self.store_clock = StoreClock(
            clock, lease_s=self.publishing.lease_s, report=self._report, follow=store_time
        )
        # A silent network is noticed within half a lease: every wait on the store's server is
        # bounded to a share of it (`StoreWatch`), and `health()` answers within a second.
        wait_s = STORE_WAIT_SHARE * self.publishing.lease_s
        store.bound_waits(wait_s)
        self.store_watch = StoreWatch(wait_s, self._report)
        self._probe = StoreProbe(store, self.store_watch)
        self.presence = Presence(store, self.store_clock.time)
        self._publisher: RelayPublisher | None = None
        self._candidate: RelayPublisher | None = None
        self._clients: dict[str, RelayClient] = {}
        trusted = relay_url or os.environ.get("TALARIA_RELAY_URL") or DEFAULT_RELAY_URL
        self._pairing = Pairing(
            store,
            host,
            trusted=trusted.strip().rstrip("/"),
            allow_insecure_loopback=allow_insecure_loopback,
            client=self._client,
            configure=self._configure,
        )
        self._cleared: set[tuple[str, str]] = set()
        # The store's clock: the leases, presence and queues the operator page judges are on it.
        self._gatherer = Gatherer(store, self.own, self.store_clock.time)
        self._started = False

    @property
    def started(self) -> bool:
        """`start()` has run (whether or not it found a registration to publish with)."""
        return self._started

    def current(self) -> RelayPublisher | None:
        return self._publisher

    async def operator_facts(self) -> dict[str, Any]:
        """The operator page's document (`relay.operator.facts`): one gather per few seconds."""
        return await self._gatherer()

    def own(self) -> Own:
        """What this replica knows of itself, for the operator page (`Own`)."""
        watch, offset_s = self.store_watch, self.store_clock.offset_s
        return Own(self.owner, offset_s, self._publisher, watch.silent, watch.silent_s())

    async def health(self) -> Health:
        """The store's answers (waited for `PROBE_WITHIN_S` at most; past it, what the service
        knows) and the publisher's loop; never calls the relay. Never raises for a service not
        started yet: it is then not ready (`publishing` False)."""
        found = await self._probe()
        loop = self._publisher.health() if self._publisher is not None else None
        last, age = (loop.last_success, loop.pass_age_s) if loop else (None, None)
        silent_s = self.store_watch.silent_s()
        # A pass that has run a lease is failing: its rows' trust window has shut.
        hung = age is not None and age >= self.publishing.lease_s
        return Health(
            store_reachable=found.reachable,
            schema_at_head=found.schema_at_head,
            registered=found.registered,
            publishing=loop is not None and not loop.stopped,
            last_success=last,
            last_success_age_s=None if last is None else max(self._clock() - last, 0.0),
            consecutive_failures=(loop.failures if loop else 0) + int(hung),
            backoff_until=loop.backoff_until if loop else None,
            stopped=loop.stopped if loop else False,
            clock_offset_s=self.store_clock.offset_s,
            pass_age_s=None if age is None else round(age, 3),
            store_silent_s=None if silent_s is None else round(silent_s, 3),
        )

    async def start(self) -> bool:
        """Resume from stored state: True when a publisher runs; False when there is no usable
        registration (the service is started all the same: `pair` then registers). A store that
        cannot be reached raises `StoreUnavailableError` and leaves the service not started."""
        if self._publisher is None and (candidate := await self._stored_publisher()) is not None:
            await self._adopt(candidate, None)
        self._started = True
        return self._publisher is not None

    def _require_started(self, what: str) -> None:
        if not self._started:
            raise ServiceNotStartedError(
                f"RelayService.{what}() before start(): call `await service.start()` first "
                "(in the web app's startup or lifespan)"
            )

    async def _stored_publisher(self) -> RelayPublisher | None:
        """A publisher for the stored registration; None (said in the log) when it is unusable."""
        try:
            config = await self.store.load_config()
            if config is None:
                return None
            # A registration with another relay (the trusted one changed, or the store came from
            # elsewhere) would send signed session data where this server was not told to.
            if config.url != self._pairing.trusted:
                raise InvalidInputError(
                    f"registered with {config.url}, not the trusted relay {self._pairing.trusted}"
                )
            return await self._publisher_for(config)
        except StoreUnavailableError:
            raise  # not an invalid registration: the caller may start again later
        except Exception as error:  # whatever is wrong with it, the web app runs on without
            # A missing passphrase is this process's (the message says so), not the registration's.
            passphrase = isinstance(error, KeyPassphraseError)
            why = error if passphrase else f"invalid configuration ({error})"
            self._report.error(
                f"[relay] Talaria relay publisher disabled: {why}",
                of_error("publisher_disabled", error),
                # An unreadable key or registration is expected; anything else is a bug: its trace.
                error=None if isinstance(error, RelayError | ValueError) else error,
            )
        return None

    async def stop(self) -> None:
        """Stop publishing and hand this replica's finished rows over at once (`retire_runs`:
        another replica, or this one restarted, takes them now, not when their leases end)."""
        if await self._stop_publisher():
            try:
                await self.store.retire_runs(self.owner, self.store_clock.now_ms())
            except Exception as error:  # a courtesy: the leases end by themselves anyway
                self._report.warning(
                    f"[relay] could not hand this replica's rows over as it stopped: {error}",
                    of_error("retire_failed", error),
                )
        await self._probe.close()
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()

    async def flush(self) -> None:
        """Return once a publishing pass that began after this call has finished."""
        self._require_started("flush")
        if self._publisher is not None:
            await self._publisher.flush()

    def changed(self) -> None:
        """The web app's session list changed."""
        self._require_started("changed")
        if self._publisher is not None:
            self._publisher.changed()

    async def update_presence(self, body: object, profile: str) -> dict[str, Any]:
        """`POST /api/talaria/presence`."""
        self._require_started("update_presence")
        result = await self.presence.update(body, profile)
        self.changed()
        return result

    async def mark_viewed(self, session_id: str) -> None:
        """A viewed session clears its finished runs on the relay; without a publisher, nothing."""
        self._require_started("mark_viewed")
        publisher = self._publisher or self._candidate
        if publisher is None:
            return
        checks.text("session_id", session_id)
        meta = await self.host.session_meta(session_id)
        if meta is None:
            raise SessionNotFoundError(f"Session not found: {session_id}")
        publisher.mark_viewed(session_id, meta.profile)

    async def clear_deleted(self, session_id: str, profile: str | None) -> None:
        """Queue the acknowledgement of a deleted session's runs, persisted even with no publisher
        and bound to a relay scope at most once; call it before reporting success."""
        self._require_started("clear_deleted")
        checks.text("session_id", session_id)
        checks.optional_text("profile", profile)
        name = self._canonical(profile or "default")
        live = await self.host.session_exists(session_id)
        if not live and (name, session_id) in self._cleared:
            return  # a later lookup of the same deleted id does not queue it again
        config = self._publisher.config if self._publisher else None
        identity, scope = await self._pairing.binding(name, config)
        await self.store.enqueue_deleted(
            session_id,
            name,
            self.store_clock.now_ms(),
            session_live=live,
            identity=identity,
            scope=scope,
        )
        # One id per deleted session per process, as upstream: the relay's ack is idempotent.
        self._cleared.add((name, session_id))
        self.changed()

    async def profile_deleted(self, profile: str) -> None:
        """The web app deleted a profile: one recreated under its name is a new relay scope."""
        self._require_started("profile_deleted")
        checks.text("profile", profile)
        await self.store.forget_profile_identity(self._canonical(profile))

    def _canonical(self, profile: str) -> str:
        """The host's name for `profile`; one the host cannot name is bad input, not a crash."""
        try:
            return self.host.canonical_profile(profile)
        except (ValueError, LookupError) as error:
            raise InvalidInputError(f"profile {profile!r} has no canonical name here") from error

    async def note_terminal(self, stream_id: str, phase: str) -> None:
        """A turn ended: its outcome reaches the relay, even in the middle of a swap."""
        self._require_started("note_terminal")
        checks.text("stream_id", stream_id)
        if checks.text("phase", phase) not in TERMINAL_PHASES:
            return
        run = next((r for r in await self.host.active_runs() if r.stream_id == stream_id), None)
        if run is None:
            return
        for publisher in dict.fromkeys(p for p in (self._publisher, self._candidate) if p):
            publisher.note_terminal(run, phase)

    async def unpair(self, *, if_relay_changed: bool = False) -> bool:
        """Forget the stored registration and its key, so this server can pair again (with
        this relay or another; the relay keeps its side). Whether one was forgotten.

        With `if_relay_changed`, only a registration with another relay than the trusted one is
        forgotten (a quick start whose dev relay is new each run calls it before `start()`). A
        publisher this service runs stops first; other replicas keep theirs until they restart.
        Allowed before `start()`."""
        checks.flag("if_relay_changed", if_relay_changed)
        keep = self._pairing.trusted if if_relay_changed else None
        if keep is not None:
            # An unreadable registration is forgotten below, whatever relay it named.
            with contextlib.suppress(CorruptStateError):
                config = await self.store.load_config()
                if config is None or config.url == keep:
                    return False
        await self._stop_publisher()
        forgotten = await unpair(self.store, keep_relay=keep)
        if forgotten is not None:
            self._report.info(
                f"[relay] forgot the registration with {forgotten.url}",
                fields("registration_forgotten"),
            )
        return forgotten is not None

    async def pair(self, body: object, profile: str, *, operator: bool) -> dict[str, Any]:
        """`POST /api/talaria/relay/pair`: register the server, or enroll another profile.

        `operator`: whether the signed-in caller may register this server (no default, so a
        handler that forgets it fails at once); any user may enroll a profile once registered."""
        self._require_started("pair")
        return await self._pairing.pair(body, profile, operator=operator)

    async def _configure(self, config: RelayConfig, profile_id: str, identity: str) -> None:
        """Validate the new registration with a real publish before swapping publishers."""
        candidate = await self._publisher_for(config)
        previous, self._candidate = self._publisher, candidate
        if previous is not None:
            candidate.inherit(previous)
        try:
            await candidate.publish_profile(profile_id, identity)
        except Exception as error:
            if self._candidate is candidate:
                self._candidate = None
            if isinstance(error, RelayPairingError):
                raise
            message = "Could not publish the initial Talaria Relay snapshot"
            raise RelayPairingError(message, 502) from error
        await self._adopt(candidate, previous)
        candidate.changed()

    async def _adopt(self, candidate: RelayPublisher, previous: RelayPublisher | None) -> None:
        self._publisher, self._candidate = candidate, None
        if previous is not None:
            # What reached the old publisher during validation is carried over too.
            candidate.inherit(previous)
            await previous.stop()
        await candidate.start(publish_initial=False)

    async def _stop_publisher(self) -> bool:
        """Stop this service's publisher, if it runs one; whether it did."""
        previous, self._publisher, self._candidate = self._publisher, None, None
        if previous is not None:
            await previous.stop()
        return previous is not None

    async def _publisher_for(self, config: RelayConfig) -> RelayPublisher:
        publisher = RelayPublisher(
            config,
            store=self.store,
            host=self.host,
            client=self._client(config.url),
            presence=self.presence,
            owner=self.owner,
            clock=self._clock,
            log=self._log,
            store_clock=self.store_clock,
            store_watch=self.store_watch,
            options=self.publishing,
        )
        await publisher.initialize()
        return publisher

    def _client(self, base_url: str) -> RelayClient:
        if base_url not in self._clients:
            self._clients[base_url] = RelayClient(base_url, http=self._http, clock=self._clock)
        return self._clients[base_url]
