"""What a store holds and how its replicas fare, gathered once: a JSON-ready document, never a
secret (the key is read only for its public fingerprint), for the operator page, its JSON and
`talaria-relay status` (docs/operating.md#status-json). The backlog is counted in the store, so
100,000 ledger entries cost what ten do. A page left open, or many operators at once, must not
load the database: one gather serves every request for `REFRESH_S` seconds (`Gatherer`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from relay.errors import RelayError
from relay.operator.judge import judge
from relay.publishing.fingerprint import key_state
from relay.store import RelayStore, RunState, Waiting, fleet_passes
from relay.store.fleet import FleetMember
from relay.store.migrations import HEAD, Standing, later

if TYPE_CHECKING:
    from relay.publishing.publisher import RelayPublisher

REFRESH_S = 5.0
# Rows shown at most; the document says how many more there were.
MAX_REPLICAS = 200
# A replica gone (no longer live) is listed this long after it was last seen; older ones are
# only counted (the store forgets them after a day).
RECENTLY_MS = 3600 * 1000
# The document's shape (docs/operating.md#status-json says what changed in 2).
VERSION = 2


@dataclass(frozen=True, slots=True)
class Own:
    """What the replica that gathers (the page; `status` has none) knows of itself, passed in by
    the service so this module needs nothing of it: its wall clock minus the store's (None until
    read), its publisher (None: not publishing), the store's silence past the bounded wait."""

    owner: str
    clock_offset_s: float | None = None
    publisher: RelayPublisher | None = None
    store_silent: bool = False
    store_silent_s: float | None = None


def _age_s(now_ms: int, then_ms: int | None) -> float | None:
    return None if then_ms is None else round(max(now_ms - then_ms, 0) / 1000, 1)


def _ms(seconds: float | None) -> int | None:
    """Unix seconds as the document's milliseconds."""
    return None if seconds is None else int(seconds * 1000)


async def gather(
    store: RelayStore,
    now_ms: int,
    own: Own | None = None,
    *,
    answer: bool = False,
    standing: Standing | None = None,
) -> dict[str, Any]:
    """The document of `store` as of `now_ms` (the store's clock), with what `own` knows of
    itself; `standing`, when the caller read it, is the schema's (else it is asked). A store
    that fails (`RelayError`) raises, unless `answer`: the page answers with what it read, the
    failure named in `store.error` and among the problems."""
    document: dict[str, Any] = {
        "version": VERSION,
        "generated_at": now_ms,
        "store": {
            "backend": store.backend_name,
            "url": store.display_url,
            "schema": None if standing is None else standing.document(),
            "error": None,
        },
        "level": "ok",
        "headline": "",
        "problems": [],
        "registration": None,
        "revision_floor": None,
        "profiles": [],
        "fleet": {"source": "leases", "replicas": [], "more": 0, "gone_earlier": 0},
    }
    try:
        await _fill(document, store, now_ms, own)
    except RelayError as error:
        if not answer:
            raise
        document["store"]["error"] = type(error).__name__
    document["level"], document["headline"], document["problems"] = judge(document)
    return document


async def _fill(document: dict[str, Any], store: RelayStore, now_ms: int, own: Own | None) -> None:
    if store.backend_name in ("sqlite", "postgres") and document["store"]["schema"] is None:
        # A store ahead of this code opened only because its record allows this code.
        revision = await store.schema_revision()
        ahead = revision is not None and revision != HEAD and later(revision, HEAD)
        document["store"]["schema"] = Standing(revision, HEAD if ahead else None).document()
    config = await store.load_config()
    publisher = None if own is None else own.publisher
    backlog = await store.backlog()
    leases = await store.presence_leases()
    runs = await store.run_states()
    document["revision_floor"] = await store.revision_floor()
    if config is not None:
        loaded = None if publisher is None else publisher.key_fingerprint(config.key_ref)
        encrypted, fingerprint = await key_state(store, config.key_ref, loaded)
        document["registration"] = {
            "relay_url": config.url,
            "publisher_id": config.publisher_id,
            "key_id": config.key_id,
            "key_fingerprint": fingerprint,
            "key_encrypted": encrypted,
            "generation": config.generation,
        }
        identities = await store.identities()
        for name, grant in config.profiles.items():
            unsent = backlog.unsent.get(grant.profile_id)
            queued = backlog.deleted.get(name)
            matches = identities.get(name) == grant.identity
            why = None if publisher is None else publisher.disabled.get(grant.profile_id)
            if not matches:
                why = "the profile was recreated since it was enrolled: pair it again"
            accepted = None if publisher is None else publisher.accepted.get(name)
            document["profiles"].append(
                {
                    "name": name,
                    "profile_id": grant.profile_id,
                    "identity_matches": matches,
                    "enrolled": why is None,
                    "disabled_why": why,
                    "last_accepted": None
                    if accepted is None
                    else {
                        "at": _ms(accepted.at),
                        "age_s": _age_s(now_ms, _ms(accepted.at)),
                        "revision": accepted.revision,
                        "states": accepted.states,
                    },
                    "presence_leases": sum(
                        lease.profile == name and lease.active and lease.expires_at > now_ms
                        for lease in leases
                    ),
                    "announcements_unsent": 0 if unsent is None else unsent.count,
                    "announcements_oldest_age_s": _age_s(
                        now_ms, None if unsent is None else unsent.oldest
                    ),
                    "outbox_depth": 0 if queued is None else queued.count,
                    "outbox_oldest_age_s": _age_s(
                        now_ms, None if queued is None else queued.oldest
                    ),
                }
            )
    members = await store.fleet()
    found, earlier = _replicas(own, runs, backlog.claims, members, now_ms)
    document["fleet"] = {
        "source": "fleet" if members else "leases",
        "replicas": found[:MAX_REPLICAS],
        "more": max(len(found) - MAX_REPLICAS, 0),
        "gone_earlier": earlier,
    }


