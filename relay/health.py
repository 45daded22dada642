"""What a deployment asks of a relay: `RelayService.health()` in process, `check` from outside.

`Health` is what a running service knows (its store probe, `StoreProbe`, and its publisher's
loop); `talaria-relay check` runs in another process and sees only the store (`StoreHealth`).
Neither ever calls the relay, so a probe cannot add load to it or fail because of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from typing import Any

from relay.errors import RelayError, StoreUnavailableError
from relay.publishing.storewatch import StoreWatch
from relay.store import RelayStore, StoreTarget, open_store, resolve
from relay.store.migrations import HEAD, Standing, standing
from relay.store.url import command

# `talaria-relay check` exit codes, the CLI's own: ready, not ready, store unreachable.
READY, NOT_READY, UNREACHABLE = 0, 1, 3
# How long `health()` waits for its store probe: past it, it answers from what it knows (a
# Kubernetes probe gives up after 1 s by default).
PROBE_WITHIN_S = 0.5


@dataclass(frozen=True, slots=True)
class StoreHealth:
    """What the store says: reachable, at the schema head (None: no schema; true too when the
    database is ahead of this code and compatible with it, as during a rolling deploy),
    registered, and whether its server takes writes (a standby or a read-only server does not)."""

    reachable: bool
    schema_at_head: bool | None
    registered: bool
    writable: bool = True

    @property
    def ready(self) -> bool:
        at_head = self.schema_at_head is not False
        return self.reachable and at_head and self.registered and self.writable


# A store that did not answer: nothing is known of it.
UNKNOWN = StoreHealth(reachable=False, schema_at_head=None, registered=False)


@dataclass(frozen=True, slots=True)
class Health:
    """A service's health; times are Unix seconds of the service's clock.

    `last_success` is the end of the last pass that published without a failure (None: none yet
    in this process); `backoff_until` is set while the publisher waits after a failure;
    `stopped` after a permanent HTTP answer, until a new pairing or a restart; `publishing`
    while a publisher runs in this service (False before `start()`, before pairing, after a
    stored registration was found unusable, and once stopped). `clock_offset_s` is this server's
    wall clock minus the store's, as last measured (None: a store on this host's clock, or none
    measured yet). `pass_age_s` is how long the pass in progress has run (None: none runs); one
    that has run a lease counts among the `consecutive_failures`. `store_silent_s` is how long
    the store has left this replica without an answer (None: its last call answered; a few
    milliseconds while a call is in flight); past the store's bounded wait it is not reachable.
    """

    store_reachable: bool
    schema_at_head: bool | None
    registered: bool
    publishing: bool
    last_success: float | None
    last_success_age_s: float | None
    consecutive_failures: int
    backoff_until: float | None
    stopped: bool
    clock_offset_s: float | None = None
    pass_age_s: float | None = None
    store_silent_s: float | None = None

    @property
    def ready(self) -> bool:
        """Reachable store at head, registered, and a publisher that runs (not stopped for good)."""
        store = StoreHealth(self.store_reachable, self.schema_at_head, self.registered)
        return store.ready and self.publishing and not self.stopped


async def store_health(store: RelayStore) -> StoreHealth:
    """Two cheap reads (the revision floor, the registration) and the schema revision if SQL."""
    try:
        await store.revision_floor()
    except RelayError:
        return UNKNOWN
    registered = False  # unreadable registration: the publisher would not start either
    with contextlib.suppress(RelayError):
        registered = await store.load_config() is not None
    at_head = None
    if store.backend_name in ("sqlite", "postgres"):  # only SQL stores have a schema
        try:
            revision = await store.schema_revision()
            # The store opened, so a database ahead of this code is one compatible with it.
            at_head = revision == HEAD or Standing(revision).ahead
        except RelayError:
            return StoreHealth(reachable=False, schema_at_head=None, registered=registered)
    return StoreHealth(reachable=True, schema_at_head=at_head, registered=registered)


class StoreProbe:
    """`store_health`, waited for `PROBE_WITHIN_S` at most: one probe in flight at a time, its
    outcome noted by the watch; past the bound, the last answer, reachable unless the store is
    silent (`StoreWatch.silent`)."""

    def __init__(self, store: RelayStore, watch: StoreWatch) -> None:
        self._store, self._watch = store, watch
        self._task: asyncio.Task[StoreHealth] | None = None
        self._last = StoreHealth(reachable=True, schema_at_head=None, registered=False)

    async def __call__(self) -> StoreHealth:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._probe(), name="talaria-relay-health-probe")
        done, _ = await asyncio.wait({self._task}, timeout=PROBE_WITHIN_S)
        if done:
            return self._task.result()
        self._watch.check()
        return replace(self._last, reachable=self._last.reachable and not self._watch.silent)

    async def _probe(self) -> StoreHealth:
        async def answered() -> StoreHealth:
            found = await store_health(self._store)
            if not found.reachable:
                raise StoreUnavailableError("the store did not answer the health probe")
            return found

        try:
            self._last = await self._watch.call(answered())
        except StoreUnavailableError:
            self._last = UNKNOWN
        return self._last

    async def close(self) -> None:
        """Cancel a probe still waiting (the service stops)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def missing(target: StoreTarget) -> bool:
    """A file store that does not exist yet (opening one would create it)."""
    if target.backend == "json":
        return target.path is not None and not target.path.is_dir()
    return target.backend == "sqlite" and target.path is not None and not target.path.exists()