def _replicas(
    own: Own | None,
    runs: list[RunState],
    claims: Mapping[str, Waiting],
    members: list[FleetMember],
    now_ms: int,
) -> tuple[list[dict[str, Any]], int]:
    """Every replica the store knows of, by owner: its runs and claims, its fleet row, for `own`
    its loop; and how many gone replicas were last seen before `RECENTLY_MS`."""
    rows: dict[str, dict[str, Any]] = {}

    def row(owner: str) -> dict[str, Any]:
        # `name/incarnation` (a named replica's process); a bare id is an incarnation alone.
        name, _, process = owner.rpartition("/")
        return rows.setdefault(
            owner,
            {
                "owner": owner,
                "name": name or None,
                "incarnation": process,
                "this_replica": own is not None and owner == own.owner,
                "runs": 0,
                "claims": 0,
                "lease_until": 0,
                "alive": False,
                "last_pass": None,
                "backoff_until": None,
                "backoff_failure": None,
                "backoff_status": None,
            },
        )

    for run in runs:
        held = row(run.owner)
        held["runs"] += 1
        held["lease_until"] = max(held["lease_until"], run.lease_until)
    for owner, waiting in claims.items():
        held = row(owner)
        held["claims"] = waiting.count
        held["lease_until"] = max(held["lease_until"], waiting.oldest)
    for held in rows.values():
        held["alive"] = held["lease_until"] > now_ms
    earlier = 0
    for member in members:
        live = member.live(now_ms)
        if not live and member.owner not in rows and now_ms - member.seen_at > RECENTLY_MS:
            earlier += 1
            continue
        held = row(member.owner)
        held.update(_recorded(member, live or held["alive"], now_ms))
    if own is not None:
        mine = row(own.owner)
        mine["alive"] = True
        mine.update(_loop_of(own))
    return [rows[owner] for owner in sorted(rows)], earlier


def _recorded(member: FleetMember, alive: bool, now_ms: int) -> dict[str, Any]:
    """What a replica's fleet row says of it; its backoff is written when a pass fails
    (`relay.publishing.fleet`), its offset and passes since 0009 (None before)."""
    # `RelayHttpError 503`: the class, and the HTTP status when it was an answer.
    failed, _, status = (member.backoff_class or "").partition(" ")
    return {
        "alive": alive,
        "release": member.version,
        "schema_head": member.schema_head,
        "host": member.host,
        "pid": member.pid,
        "started_at": member.started_at,
        "seen_at": member.seen_at,
        "last_pass": None
        if member.pass_at is None
        else {"at": member.pass_at, "outcome": member.pass_outcome},
        "backoff_until": member.backoff_until,
        "backoff_failure": None if member.backoff_class is None else failed,
        "backoff_status": int(status) if status.isdigit() and len(status) == 3 else None,
        "clock_offset_s": None if member.clock_offset_ms is None else member.clock_offset_ms / 1000,
        "passes": fleet_passes.hour(member.passes, member.pass_at, now_ms)
        if member.passes
        else None,
    }


def _loop_of(own: Own) -> dict[str, Any]:
    """What this replica knows now (its fleet row has it as of its last write): its clock, its
    store's silence, and its publisher loop's passes from memory, backoffs to the millisecond."""
    clock = {
        "clock_offset_s": None if own.clock_offset_s is None else round(own.clock_offset_s, 3),
        "store_silent": own.store_silent,
        "store_silent_s": None if own.store_silent_s is None else round(own.store_silent_s, 1),
    }
    publisher = own.publisher
    if publisher is None:
        return {"last_pass": None, "publishing": False, **clock}
    loop = publisher.health()
    return {
        **clock,
        "publishing": not loop.stopped,
        "last_pass": None
        if loop.last_pass is None
        else {"at": _ms(loop.last_pass), "outcome": loop.last_outcome},
        "last_success": _ms(loop.last_success),
        "failures": loop.failures,
        "backoff_until": _ms(loop.backoff_until),
        "ring": [
            {"at": _ms(one.at), "outcome": one.outcome, "backoff_until": _ms(one.backoff_until)}
            for one in publisher.recent_passes()
        ],
        "backoff_failure": loop.last_failure,
        "backoff_status": loop.last_failure_status,
        "pass_age_s": None if loop.pass_age_s is None else round(loop.pass_age_s, 1),
    }


@dataclass
class Gatherer:
    """One gather at a time per service, reused for `REFRESH_S` seconds; `now` is the service's
    clock (Unix seconds), what its leases and backoffs are measured in."""

    store: RelayStore
    own: Callable[[], Own]
    now: Callable[[], float] = time.time
    clock: Callable[[], float] = time.monotonic
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    _document: dict[str, Any] | None = field(default=None, init=False)
    _until: float = field(default=0.0, init=False)

    async def __call__(self) -> dict[str, Any]:
        async with self._lock:
            if self._document is None or self.clock() >= self._until:
                now_ms = int(self.now() * 1000)
                self._document = await gather(self.store, now_ms, self.own(), answer=True)
                self._until = self.clock() + REFRESH_S
            return self._document