def absence(target: StoreTarget) -> str | None:
    """What `status`, `check` and the other readers say of a file store that is not there."""
    if not missing(target):
        return None
    assert target.path is not None
    hint = ""
    if target.backend == "sqlite":
        hint = " (sqlite:///relay.db is relative to here, sqlite:////srv/relay.db absolute)"
    return f"no {target.name} store at {target.path.absolute()}{hint}; nothing created"


@dataclass(frozen=True, slots=True)
class Probe:
    """What `talaria-relay check` found at one store, and why it is not ready."""

    target: StoreTarget
    found: StoreHealth
    problem: str | None
    schema: Standing | None = None

    @property
    def code(self) -> int:
        if self.found.ready:
            return READY
        return NOT_READY if self.found.reachable else UNREACHABLE

    def document(self) -> dict[str, Any]:
        """The `--json` shape (docs/operating.md, "Health")."""
        return {
            "ready": self.found.ready,
            "store": {"backend": self.target.backend, "url": self.target.display},
            "reachable": self.found.reachable,
            "schema_at_head": self.found.schema_at_head,
            "registered": self.found.registered,
            "problem": self.problem,
            "schema": None if self.schema is None else self.schema.document(),
            "exit": self.code,
        }

    def line(self) -> str:
        """One line for a terminal: ready or not, and why; a database ahead of this code says so."""
        schema = self.schema
        ahead = f" (the database {schema.summary()})" if schema and schema.ahead else ""
        if self.problem is None:
            return f"{self.target.display} is ready{ahead}"
        return f"{self.target.display} is not ready: {self.problem}"


async def probe(url: str | None) -> Probe:
    """Readiness of the store at `url`, read only: a missing store is not created, a SQLite file
    is not migrated, and the relay is never called."""
    target = resolve(url)
    # Before the schema: a file that is not there has no schema to be below (`status` agrees).
    if (absent := absence(target)) is not None:
        return Probe(target, UNKNOWN, absent)
    schema = None
    try:
        if target.url is not None:
            schema = await standing(target)
            below = StoreHealth(reachable=True, schema_at_head=False, registered=False)
            if schema.below:
                problem = f"below the schema head: run {command('migrate', target)}"
                return Probe(target, below, problem, schema)
            if not schema.compatible and not schema.at_head:
                problem = f"the database {schema.summary()}: it needs {schema.needs()}"
                return Probe(target, below, problem, schema)
        async with open_store(url) as store:
            found = await store_health(store)
            refusal = await store.unwritable() if found.reachable else None
    except StoreUnavailableError as error:
        return Probe(target, UNKNOWN, str(error), schema)
    if not found.reachable:
        return Probe(target, found, "the store did not answer", schema)
    if refusal is not None:
        return Probe(target, replace(found, writable=False), refusal, schema)
    if not found.registered:
        problem = "not registered: pair the server with Talaria Relay"
        return Probe(target, found, problem, schema)
    return Probe(target, found, None, schema)
